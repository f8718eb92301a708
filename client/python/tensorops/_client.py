"""tensorops.Client: the synchronous client, and what the asyncio client shares with it."""
import dataclasses
import inspect
import json
import os

import grpc

from tensorops import requests
from tensorops._errors import from_rpc_error, make_error
from tensorops._tensor import from_tensor, to_tensor
from tensorops.v1 import generic_pb2, server_info_pb2, service_pb2_grpc

# The server's default message limit (1 GiB), both ways.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30

# gRPC caps a retry policy's maxAttempts at 5.
_MAX_ATTEMPTS_CAP = 5


def service_config(round_robin=True, max_attempts=5):
    """The gRPC service config (JSON) a client gives its channel; the C++ client's is the same.

    round_robin: spread calls over every address the target resolves to (a DNS name with one
    record per replica, or "ipv4:10.0.0.1:50051,10.0.0.2:50051"); False: gRPC's pick_first.
    max_attempts: attempts a call gets when it fails with UNAVAILABLE (a replica shutting down) or
    with CANCELLED from the server (gRPC's server cancels calls it has not yet handed to the service
    when it shuts down), the first included, 1 (no retries) to 5. Every tensorops call is free of
    side effects, so a retry is always safe; calls the client cancels or whose deadline passes are
    not retried, nor calls the server has answered or whose request exceeds gRPC's 256 KiB retry
    buffer.
    """
    if not 1 <= max_attempts <= _MAX_ATTEMPTS_CAP:
        raise ValueError(f"max_attempts = {max_attempts} is out of range (expected 1 to "
                         f"{_MAX_ATTEMPTS_CAP})")
    method = {"name": [{"service": "tensorops.v1.TensorOps"}]}
    if max_attempts > 1:
        method["retryPolicy"] = {"maxAttempts": max_attempts, "initialBackoff": "0.05s",
                                 "maxBackoff": "1s", "backoffMultiplier": 2,
                                 "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"]}
    return json.dumps({"loadBalancingConfig": [{"round_robin" if round_robin else "pick_first": {}}],
                       "methodConfig": [method]})


@dataclasses.dataclass(frozen=True)
class TLS:
    """TLS settings: each of root_ca, cert and key is a PEM file's path or its bytes.

    root_ca: the CA to trust (None: gRPC's default roots). cert and key: the client certificate,
    for mutual TLS. server_name: the name to check the server's certificate against when the
    target is an IP address or another name.
    """
    root_ca: object = None
    cert: object = None
    key: object = None
    server_name: str = None

    def _credentials(self):
        def pem(value):
            if value is None or isinstance(value, bytes):
                return value
            with open(os.fspath(value), "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(root_certificates=pem(self.root_ca),
                                            private_key=pem(self.key),
                                            certificate_chain=pem(self.cert))


class _Base:
    """Channel options, metadata and response decoding shared by both clients."""

    def __init__(self, target, *, timeout=None, tls=None, token=None,
                 max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES, round_robin=True, max_attempts=5,
                 options=()):
        self.target = target
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._options = [("grpc.max_send_message_length", max_message_bytes),
                         ("grpc.max_receive_message_length", max_message_bytes),
                         ("grpc.service_config", service_config(round_robin, max_attempts)),
                         *options]
        if tls is True:
            tls = TLS()
        if tls is not None and tls.server_name:
            self._options.append(("grpc.ssl_target_name_override", tls.server_name))
        self._credentials = tls._credentials() if tls is not None else None

    def _timeout(self, timeout):
        return self.timeout if timeout is None else timeout

    @staticmethod
    def _stream_request(position, item):
        """The RunStreamRequest of an (id, OpRequest) pair, or of an OpRequest at `position`."""
        if isinstance(item, generic_pb2.OpRequest):
            request_id, op = position, item
        else:
            request_id, op = item
        return generic_pb2.RunStreamRequest(request_id=request_id, op=op)

    @classmethod
    def _stream_requests(cls, items):
        for position, item in enumerate(items):
            yield cls._stream_request(position, item)

    @staticmethod
    def _stream_outcome(response):
        if response.WhichOneof("outcome") == "error":
            return response.request_id, make_error(response.error.code, response.error.message)
        return response.request_id, from_tensor(response.result)

    @staticmethod
    def _backward_request(op, grad_output, args, kwargs):
        return generic_pb2.BackwardRequest(op=requests.build(op, *args, **kwargs),
                                           grad_output=to_tensor(grad_output, "grad_output"))

    @staticmethod
    def _gradients(response):
        return {name: from_tensor(tensor) for name, tensor in response.gradients.items()}

    @staticmethod
    def _unary_parts(op_request):
        field = op_request.WhichOneof("op")
        return requests.OPS_BY_FIELD[field], getattr(op_request, field)


def _signature_with_timeout(builder):
    signature = inspect.signature(builder)
    parameters = list(signature.parameters.values())
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    timeout = inspect.Parameter("timeout", inspect.Parameter.KEYWORD_ONLY, default=None)
    return signature.replace(parameters=[self_param, *parameters, timeout])


def _add_op_methods(cls, make):
    """Adds one method per builder in tensorops.requests: make(name, builder) -> function."""
    for name in requests.OPS:
        builder = getattr(requests, name)
        method = make(name, builder)
        method.__name__ = name
        method.__qualname__ = f"{cls.__name__}.{name}"
        method.__doc__ = inspect.cleandoc(builder.__doc__ or "") + (
            "\n\nReturns the result as an ndarray (tensorops.bfloat16 for bfloat16); raises "
            "tensorops.Error.\ntimeout: seconds for this call (default: the client's).")
        method.__signature__ = _signature_with_timeout(builder)
        setattr(cls, name, method)
    return cls


class Client(_Base):
    """A synchronous client of one tensorops server.

        with tensorops.Client("127.0.0.1:50051", timeout=10) as client:
            out = client.gather(x, 1, index)

    target: "host:port", or several replicas: "dns:///name:port" (one record each) or
    "ipv4:10.0.0.1:50051,10.0.0.2:50051". timeout: default seconds per call (None: no deadline).
    tls: a TLS (or True for gRPC's default roots); None is plaintext. token: the bearer token, sent
    as "authorization: Bearer <token>" on every call. round_robin and max_attempts: how calls
    spread over the replicas and how often one that fails with UNAVAILABLE is tried (see
    tensorops.service_config). Every op method takes the arguments of its
    builder in tensorops.requests plus timeout=, returns an ndarray and raises tensorops.Error.
    A Client may be used from many threads at once.
    """

    def __init__(self, target, **kwargs):
        super().__init__(target, **kwargs)
        if self._credentials is not None:
            self._channel = grpc.secure_channel(target, self._credentials, self._options)
        else:
            self._channel = grpc.insecure_channel(target, self._options)
        self._stub = service_pb2_grpc.TensorOpsStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, rpc, request, timeout):
        try:
            return getattr(self._stub, rpc)(request, timeout=self._timeout(timeout),
                                            metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def run(self, op, *args, timeout=None, **kwargs):
        """Runs any op through the generic Run RPC: op is an OpRequest or a builder's name."""
        request = requests.build(op, *args, **kwargs)
        return from_tensor(self._call("Run", request, timeout).result)

    def backward(self, op, grad_output, *args, timeout=None, **kwargs):
        """The gradients of op's differentiable inputs for grad_output, by argument name.

        op is a builder's name followed by the forward call's arguments, or an OpRequest:
            client.backward("gather", g, x, 1, index)  ->  {"input": ndarray}
        """
        request = self._backward_request(op, grad_output, args, kwargs)
        return self._gradients(self._call("Backward", request, timeout))

    def server_info(self, *, timeout=None):
        """The server's tensorops.v1.ServerInfoResponse (version, devices, limits, ops...)."""
        return self._call("ServerInfo", server_info_pb2.ServerInfoRequest(), timeout)

    def run_stream(self, items, *, timeout=None):
        """Runs many ops over one RunStream; yields (request_id, ndarray or tensorops.Error).

        items: an iterable (consumed lazily, on gRPC's thread) of (request_id, OpRequest) pairs,
        or of OpRequests (their ids are their positions). Results come in completion order. An
        op that fails yields its Error and the stream goes on; if the stream itself fails, the
        iterator raises its Error. timeout bounds the whole stream.
        """
        responses = self._stub.RunStream(self._stream_requests(items),
                                         timeout=self._timeout(timeout), metadata=self._metadata)
        try:
            for response in responses:
                yield self._stream_outcome(response)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            responses.cancel()


def _make_sync(name, builder):
    def method(self, *args, timeout=None, **kwargs):
        rpc, request = self._unary_parts(builder(*args, **kwargs))
        return from_tensor(self._call(rpc, request, timeout).result)

    return method


_add_op_methods(Client, _make_sync)
