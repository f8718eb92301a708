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


# What gRPC says when a call reached no server at all (grpcio up to 1.52, then 1.53 on), rather
# than a message a server sent.
_NO_CONNECTION = ("failed to connect to all addresses", "connections to all backends failing")
# What gRPC says of a stream the server's gRPC reset under its resource quota, and what it means.
_RESET = "RST_STREAM with error code 11"
_RESET_HINT = ("the server reset the call before reading its request: its gRPC buffers of "
               "requests still arriving were full, which --max_memory_bytes bounds; send smaller "
               "requests, or fewer at once, or raise the server's --max_memory_bytes")
# A connection that the other end closed during its set-up: a TLS mismatch, typically.
_CLOSED = ("Socket closed", "Connection reset", "Broken pipe", "End of TCP stream")


def _unreachable_hint(details, tls):
    """The likely cause of a failed connection, from gRPC's `details` and the client's `tls` (None,
    or the tensorops.TLS it connects with), or "" when there is nothing more to say."""
    lowered = details.lower()
    if tls is not None and "wrong version number" in lowered:
        return ("; the server at that address may not use TLS (a plaintext server: leave out "
                "tls=)")
    if tls is not None and ("certificate verify failed" in lowered or
                            "certificate_verify_failed" in lowered):
        return ("; its TLS certificate is not trusted: give the CA that signed it as "
                "TLS(root_ca=...), and TLS(server_name=...) when the target is an IP address or "
                "another name")
    if not any(closed.lower() in lowered for closed in _CLOSED):
        return ""
    if tls is None:
        return ("; the connection was closed as it opened, as a TLS server closes a plaintext "
                "client's: if the server uses TLS (--tls_cert), pass "
                "tls=tensorops.TLS(root_ca=...)")
    if tls.cert is None:
        return ("; the connection was closed during the TLS handshake, as a server that requires "
                "client certificates (--tls_client_ca) closes it for a client without one: pass "
                "TLS(cert=..., key=...)")
    return ("; the connection was closed during the TLS handshake: the server may not accept this "
            "client certificate (is it signed by the server's --tls_client_ca?)")


def unreachable_message(target, details, tls=None):
    """The message of an UNAVAILABLE call that reached no server at `target`, naming the target
    and the likely cause, with gRPC's own `details` at the end; None when `details` is not such a
    failure (a server's own UNAVAILABLE, e.g. one that shuts down, keeps its message)."""
    if details.startswith("DNS resolution failed"):
        return (f"no tensorops server answers at {target}: its host name does not resolve "
                f"[gRPC: {details}]")
    if not details.startswith(_NO_CONNECTION):
        return None
    return (f"no tensorops server answers at {target} (is it running?)"
            f"{_unreachable_hint(details, tls)} [gRPC: {details}]")


def from_rpc_error(error, target=None, tls=None):
    """The Error for a grpc.RpcError (or grpc.aio.AioRpcError).

    With `target` (what the client dialed) a call that reached no server says so: "no tensorops
    server answers at HOST:PORT (is it running?)", with a hint at the likely cause when the
    connection was closed during its set-up (a TLS mismatch; `tls`: the client's tensorops.TLS
    or None), still as tensorops.Unavailable (code UNAVAILABLE).
    """
    code, details = error.code(), error.details() or ""
    if target is not None and code == grpc.StatusCode.UNAVAILABLE:
        details = unreachable_message(target, details, tls) or details
    if _RESET in details:
        # A stream gRPC reset with ENHANCE_YOUR_CALM carries no message of the server's: gRPC's
        # resource quota, sized from --max_memory_bytes, refused the request while it arrived.
        details = f"{_RESET_HINT} [gRPC: {details}]"
    return make_error(code, details)
