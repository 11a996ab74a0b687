"""Finding and loading libkiln_runtime.so, and the ctypes declarations of its C API
(runtime/include/kiln/runtime.h). Everything here is private to the package."""

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

from .errors import KilnError, LibraryNotFoundError, error_for_status

LIBRARY_NAME = "libkiln_runtime.so"
MAX_RANK = 8  # KILN_MAX_RANK

PACKAGE_DIR = Path(__file__).resolve().parent
# python/kiln/ -> the repository root (when the package is used from a checkout).
REPO_DIR = PACKAGE_DIR.parent.parent


class TensorInfoC(ctypes.Structure):
    """kiln_tensor_info."""
    _fields_ = [("name", ctypes.c_char_p),
                ("dtype", ctypes.c_int32),
                ("rank", ctypes.c_int32),
                ("size_axis", ctypes.c_int32),
                ("coef", ctypes.c_int64 * MAX_RANK),
                ("offset", ctypes.c_int64 * MAX_RANK)]


class TensorC(ctypes.Structure):
    """kiln_tensor."""
    _fields_ = [("name", ctypes.c_char_p),
                ("dtype", ctypes.c_int32),
                ("rank", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_RANK),
                ("data", ctypes.c_void_p),
                ("bytes", ctypes.c_size_t),
                ("on_device", ctypes.c_int32)]


class GeneratorOptionsC(ctypes.Structure):
    """kiln_generator_options."""
    _fields_ = [("mode", ctypes.c_int32),
                ("max_blocks", ctypes.c_int64),
                ("memory_fraction", ctypes.c_double),
                ("return_logits", ctypes.c_int32)]


class SequenceOptionsC(ctypes.Structure):
    """kiln_sequence_options."""
    _fields_ = [("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float),
                ("seed", ctypes.c_uint64),
                ("max_new_tokens", ctypes.c_int64),
                ("stop_tokens", ctypes.POINTER(ctypes.c_int64)),
                ("n_stop_tokens", ctypes.c_size_t)]


class StepTokenC(ctypes.Structure):
    """kiln_step_token."""
    _fields_ = [("seq", ctypes.c_int64),
                ("token", ctypes.c_int64),
                ("finished", ctypes.c_int32),
                ("logits", ctypes.POINTER(ctypes.c_float)),
                ("logits_capacity", ctypes.c_size_t)]


class KvCacheInfoC(ctypes.Structure):
    """kiln_kv_cache_info."""
    _fields_ = [("num_blocks", ctypes.c_int64),
                ("free_blocks", ctypes.c_int64),
                ("block_size", ctypes.c_int64),
                ("max_sequences", ctypes.c_int64),
                ("max_seq_len", ctypes.c_int64),
                ("live_sequences", ctypes.c_int64),
                ("bytes", ctypes.c_int64)]


_P = ctypes.POINTER
_vp = ctypes.c_void_p
_status = ctypes.c_int
# name: (restype, argtypes). Handles are opaque void pointers.
_PROTOTYPES = {
    "kiln_last_error": (ctypes.c_char_p, []),
    "kiln_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "kiln_dtype_size": (ctypes.c_size_t, [ctypes.c_int32]),
    "kiln_device_available": (ctypes.c_int, []),
    "kiln_model_load": (_status, [ctypes.c_char_p, _P(_vp)]),
    "kiln_model_load_trusted": (_status, [ctypes.c_char_p, _P(ctypes.c_char_p), ctypes.c_size_t,
                                          _P(_vp)]),
    "kiln_model_free": (None, [_vp]),
    "kiln_model_input_count": (_status, [_vp, _P(ctypes.c_size_t)]),
    "kiln_model_output_count": (_status, [_vp, _P(ctypes.c_size_t)]),
    "kiln_model_max_size": (_status, [_vp, _P(ctypes.c_int64)]),
    "kiln_model_input_info": (_status, [_vp, ctypes.c_size_t, _P(TensorInfoC)]),
    "kiln_model_output_info": (_status, [_vp, ctypes.c_size_t, _P(TensorInfoC)]),
    "kiln_executor_create": (_status, [_vp, ctypes.c_int, _P(_vp)]),
    "kiln_executor_free": (None, [_vp]),
    "kiln_executor_mode": (_status, [_vp, _P(ctypes.c_int32)]),
    "kiln_executor_downgrade_reason": (_status, [_vp, _P(ctypes.c_char_p)]),
    "kiln_executor_captured_sizes": (_status, [_vp, _P(_P(ctypes.c_int64)),
                                               _P(ctypes.c_size_t)]),
    "kiln_executor_run": (_status, [_vp, _P(TensorC), ctypes.c_size_t, _P(TensorC),
                                    ctypes.c_size_t]),
    "kiln_executor_run_async": (_status, [_vp, _P(TensorC), ctypes.c_size_t, _P(TensorC),
                                          ctypes.c_size_t, _vp]),
    "kiln_generator_options_init": (None, [_P(GeneratorOptionsC)]),
    "kiln_sequence_options_init": (None, [_P(SequenceOptionsC)]),
    "kiln_generator_create": (_status, [_vp, _P(GeneratorOptionsC), _P(_vp)]),
    "kiln_generator_free": (None, [_vp]),
    "kiln_generator_add": (_status, [_vp, ctypes.c_int64, _P(SequenceOptionsC)]),
    "kiln_generator_prefill": (_status, [_vp, ctypes.c_int64, _P(ctypes.c_int64),
                                         ctypes.c_size_t, _P(StepTokenC)]),
    "kiln_generator_decode": (_status, [_vp, _P(ctypes.c_int64), ctypes.c_size_t,
                                        _P(StepTokenC)]),
    "kiln_generator_free_sequence": (_status, [_vp, ctypes.c_int64]),
    "kiln_generator_kv_cache_info": (_status, [_vp, _P(KvCacheInfoC)]),
    "kiln_generator_vocab_size": (_status, [_vp, _P(ctypes.c_int64)]),
    "kiln_generator_mode": (_status, [_vp, _P(ctypes.c_int32)]),
    "kiln_generator_downgrade_reason": (_status, [_vp, _P(ctypes.c_char_p)]),
}
# Functions every library must have; the generator's are looked up when first used.
_REQUIRED = [n for n in _PROTOTYPES if not n.startswith("kiln_generator")
             and not n.startswith("kiln_sequence")]

_lock = threading.Lock()
_lib = None
_lib_path = None


def candidate_paths():
    """(where, path) pairs tried in order after $KILN_LIBRARY: next to the package, then the
    build and staging folders of the checkout the package sits in and of the current
    directory."""
    out = []
    for where, base in (("package", PACKAGE_DIR), ("package", PACKAGE_DIR / "lib"),
                        ("checkout", REPO_DIR / "build" / "runtime"),
                        ("checkout", REPO_DIR / ".stage" / "lib"),
                        ("cwd", Path.cwd() / "build" / "runtime"),
                        ("cwd", Path.cwd() / ".stage" / "lib")):
        p = base / LIBRARY_NAME
        if all(p != q for _, q in out):
            out.append((where, p))
    return out


def find_library_path():
    """The path load_library() would try first (without loading anything), or None when only
    the loader's search path is left."""
    env = os.environ.get("KILN_LIBRARY")
    if env:
        return Path(env)
    for _, p in candidate_paths():
        if p.is_file():
            return p
    return None


def _open(path):
    """dlopen a library file; its libkiln_cache.so, when it lies beside it (a staged lib/
    folder), first, so the loader finds it without LD_LIBRARY_PATH."""
    path = Path(path)
    cache = path.parent / "libkiln_cache.so"
    if cache.is_file():
        try:
            ctypes.CDLL(str(cache), mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass  # the runtime library's own run path may still find its copy
    return ctypes.CDLL(str(path))


def _declare(lib):
    missing = []
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is None:
            if name in _REQUIRED:
                missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    return missing


def load_library():
    """The loaded libkiln_runtime (a ctypes.CDLL); loads it on first use.

    Order: $KILN_LIBRARY (a path to the .so; nothing else is tried when it is set), then
    libkiln_runtime.so next to the package, in the checkout's build/runtime/ and .stage/lib/,
    in ./build/runtime/ and ./.stage/lib/, then the loader's search path (LD_LIBRARY_PATH,
    ldconfig: ctypes.util.find_library("kiln_runtime"), then the bare name)."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        env = os.environ.get("KILN_LIBRARY")
        if env:
            attempts = [("$KILN_LIBRARY", env)]
        else:
            attempts = [(w, str(p)) for w, p in candidate_paths()]
            found = ctypes.util.find_library("kiln_runtime")
            if found:
                attempts.append(("ctypes.util.find_library", found))
            attempts.append(("loader search path", LIBRARY_NAME))
        for where, path in attempts:
            is_path = os.sep in path
            if is_path and not os.path.isfile(path):
                tried.append(f"{path} ({where}): no such file")
                continue
            try:
                lib = _open(path) if is_path else ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({where}): {e}")
                continue
            missing = _declare(lib)
            if missing:
                tried.append(f"{path} ({where}): not kiln's runtime library (lacks "
                             f"{', '.join(missing)})")
                continue
            _lib, _lib_path = lib, path
            return lib
        raise LibraryNotFoundError(
            "cannot load libkiln_runtime.so; set KILN_LIBRARY to its path (build/runtime/ of a "
            "build, .stage/lib/ of a staged tree). Tried:\n  " + "\n  ".join(tried))


def library_path():
    """The path of the loaded library (loading it if needed)."""
    load_library()
    return _lib_path


def last_error():
    msg = load_library().kiln_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def status_name(status):
    name = load_library().kiln_status_name(int(status))
    return name.decode() if name else "UNKNOWN"


def check(status, what=None):
    """Raises the KilnError of a failed call (status != 0) with kiln_last_error()'s message.
    Must run on the thread that made the call (the message is per thread)."""
    if status == 0:
        return
    msg = last_error() or "(no message)"
    if what:
        msg = f"{what}: {msg}"
    raise error_for_status(int(status), status_name(status), msg)


def function(name):
    """A C function of the library, declared; KilnError when this build lacks it."""
    lib = load_library()
    fn = getattr(lib, name, None)
    if fn is None:
        raise KilnError(f"{library_path()} has no {name} (an older libkiln_runtime?)",
                        status="UNIMPLEMENTED")
    return fn


# ---- cudart, only for synchronising the stream of a __cuda_array_interface__ object

_cudart = None


def cudart():
    """The CUDA runtime libkiln_runtime loaded (found in /proc/self/maps), else one the loader
    finds; used only for cudaStreamSynchronize."""
    global _cudart
    if _cudart is not None:
        return _cudart
    load_library()
    names = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "libcudart.so" in os.path.basename(parts[-1]):
                    if parts[-1] not in names:
                        names.append(parts[-1])
    except OSError:
        pass
    names += ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    errors = []
    for n in names:
        try:
            lib = ctypes.CDLL(n)
            lib.cudaStreamSynchronize.restype = ctypes.c_int
            lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
            _cudart = lib
            return lib
        except (OSError, AttributeError) as e:
            errors.append(f"{n}: {e}")
    raise KilnError("cannot load the CUDA runtime to synchronise a stream: " + "; ".join(errors),
                    status="FAILED_PRECONDITION")


def stream_synchronize(stream):
    """cudaStreamSynchronize(stream); stream is an integer handle (1: the legacy default
    stream, 2: the per-thread default stream, as __cuda_array_interface__ writes them)."""
    rc = cudart().cudaStreamSynchronize(ctypes.c_void_p(int(stream)))
    if rc != 0:
        raise KilnError(f"cudaStreamSynchronize(stream {stream:#x}) failed with cudaError {rc}",
                        status="INTERNAL")


class OwnedHandle:
    """A C object this Python object owns: `_handle` (None once closed), freed by the C function
    named `_FREE` on close(), at the end of a `with` block or when collected. `_WHAT` names the
    object in the error for use after close."""

    _FREE = None
    _WHAT = "object"
    _handle = None

    @property
    def closed(self):
        return self._handle is None

    def _live(self):
        if self._handle is None:
            from .errors import FailedPreconditionError
            raise FailedPreconditionError(f"the {self._WHAT} is closed")
        return self._handle

    def close(self):
        """Frees the C object (an executor or generator first waits for its work)."""
        h, self._handle = self._handle, None
        if h is not None and _lib is not None:
            getattr(_lib, self._FREE)(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass
