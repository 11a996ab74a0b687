"""kiln's exceptions: one KilnError per kiln_status (runtime/include/kiln/runtime.h)."""


class KilnError(Exception):
    """A failed kiln call: `status` is the kiln_status name ("INVALID_ARGUMENT", ...), `code`
    its number (None for errors raised by the Python package itself), `message` the text
    (kiln_last_error() for C calls)."""

    status = "UNKNOWN"
    code = None

    def __init__(self, message, status=None, code=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code

    def __str__(self):
        return f"[{self.status}] {self.message}"


class InvalidArgumentError(KilnError, ValueError):
    status, code = "INVALID_ARGUMENT", 1


class NotFoundError(KilnError, LookupError):
    status, code = "NOT_FOUND", 2


class UnimplementedError(KilnError):
    status, code = "UNIMPLEMENTED", 3


class DataLossError(KilnError):
    status, code = "DATA_LOSS", 4


class FailedPreconditionError(KilnError):
    status, code = "FAILED_PRECONDITION", 5


class ResourceExhaustedError(KilnError, MemoryError):
    status, code = "RESOURCE_EXHAUSTED", 6


class InternalError(KilnError):
    status, code = "INTERNAL", 7


class IoError(KilnError, OSError):
    status, code = "IO_ERROR", 8

    def __init__(self, message, status=None, code=None):  # OSError's own arguments differ
        KilnError.__init__(self, message, status, code)

    def __str__(self):
        return KilnError.__str__(self)


class ContextLostError(KilnError):
    """The CUDA context is gone after a device fault (an illegal address, a trap...): every
    later call that touches the device fails with this too. Restart the process."""
    status, code = "CONTEXT_LOST", 9


class LibraryNotFoundError(KilnError, OSError):
    """libkiln_runtime.so could not be loaded (the message lists every path tried)."""
    status = "FAILED_PRECONDITION"

    def __init__(self, message, status=None, code=None):
        KilnError.__init__(self, message, status, code)

    def __str__(self):
        return KilnError.__str__(self)


class CompileError(KilnError):
    """`kiln compile` failed; `stderr` holds what the CLI printed, `returncode` its exit
    status (None when it timed out)."""
    status = "COMPILE_FAILED"

    def __init__(self, message, stderr="", returncode=None):
        super().__init__(message)
        self.stderr = stderr
        self.returncode = returncode


BY_CODE = {c.code: c for c in (InvalidArgumentError, NotFoundError, UnimplementedError,
                               DataLossError, FailedPreconditionError, ResourceExhaustedError,
                               InternalError, IoError, ContextLostError)}


def error_for_status(code, name, message):
    cls = BY_CODE.get(code, KilnError)
    if cls is KilnError:
        return KilnError(message, status=name, code=code)
    return cls(message)
