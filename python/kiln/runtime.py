"""Models and executors over the C API (runtime/include/kiln/runtime.h): load an artifact, read
its inputs and outputs, create executors (each captures its CUDA graphs when created) and run
them with host arrays (numpy, CPU torch tensors) or device tensors (torch CUDA tensors, any
object with __cuda_array_interface__) in and out."""

import ctypes
import os
import sys
import time

from . import _lib
from .errors import InternalError, InvalidArgumentError, KilnError

# kiln_dtype -> (name, bytes per element). Names are numpy's (bfloat16: ml_dtypes').
DTYPES = {1: ("float32", 4), 2: ("float16", 2), 3: ("bfloat16", 2), 4: ("float64", 8),
          5: ("int64", 8), 6: ("int32", 4), 7: ("int8", 1), 8: ("uint8", 1), 9: ("bool", 1)}
_DTYPE_BY_NAME = {name: code for code, (name, _) in DTYPES.items()}
# __cuda_array_interface__ / numpy typestr (without the byte order) -> kiln_dtype.
_TYPESTR = {"f4": 1, "f2": 2, "f8": 4, "i8": 5, "i4": 6, "i1": 7, "u1": 8, "b1": 9}

# kiln_graph_mode names -> values; ARTIFACT: the mode the artifact was compiled with.
MODES = {"ARTIFACT": -1, "NONE": 0, "PIECEWISE": 1, "FULL": 2, "FULL_DECODE_ONLY": 3,
         "FULL_AND_PIECEWISE": 4}
MODE_NAMES = {v: k for k, v in MODES.items()}


def device_available():
    """True when a CUDA device is usable here (kiln_device_available)."""
    return bool(_lib.load_library().kiln_device_available())


def device_error():
    """Why no CUDA device is usable ("" when one is)."""
    if _lib.load_library().kiln_device_available():
        return ""
    return _lib.last_error()


def numpy_dtype(name):
    """The numpy dtype of a kiln dtype name; bfloat16 needs the ml_dtypes package."""
    import numpy as np
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise KilnError("bfloat16 host arrays need the ml_dtypes package (numpy has no "
                            "bfloat16); pass a torch tensor instead", status="UNIMPLEMENTED")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


class Dim:
    """The symbolic dim coef * S + offset of a model input or output (S: the run's size)."""

    __slots__ = ("coef", "offset")

    def __init__(self, coef, offset=0):
        self.coef, self.offset = int(coef), int(offset)

    def at(self, size):
        return self.coef * int(size) + self.offset

    def __eq__(self, other):
        if isinstance(other, str):
            return str(self) == other.replace(" ", "")
        return isinstance(other, Dim) and (self.coef, self.offset) == (other.coef, other.offset)

    def __hash__(self):
        return hash((self.coef, self.offset))

    def __str__(self):
        s = "S" if self.coef == 1 else f"{self.coef}*S"
        if self.offset:
            s += f"{self.offset:+d}"
        return s

    __repr__ = __str__


class TensorInfo:
    """A model input or output: name, dtype (a numpy dtype), dtype_name ("float32", ...),
    kiln_dtype (the kiln_dtype value), dims (ints, and a Dim for the axis that grows with the
    size S), size_axis (-1 when none)."""

    def __init__(self, name, kiln_dtype, coef, offset, size_axis=-1):
        if kiln_dtype not in DTYPES:
            raise InvalidArgumentError(f"'{name}': kiln dtype {kiln_dtype} is not a kiln_dtype")
        self.name = name
        self.kiln_dtype = int(kiln_dtype)
        self.dtype_name, self.itemsize = DTYPES[self.kiln_dtype]
        self.coef = tuple(int(c) for c in coef)
        self.offset = tuple(int(o) for o in offset)
        self.size_axis = int(size_axis)
        self.dims = tuple(Dim(c, o) if c else o for c, o in zip(self.coef, self.offset))

    @property
    def dtype(self):
        return numpy_dtype(self.dtype_name)

    @property
    def rank(self):
        return len(self.dims)

    def shape(self, size):
        """The shape at size S."""
        return tuple(c * int(size) + o for c, o in zip(self.coef, self.offset))

    def nbytes(self, size):
        n = self.itemsize
        for d in self.shape(size):
            n *= d
        return n

    def describe(self):
        return f"{self.name} ({self.dtype_name}, [{', '.join(map(str, self.dims))}])"

    def __repr__(self):
        return f"TensorInfo({self.describe()})"


def _info_from_c(c):
    rank = int(c.rank)
    return TensorInfo(c.name.decode(), int(c.dtype), list(c.coef[:rank]), list(c.offset[:rank]),
                      int(c.size_axis))


def _parse_mode(mode):
    if mode is None:
        return -1
    if isinstance(mode, str):
        key = mode.strip().upper()
        if key not in MODES:
            raise InvalidArgumentError(f"unknown graph mode '{mode}' (one of "
                                       f"{', '.join(MODES)})")
        return MODES[key]
    if isinstance(mode, int) and not isinstance(mode, bool) and mode in MODE_NAMES:
        return mode
    raise InvalidArgumentError(f"graph mode {mode!r}: a name ({', '.join(MODES)}) or a "
                               "kiln_graph_mode value (-1 to 4)")


def _named(tensors, name, what):
    """The TensorInfo called `name` among `tensors` (the model's inputs or outputs)."""
    for t in tensors:
        if t.name == name:
            return t
    raise InvalidArgumentError(f"the model has no {what} '{name}' ({what}s: "
                               f"{', '.join(t.name for t in tensors)})")


class Model(_lib.OwnedHandle):
    """A loaded artifact (kiln_model). Use `kiln.load(dir)`. close() frees this reference
    (executors and generators keep the model alive)."""

    _FREE = "kiln_model_free"

    def __init__(self, path, trusted_keys=None):
        self.path = os.fspath(path)
        self._WHAT = f"model '{self.path}'"
        lib = _lib.load_library()
        handle = ctypes.c_void_p()
        t0 = time.perf_counter()
        if trusted_keys:
            keys = (ctypes.c_char_p * len(trusted_keys))(*(k.encode() for k in trusted_keys))
            status = lib.kiln_model_load_trusted(os.fsencode(self.path), keys, len(trusted_keys),
                                                 ctypes.byref(handle))
        else:
            status = lib.kiln_model_load(os.fsencode(self.path), ctypes.byref(handle))
        _lib.check(status, f"loading '{self.path}'")
        self.load_seconds = time.perf_counter() - t0
        self._handle = handle
        try:
            n_in, n_out, max_size = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_int64()
            _lib.check(lib.kiln_model_input_count(handle, ctypes.byref(n_in)))
            _lib.check(lib.kiln_model_output_count(handle, ctypes.byref(n_out)))
            _lib.check(lib.kiln_model_max_size(handle, ctypes.byref(max_size)))
            self.max_size = int(max_size.value)
            infos = []
            for fn, n in ((lib.kiln_model_input_info, n_in.value),
                          (lib.kiln_model_output_info, n_out.value)):
                part = []
                for i in range(n):
                    c = _lib.TensorInfoC()
                    _lib.check(fn(handle, i, ctypes.byref(c)))
                    part.append(_info_from_c(c))
                infos.append(part)
            self.inputs, self.outputs = infos
        except BaseException:
            self.close()
            raise

    def input(self, name):
        return _named(self.inputs, name, "input")

    def output(self, name):
        return _named(self.outputs, name, "output")

    def executor(self, mode="ARTIFACT"):
        """A new executor (its CUDA graphs are captured now). mode: a kiln_graph_mode name
        ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"), or "ARTIFACT"
        (or None) for the mode the artifact was compiled with."""
        return Executor(self, mode)

    def generator(self, **options):
        """A generator for a model compiled with `kv_cache:` (kiln.Generator)."""
        from .generator import Generator
        return Generator(self, **options)

    def __repr__(self):
        state = "closed" if self.closed else f"max_size {self.max_size}"
        return (f"<kiln.Model '{self.path}' {state}; inputs "
                f"{', '.join(t.describe() for t in getattr(self, 'inputs', []))}; outputs "
                f"{', '.join(t.describe() for t in getattr(self, 'outputs', []))}>")


def load(path, trusted_keys=None):
    """Loads a compiled artifact: an artifact directory, or a cache root holding exactly one
    (what `kiln compile -o DIR` writes). Needs a CUDA GPU (the weights are uploaded now).
    trusted_keys: public keys (the text of `kiln keygen` .pub files, or their 64 hex digits);
    when given, the artifact must be signed by one of them (cache/FORMAT.md, "Signature"),
    checked before any GPU work."""
    return Model(path, trusted_keys)


# ---------------------------------------------------------------- tensors


class _Arg:
    """A caller's tensor, as kiln sees it."""
    __slots__ = ("kiln_dtype", "dtype_name", "shape", "ptr", "nbytes", "on_device", "keep",
                 "what", "stream", "torch_device")

    def __init__(self, kiln_dtype, shape, ptr, nbytes, on_device, keep, what, stream=None,
                 torch_device=None):
        self.kiln_dtype, self.shape, self.ptr, self.nbytes = kiln_dtype, tuple(shape), ptr, nbytes
        self.dtype_name = DTYPES[kiln_dtype][0] if kiln_dtype in DTYPES else None
        self.on_device, self.keep, self.what = on_device, keep, what
        self.stream, self.torch_device = stream, torch_device


def _is_torch_tensor(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _torch_arg(t, label, output):
    code = _DTYPE_BY_NAME.get(str(t.dtype).replace("torch.", ""))
    if code is None:
        raise InvalidArgumentError(f"{label}: torch dtype {t.dtype} has no kiln dtype")
    where = f"torch {t.device.type} tensor"
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{label}: the {where} is not contiguous (strides "
                                   f"{tuple(t.stride())}, shape {tuple(t.shape)}); pass "
                                   ".contiguous()")
    if output and t.requires_grad:
        raise InvalidArgumentError(f"{label}: the output tensor requires grad")
    on_device = t.device.type == "cuda"
    if not on_device and t.device.type != "cpu":
        raise InvalidArgumentError(f"{label}: a torch tensor on '{t.device}'; kiln takes CUDA "
                                   "or CPU tensors")
    return _Arg(code, tuple(t.shape), t.data_ptr(), t.numel() * t.element_size(),
                1 if on_device else 0, t, f"{where} of {str(t.dtype).replace('torch.', '')}",
                torch_device=t.device if on_device else None)


def _c_contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    expect = itemsize
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


def _cai_arg(obj, label, output):
    cai = obj.__cuda_array_interface__
    typestr = cai.get("typestr", "")
    if typestr[:1] == ">" or typestr[1:] not in _TYPESTR:
        raise InvalidArgumentError(f"{label}: __cuda_array_interface__ typestr '{typestr}' has "
                                   "no kiln dtype")
    code = _TYPESTR[typestr[1:]]
    shape = tuple(int(d) for d in cai["shape"])
    itemsize = DTYPES[code][1]
    strides = cai.get("strides")
    if not _c_contiguous(shape, strides, itemsize):
        raise InvalidArgumentError(f"{label}: the device array is not C-contiguous (strides "
                                   f"{tuple(strides)}, shape {shape})")
    if cai.get("mask") is not None:
        raise InvalidArgumentError(f"{label}: masked device arrays are not supported")
    ptr, readonly = cai["data"]
    if output and readonly:
        raise InvalidArgumentError(f"{label}: the device array is read-only")
    n = itemsize
    for d in shape:
        n *= d
    return _Arg(code, shape, int(ptr or 0), n, 1, obj,
                f"device array ({type(obj).__name__}) of {DTYPES[code][0]}",
                stream=cai.get("stream"))


def _host_arg(obj, label, output):
    try:
        import numpy as np
    except ImportError:
        raise InvalidArgumentError(f"{label}: {type(obj).__name__} is not a device tensor and "
                                   "numpy is not installed for host arrays")
    if not isinstance(obj, np.ndarray):
        if output:
            raise InvalidArgumentError(f"{label}: an output must be a numpy array or a device "
                                       f"tensor, got {type(obj).__name__}")
        obj = np.asarray(obj)
    name = obj.dtype.name
    code = _DTYPE_BY_NAME.get(name)
    if code is None:
        raise InvalidArgumentError(f"{label}: numpy dtype {obj.dtype} has no kiln dtype")
    if not obj.flags.c_contiguous:
        if output:
            raise InvalidArgumentError(f"{label}: the output array is not C-contiguous")
        obj = np.ascontiguousarray(obj)  # an input: a contiguous copy
    if output and not obj.flags.writeable:
        raise InvalidArgumentError(f"{label}: the output array is read-only")
    return _Arg(code, obj.shape, obj.ctypes.data if obj.size else 0, obj.nbytes, 0, obj,
                f"numpy array of {name}")


def as_arg(obj, label, output=False):
    """The kiln view of a tensor argument: torch tensors (CUDA or CPU), objects with
    __cuda_array_interface__ (device), else numpy arrays (host)."""
    if _is_torch_tensor(obj):
        return _torch_arg(obj, label, output)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cai_arg(obj, label, output)
    return _host_arg(obj, label, output)


def _describe(infos):
    return "; ".join(t.describe() for t in infos)


def infer_size(infos, args, max_size, size=None):
    """The run's size S from the inputs' shapes, checking every input's dtype, rank and dims.
    infos: the model's inputs (TensorInfo); args: name -> _Arg. Raises InvalidArgumentError."""
    by_name = {t.name: t for t in infos}
    unknown = [n for n in args if n not in by_name]
    if unknown:
        raise InvalidArgumentError(
            f"unknown input{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(n) for n in unknown)}; the model's inputs are: {_describe(infos)}")
    missing = [t.name for t in infos if t.name not in args]
    if missing:
        raise InvalidArgumentError(f"missing input{'s' if len(missing) > 1 else ''} "
                                   f"{', '.join(repr(n) for n in missing)} (the model's inputs "
                                   f"are: {_describe(infos)})")
    implied = {}  # size -> the input that implies it
    if size is not None:
        size = int(size)
        implied[size] = "size="
    for t in infos:
        a = args[t.name]
        label = f"input '{t.name}'"
        if a.kiln_dtype != t.kiln_dtype:
            raise InvalidArgumentError(f"{label}: got a {a.what}; the model takes "
                                       f"{t.dtype_name}")
        if len(a.shape) != t.rank:
            raise InvalidArgumentError(f"{label}: shape {list(a.shape)} has rank {len(a.shape)};"
                                       f" the model takes rank {t.rank} "
                                       f"[{', '.join(map(str, t.dims))}]")
        for axis, (c, o, d) in enumerate(zip(t.coef, t.offset, a.shape)):
            if c == 0:
                if d != o:
                    raise InvalidArgumentError(
                        f"{label}: dim {axis} is {d}; the model fixes it at {o} (shape "
                        f"[{', '.join(map(str, t.dims))}], got {list(a.shape)})")
                continue
            s, rem = divmod(d - o, c)
            if rem or s < 1:
                raise InvalidArgumentError(
                    f"{label}: dim {axis} is {d}, which is not {Dim(c, o)} for any size S >= 1")
            if s not in implied and implied:
                other_s, other = next(iter(implied.items()))
                raise InvalidArgumentError(
                    f"{label}: dim {axis} = {d} means size {s}, but {other} means size "
                    f"{other_s}; every input must be at one size")
            implied.setdefault(s, label)
    if not implied:
        return 1  # no input grows with the size: the model runs at S = 1
    s = next(iter(implied))
    if s < 1 or s > max_size:
        raise InvalidArgumentError(f"size {s} is outside [1, max_size = {max_size}]")
    return s


def _check_output(t, a, s):
    label = f"output '{t.name}'"
    if a.kiln_dtype != t.kiln_dtype:
        raise InvalidArgumentError(f"{label}: got a {a.what}; the model writes {t.dtype_name}")
    want = t.shape(s)
    if a.shape != want:
        raise InvalidArgumentError(f"{label}: shape {list(a.shape)}; at size {s} it is "
                                   f"{list(want)} ([{', '.join(map(str, t.dims))}])")


def _fill(c, name_bytes, a):
    c.name = name_bytes
    c.dtype = a.kiln_dtype
    c.rank = len(a.shape)
    for i, d in enumerate(a.shape):
        c.shape[i] = d
    c.data = a.ptr or None
    c.bytes = a.nbytes
    c.on_device = a.on_device


class Executor(_lib.OwnedHandle):
    """An executor of a model (kiln_executor): its own CUDA stream, arena and captured graphs.
    Use `model.executor(mode)`.

    `requested_mode` is the mode asked for ("ARTIFACT": the artifact's); `mode` the one it runs
    after any downgrade (a model not compiled for generation runs FULL_DECODE_ONLY as NONE and
    FULL_AND_PIECEWISE as PIECEWISE; a mode without capture sizes runs NONE), with the reason in
    `downgrade_reason` ("" when none); `captured_sizes` the sizes with a CUDA graph, ascending."""

    _FREE = "kiln_executor_free"
    _WHAT = "executor"

    def __init__(self, model, mode="ARTIFACT"):
        value = _parse_mode(mode)
        self.requested_mode = MODE_NAMES[value]
        self.inputs, self.outputs, self.max_size = model.inputs, model.outputs, model.max_size
        self.model_path = model.path
        lib = _lib.load_library()
        handle = ctypes.c_void_p()
        t0 = time.perf_counter()
        _lib.check(lib.kiln_executor_create(model._live(), value, ctypes.byref(handle)),
                   f"creating a {self.requested_mode} executor")
        self.create_seconds = time.perf_counter() - t0
        self._handle = handle
        m, reason = ctypes.c_int32(), ctypes.c_char_p()
        sizes, n = ctypes.POINTER(ctypes.c_int64)(), ctypes.c_size_t()
        _lib.check(lib.kiln_executor_mode(handle, ctypes.byref(m)))
        _lib.check(lib.kiln_executor_downgrade_reason(handle, ctypes.byref(reason)))
        _lib.check(lib.kiln_executor_captured_sizes(handle, ctypes.byref(sizes), ctypes.byref(n)))
        self.mode = MODE_NAMES.get(int(m.value), str(m.value))
        self.downgrade_reason = (reason.value or b"").decode()
        self.captured_sizes = [int(sizes[i]) for i in range(n.value)]
        self._names = {t.name: t.name.encode() for t in self.inputs + self.outputs}

    def run(self, inputs, outputs=None, size=None, sync_streams=True, stream=None):
        """Runs one request; returns {output name: tensor}.

        inputs: {name: tensor} with every model input, all at one size S (inferred from their
        shapes; `size` only for a model whose inputs have no size axis). A tensor is a numpy
        array (host; a non-contiguous one is copied), a CPU torch tensor (host), a CUDA torch
        tensor or any object with __cuda_array_interface__ (device memory, read in place:
        no host copy). outputs: None -> every output as a new numpy array of the run's shape;
        or {name: tensor} -> only those outputs, written into the given tensors (contiguous,
        the output's dtype, exactly its shape at S; device tensors are written in place) and
        returned. sync_streams: before the run, synchronise the CUDA stream each device tensor
        belongs to (torch's current stream for torch tensors, the interface's `stream`), since
        kiln copies on its own stream and waits for no other; on return kiln's work is done
        (kiln_executor_run is synchronous). stream: None, or a CUDA stream (a torch.cuda.Stream
        or an integer cudaStream_t, 1 being the legacy default stream): the run is ordered on it
        instead (kiln_executor_run_async: it starts after the work already enqueued there, work
        enqueued later waits for it) and returns without waiting for the device; every input
        and output must then be a device tensor, and sync_streams is not used."""
        return self.bind(inputs, outputs, size, sync_streams, stream)()

    def bind(self, inputs, outputs=None, size=None, sync_streams=True, stream=None):
        """Checks a request once (as run() does) and returns a BoundRun: calling it runs that
        request again on the same tensors, without the checks, and returns the outputs (for a
        loop over buffers whose contents change but which stay alive and in place)."""
        self._live()
        if not isinstance(inputs, dict):
            raise InvalidArgumentError(f"inputs: a dict of name -> tensor, got "
                                       f"{type(inputs).__name__}")
        in_args = {n: as_arg(v, f"input '{n}'") for n, v in inputs.items()}
        s = infer_size(self.inputs, in_args, self.max_size, size)
        results = {}
        handle = None
        if stream is not None:
            handle = _stream_handle(stream)
            if outputs is None:
                raise InvalidArgumentError("outputs: a run ordered on a stream writes device "
                                           "tensors only; pass outputs={name: device tensor}")
            for n, a in in_args.items():
                if not a.on_device:
                    raise InvalidArgumentError(f"input '{n}' is host memory; a run ordered on a "
                                               f"stream takes device tensors only")
        if outputs is None:
            import numpy as np
            out_args = {}
            for t in self.outputs:
                arr = np.empty(t.shape(s), dtype=t.dtype)
                out_args[t.name] = _Arg(t.kiln_dtype, arr.shape, arr.ctypes.data if arr.size
                                        else 0, arr.nbytes, 0, arr, "numpy array")
                results[t.name] = arr
        else:
            if not isinstance(outputs, dict):
                raise InvalidArgumentError(f"outputs: a dict of name -> tensor, got "
                                           f"{type(outputs).__name__}")
            if not outputs:
                raise InvalidArgumentError("outputs: empty; name at least one output (or pass "
                                           "None for all of them as numpy arrays)")
            by_name = {t.name: t for t in self.outputs}
            out_args = {}
            for n, v in outputs.items():
                if n not in by_name:
                    raise InvalidArgumentError(f"unknown output '{n}'; the model's outputs are: "
                                               f"{_describe(self.outputs)}")
                a = as_arg(v, f"output '{n}'", output=True)
                if handle is not None and not a.on_device:
                    raise InvalidArgumentError(f"output '{n}' is host memory; a run ordered on "
                                               f"a stream takes device tensors only")
                _check_output(by_name[n], a, s)
                out_args[n] = a
                results[n] = v
        return BoundRun(self, s, in_args, out_args, results, sync_streams, handle)

    __call__ = run

    def __repr__(self):
        return (f"<kiln.Executor {self.mode} of '{self.model_path}'"
                f"{' closed' if self.closed else ''}>")


class BoundRun:
    """A request checked once by Executor.bind; call it to run it (returns the outputs)."""

    def __init__(self, executor, size, in_args, out_args, results, sync_streams, stream=None):
        self.executor, self.size, self.results = executor, size, results
        self._args = list(in_args.values()) + list(out_args.values())  # keeps them alive
        self._sync = sync_streams and stream is None
        self._stream = stream  # None: synchronous; else the cudaStream_t handle (an int)
        self._out_names = list(out_args)
        self._c_in = (_lib.TensorC * len(in_args))()
        for c, (n, a) in zip(self._c_in, in_args.items()):
            _fill(c, executor._names[n], a)
        self._c_out = (_lib.TensorC * len(out_args))()
        for c, (n, a) in zip(self._c_out, out_args.items()):
            _fill(c, executor._names[n], a)
        self._expect = [a.shape for a in out_args.values()]
        lib = _lib.load_library()
        self._run = lib.kiln_executor_run if stream is None else lib.kiln_executor_run_async

    def __call__(self):
        h = self.executor._live()
        if self._sync:
            _sync_streams(self._args)
        args = (h, self._c_in, len(self._c_in), self._c_out, len(self._c_out))
        if self._stream is not None:
            args += (ctypes.c_void_p(self._stream),)
        _lib.check(self._run(*args))
        for c, n, want in zip(self._c_out, self._out_names, self._expect):
            if tuple(c.shape[:c.rank]) != want:
                raise InternalError(f"output '{n}': kiln wrote shape {list(c.shape[:c.rank])}, "
                                    f"expected {list(want)}")
        return self.results


def _stream_handle(stream):
    """The cudaStream_t of `stream` (a torch.cuda.Stream or an integer handle) as an int."""
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int) or handle < 0:
        raise InvalidArgumentError(f"stream: a torch.cuda.Stream or an integer cudaStream_t, "
                                   f"got {type(stream).__name__} {stream!r}")
    return handle


def _sync_streams(args):
    """Synchronises the CUDA streams the caller's device tensors were produced on."""
    torch_devices, streams = set(), set()
    for a in args:
        if not a.on_device:
            continue
        if a.torch_device is not None:
            torch_devices.add(a.torch_device)
        elif a.stream is not None:
            if a.stream == 0:
                raise InvalidArgumentError(f"{a.what}: __cuda_array_interface__ stream 0 is "
                                           "disallowed by the protocol (use 1 for the legacy "
                                           "default stream)")
            streams.add(int(a.stream))
    if torch_devices:
        torch = sys.modules["torch"]
        for d in torch_devices:
            torch.cuda.current_stream(d).synchronize()
    for s in streams:
        _lib.stream_synchronize(s)
