"""tensorops.Error and one subclass per gRPC status code."""
import grpc


class Error(Exception):
    """A failed call: `code` is the grpc.StatusCode, `message` the server's message."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class Cancelled(Error): pass
class Unknown(Error): pass
class InvalidArgument(Error): pass
class DeadlineExceeded(Error): pass
class NotFound(Error): pass
class AlreadyExists(Error): pass
class PermissionDenied(Error): pass
class ResourceExhausted(Error): pass
class FailedPrecondition(Error): pass
class Aborted(Error): pass
class OutOfRange(Error): pass
class Unimplemented(Error): pass
class Internal(Error): pass
class Unavailable(Error): pass
class DataLoss(Error): pass
class Unauthenticated(Error): pass


_BY_CODE = {
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.UNKNOWN: Unknown,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DATA_LOSS: DataLoss,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}
_CODE_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def make_error(code, message):
    """The Error subclass for `code` (a grpc.StatusCode or its number) with `message`."""
    if not isinstance(code, grpc.StatusCode):
        code = _CODE_BY_NUMBER.get(int(code), grpc.StatusCode.UNKNOWN)
    return _BY_CODE.get(code, Error)(code, message)


def from_rpc_error(error):
    """The Error for a grpc.RpcError (or grpc.aio.AioRpcError)."""
    return make_error(error.code(), error.details() or "")
