"""kiln for Python: load artifacts compiled by `kiln compile` and run them on the GPU through
libkiln_runtime's C API (ctypes; no extension module), and compile models through the CLI.

    import kiln
    art = kiln.compile("model.onnx", "kiln.yaml", "cache/")     # no GPU needed
    with kiln.load(art) as m:                                    # needs a CUDA GPU
        ex = m.executor(mode="FULL")
        out = ex.run({"input_ids": ids})                         # numpy in, numpy out
        ex.run({"input_ids": ids_cuda}, outputs={"logits": logits_cuda})   # device in and out

See python/README.md.
"""

from ._lib import library_path, load_library
from .compile import compile, find_cli
from .errors import (CompileError, ContextLostError, DataLossError, FailedPreconditionError,
                     InternalError, InvalidArgumentError, IoError, KilnError,
                     LibraryNotFoundError, NotFoundError, ResourceExhaustedError,
                     UnimplementedError)
from .generator import Generator, KvCacheInfo, StepToken
from .runtime import (DTYPES, MODES, Dim, Executor, Model, TensorInfo, device_available,
                      device_error, load)

__version__ = "0.1.0"

__all__ = [
    "CompileError", "ContextLostError", "DataLossError", "Dim", "DTYPES", "Executor",
    "FailedPreconditionError", "Generator", "InternalError", "InvalidArgumentError", "IoError",
    "KilnError", "KvCacheInfo", "LibraryNotFoundError", "MODES", "Model", "NotFoundError",
    "ResourceExhaustedError", "StepToken", "TensorInfo", "UnimplementedError", "compile",
    "device_available", "device_error", "find_cli", "library_path", "load", "load_library",
]
