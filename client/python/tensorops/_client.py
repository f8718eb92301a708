"""tensorops.Client: the synchronous client, and what the asyncio client shares with it."""
import contextlib
import dataclasses
import inspect
import itertools
import json
import os

import grpc

from tensorops import requests
from tensorops._errors import Error, NotFound, from_rpc_error, make_error
from tensorops._shared_memory import InSharedMemory, SharedMemoryInfo, SharedMemoryRegion
from tensorops._store import (DEFAULT_CHUNK_BYTES, Download, Snapshot, TensorInfo, Upload,
                              check_chunk_bytes, name_and_version, shared_memory_request)
from tensorops._tensor import (DTYPE_NAMES, Ref, from_tensor, result_in_shared_memory, to_tensor,
                               torch_device)
from tensorops.v1 import (generic_pb2, server_info_pb2, service_pb2_grpc, shared_memory_pb2,
                          store_pb2)

# The server's default message limit (1 GiB), both ways.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30

# gRPC caps a retry policy's maxAttempts at 5.
_MAX_ATTEMPTS_CAP = 5

# The RPCs that change the store without an update id: no retry policy (see service_config).
_NEVER_RETRIED = ("PutTensor", "DeleteTensor", "RegisterSharedMemory", "UnregisterSharedMemory")

# The keyword arguments of every op method that say where its result goes
# (tensorops.requests.result_options).
_RESULT_KEYWORDS = ("store_as", "overwrite", "expected_version", "in_place", "return_data",
                    "update_id", "out")


@dataclasses.dataclass(frozen=True)
class _Decoding:
    """How a call's result comes back: copied (writable), on a torch device, with a stored
    result's data, or written into shared memory at out's place."""
    copy: bool
    device: object  # torch.device, or None for numpy
    return_data: bool
    out: object = None  # the call's out=, or None


def service_config(round_robin=True, max_attempts=5):
    """The gRPC service config (JSON) a client gives its channel; the C++ client's is the same.

    round_robin: spread calls over every address the target resolves to (a DNS name with one
    record per replica, or "ipv4:10.0.0.1:50051,10.0.0.2:50051"); False: gRPC's pick_first.
    max_attempts: attempts a call gets when it fails with UNAVAILABLE (a replica shutting down) or
    with CANCELLED from the server (gRPC's server cancels calls it has not yet handed to the service
    when it shuts down), the first included, 1 (no retries) to 5. Calls the client cancels or whose
    deadline passes are not retried, nor calls the server has answered or whose request exceeds
    gRPC's 256 KiB retry buffer.

    A retry is safe for every call but four: ops are free of side effects, or, when they store
    their result or update in place, carry an update id the server applies once (the client
    picks one per call, and per run_stream request; gRPC resends the same request). PutTensor
    and DeleteTensor change the store without one, so they are never retried: a put or delete
    whose answer was lost could otherwise replace or remove a value another client stored in
    between. Nor are RegisterSharedMemory and UnregisterSharedMemory, whose retry after a lost
    answer would fail with ALREADY_EXISTS or NOT_FOUND though the first attempt did what was
    asked.
    """
    if not 1 <= max_attempts <= _MAX_ATTEMPTS_CAP:
        raise ValueError(f"max_attempts = {max_attempts} is out of range (expected 1 to "
                         f"{_MAX_ATTEMPTS_CAP})")
    service = "tensorops.v1.TensorOps"
    method = {"name": [{"service": service}]}
    if max_attempts > 1:
        method["retryPolicy"] = {"maxAttempts": max_attempts, "initialBackoff": "0.05s",
                                 "maxBackoff": "1s", "backoffMultiplier": 2,
                                 "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED", "ABORTED"]}
    never_retried = {"name": [{"service": service, "method": name}
                              for name in _NEVER_RETRIED]}
    return json.dumps({"loadBalancingConfig": [{"round_robin" if round_robin else "pick_first": {}}],
                       "methodConfig": [method, never_retried]})


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


# What a bearer token may hold, once the whitespace around it is stripped: visible ASCII.
_TOKEN_RULE = ("a bearer token is one or more visible ASCII characters (0x21 to 0x7E) once the "
               "whitespace around it is stripped")


def _checked_token(token, argument):
    """`token` (str or bytes) stripped of surrounding whitespace, or ValueError naming `argument`
    and the rule. No message shows the token or any part of it: it is a secret."""
    if isinstance(token, (bytes, bytearray)):
        token = bytes(token).strip()
        valid = all(0x21 <= byte <= 0x7E for byte in token)
    elif isinstance(token, str):
        token = token.strip()
        valid = all("!" <= c <= "~" for c in token)
    else:
        raise TypeError(f"{argument} must be a str (or bytes), not {type(token).__name__}")
    if not token or not valid:
        problem = "is empty" if not token else "has a character outside that range"
        raise ValueError(f"{argument} is not a valid bearer token: {_TOKEN_RULE}, and this one "
                         f"{problem} (the token is not shown)") from None
    return token.decode("ascii") if isinstance(token, bytes) else token


def _read_token_file(path):
    """The bearer token in the file at `path`, stripped as `token=` is. An unreadable file is an
    OSError naming the path; a file that holds no valid token, a ValueError; neither shows what
    the file holds."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            contents = f.read()
    except OSError as e:
        message = f"token_file: cannot read {path!r}: {e.strerror or e}"
        raise (OSError(e.errno, message) if e.errno else OSError(message)) from None
    return _checked_token(contents, f"token_file {path!r}")


def _bearer_token(token, token_file):
    """The token to send (None: none) from Client's token= and token_file= arguments."""
    if token is not None and token_file is not None:
        raise ValueError("give token= or token_file=, not both")
    if token_file is not None:
        return _read_token_file(token_file)
    return None if token is None else _checked_token(token, "token")


class _Base:
    """Channel options, metadata and response decoding shared by both clients."""

    def __init__(self, target, *, timeout=None, tls=None, token=None, token_file=None,
                 max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES, round_robin=True, max_attempts=5,
                 copy=False, options=()):
        self.target = target
        self.timeout = timeout
        self.copy = copy
        self.max_message_bytes = max_message_bytes
        token = _bearer_token(token, token_file)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._options = [("grpc.max_send_message_length", max_message_bytes),
                         ("grpc.max_receive_message_length", max_message_bytes),
                         ("grpc.service_config", service_config(round_robin, max_attempts)),
                         *options]
        if tls is True:
            tls = TLS()
        self._tls = tls
        if tls is not None and tls.server_name:
            self._options.append(("grpc.ssl_target_name_override", tls.server_name))
        self._credentials = tls._credentials() if tls is not None else None

    def _timeout(self, timeout):
        return self.timeout if timeout is None else timeout

    def _error(self, rpc_error):
        """The tensorops.Error of a failed call: a call that reached no server names the
        target."""
        return from_rpc_error(rpc_error, self.target, self._tls)

    def _decoding(self, copy, arguments, options=None, out=None):
        """How to return a call's result: `copy` (None: the client's), torch out when one of
        `arguments` is a torch tensor, a stored result's data when `options` ask for it, `out`
        when the result went into shared memory."""
        return _Decoding(copy=self.copy if copy is None else copy,
                         device=torch_device(arguments),
                         return_data=options is not None and options.return_data, out=out)

    @staticmethod
    def _decode(tensor, decoding):
        """A result message as the caller gets it: an array (or torch tensor), a Ref with the
        array in .data when it was stored and return_data was asked for, or out= (or a view of
        its bytes) when it was written into shared memory."""
        if decoding.out is not None:
            return result_in_shared_memory(decoding.out, tensor.dtype, tensor.shape)
        if not tensor.HasField("stored"):
            return from_tensor(tensor, decoding.copy, decoding.device)
        # A stream's results are decoded without their requests' options: data that came is kept.
        data = (from_tensor(tensor, decoding.copy, decoding.device)
                if decoding.return_data or tensor.data else None)
        stored = tensor.stored
        return Ref(stored.name, stored.version if stored.HasField("version") else None,
                   DTYPE_NAMES.get(tensor.dtype), tuple(tensor.shape), data)

    def _op_call(self, builder, args, kwargs, copy):
        """(rpc, request, decoding) of an op method's call: the builder's request with the
        result keywords (popped from kwargs) applied."""
        result_keywords = {key: kwargs.pop(key) for key in _RESULT_KEYWORDS if key in kwargs}
        options = requests.result_options(**result_keywords)
        op = requests.with_result_options(builder(*args, **kwargs), options)
        rpc, request = self._unary_parts(requests.with_update_id(op, copy=False))
        return rpc, request, self._decoding(copy, itertools.chain(args, kwargs.values()), options,
                                            result_keywords.get("out"))

    def _run_call(self, op, args, kwargs, copy):
        """(request, decoding) of run's call. A caller's OpRequest is never modified: it is
        copied before its result options or a fresh update id are set (each run of an
        OpRequest that changes the store without an update id of its own is a change of its
        own, not a retry of the last)."""
        result_keywords = {key: kwargs.pop(key) for key in _RESULT_KEYWORDS if key in kwargs}
        options = requests.result_options(**result_keywords)
        owned = not isinstance(op, generic_pb2.OpRequest)
        if not owned and options is not None:
            copied = generic_pb2.OpRequest()
            copied.CopyFrom(op)
            op, owned = copied, True
        request = requests.with_result_options(requests.build(op, *args, **kwargs), options)
        request = requests.with_update_id(request, copy=not owned)
        return request, self._decoding(copy, itertools.chain(args, kwargs.values()), options,
                                       result_keywords.get("out"))

    def _upload(self, name, array, overwrite, expected_version, chunk_bytes, progress):
        check_chunk_bytes(chunk_bytes, self.max_message_bytes)
        return Upload(name, array, overwrite, expected_version, chunk_bytes, progress)

    @staticmethod
    def _put_result(response):
        info = response.info
        return Ref(info.name, info.version, DTYPE_NAMES.get(info.dtype), tuple(info.shape))

    def _get_request(self, name, version, chunk_bytes, out):
        name, version = name_and_version(name, version)
        if chunk_bytes is not None:
            check_chunk_bytes(chunk_bytes, self.max_message_bytes)
        request = store_pb2.GetTensorRequest(name=name, chunk_bytes=chunk_bytes or 0)
        if version is not None:
            request.version = version
        if out is not None:
            shared_memory_request(request, out)
        return name, request

    @staticmethod
    def _register_request(name, key, byte_size, offset):
        """The RegisterSharedMemoryRequest of register_shared_memory's arguments: a name, key,
        byte_size and offset, or a tensorops.SharedMemoryRegion as `name`."""
        if isinstance(name, SharedMemoryRegion):
            if key is not None or byte_size is not None or offset:
                raise TypeError("register_shared_memory: give a SharedMemoryRegion alone, or "
                                "name, key and byte_size")
            return shared_memory_pb2.RegisterSharedMemoryRequest(region=name.system_proto())
        if key is None or byte_size is None:
            raise TypeError("register_shared_memory: give the region's name, key and byte_size "
                            "(or a SharedMemoryRegion)")
        return shared_memory_pb2.RegisterSharedMemoryRequest(
            region=shared_memory_pb2.SharedMemoryRegion(
                name=name, system=shared_memory_pb2.SystemSharedMemory(
                    key=key, offset=offset, byte_size=byte_size)))

    @staticmethod
    def _register_cuda_request(name, raw_handle, device_id, byte_size):
        """The RegisterSharedMemoryRequest of register_cuda_shared_memory's arguments."""
        raw_handle = bytes(raw_handle)
        if len(raw_handle) != 64:
            raise ValueError(f"register_cuda_shared_memory: raw_handle has {len(raw_handle)} "
                             "bytes; a CUDA IPC handle (cudaIpcMemHandle_t) has 64")
        return shared_memory_pb2.RegisterSharedMemoryRequest(
            region=shared_memory_pb2.SharedMemoryRegion(
                name=name, cuda=shared_memory_pb2.CudaSharedMemory(
                    raw_handle=raw_handle, device_id=device_id, byte_size=byte_size)))

    @staticmethod
    def _delete_request(name, expected_version):
        name, expected_version = name_and_version(name, expected_version)
        request = store_pb2.DeleteTensorRequest(name=name)
        if expected_version is not None:
            request.expected_version = expected_version
        return request

    @staticmethod
    def _info_request(name):
        name, _ = name_and_version(name, None)
        return store_pb2.TensorInfoRequest(name=name)

    @staticmethod
    def _stream_request(position, item, in_shared_memory):
        """The RunStreamRequest of an (id, OpRequest) pair, or of an OpRequest at `position`,
        with a fresh update id when the op changes the store without one (on the request's copy
        of the OpRequest, not the caller's). An op whose result goes into shared memory is
        noted in `in_shared_memory` (request id -> where), since its response says only the
        result's dtype and shape."""
        if isinstance(item, generic_pb2.OpRequest):
            request_id, op = position, item
        else:
            request_id, op = item
        field = op.WhichOneof("op")
        if field is not None and getattr(op, field).result_options.HasField("shared_memory"):
            where = getattr(op, field).result_options.shared_memory
            in_shared_memory[request_id] = InSharedMemory(where.region, where.offset, None, ())
        request = generic_pb2.RunStreamRequest(request_id=request_id, op=op)  # copies op
        requests.with_update_id(request.op, copy=False)
        return request

    @classmethod
    def _stream_requests(cls, items, in_shared_memory):
        for position, item in enumerate(items):
            yield cls._stream_request(position, item, in_shared_memory)

    def _stream_outcome(self, response, decoding, in_shared_memory):
        """(request id, result or Error) of a RunStream response; a result written into shared
        memory as a tensorops.InSharedMemory."""
        out = in_shared_memory.pop(response.request_id, None)
        if response.WhichOneof("outcome") == "error":
            return response.request_id, make_error(response.error.code, response.error.message)
        if out is not None:
            decoding = dataclasses.replace(decoding, out=out)
        return response.request_id, self._decode(response.result, decoding)

    def _backward_call(self, op, grad_output, args, kwargs, copy):
        request = generic_pb2.BackwardRequest(op=requests.build(op, *args, **kwargs),
                                              grad_output=to_tensor(grad_output, "grad_output"))
        arguments = itertools.chain((grad_output,), args, kwargs.values())
        return request, self._decoding(copy, arguments)

    @staticmethod
    def _gradients(response, decoding):
        return {name: from_tensor(tensor, decoding.copy, decoding.device)
                for name, tensor in response.gradients.items()}

    @staticmethod
    def _unary_parts(op_request):
        field = op_request.WhichOneof("op")
        return requests.OPS_BY_FIELD[field], getattr(op_request, field)


# The keyword arguments every op method adds to its builder's, with their defaults.
_METHOD_KEYWORDS = {"store_as": None, "overwrite": False, "expected_version": None,
                    "in_place": False, "return_data": False, "update_id": None, "out": None,
                    "copy": None, "timeout": None}


def _method_signature(builder):
    signature = inspect.signature(builder)
    parameters = list(signature.parameters.values())
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
             for name, default in _METHOD_KEYWORDS.items()]
    return signature.replace(parameters=[self_param, *parameters, *added])


_METHOD_DOC = """

Returns the result as a read-only ndarray (tensorops.bfloat16 for bfloat16), a writable one with
copy=True (default: the client's copy=), a torch tensor when a tensor argument is one; raises
tensorops.Error.
store_as="name": store the result under that name (overwrite=True replaces a value;
expected_version=N requires the name at version N). in_place=True: update the stored tensor
that input (a tensorops.Ref) names. Either returns a tensorops.Ref to the result at its new
version, with the values in .data when return_data=True. update_id: the id that makes a retry of
this call apply once (default: a fresh uuid4 hex per call).
out: an ndarray over a registered tensorops.SharedMemoryRegion (or a tensorops.InSharedMemory)
that the server writes the result into; returns out when the result has its dtype and shape, else
the result's dtype and shape over the same bytes.
timeout: seconds for this call (default: the client's)."""


def _add_op_methods(cls, make):
    """Adds one method per builder in tensorops.requests: make(name, builder) -> function."""
    for name in requests.OPS:
        builder = getattr(requests, name)
        method = make(name, builder)
        method.__name__ = name
        method.__qualname__ = f"{cls.__name__}.{name}"
        method.__doc__ = inspect.cleandoc(builder.__doc__ or "") + _METHOD_DOC
        method.__signature__ = _method_signature(builder)
        setattr(cls, name, method)
    return cls


class Client(_Base):
    """A synchronous client of one tensorops server.

        with tensorops.Client("127.0.0.1:50051", timeout=10) as client:
            out = client.gather(x, 1, index)

    target: "host:port", or several replicas: "dns:///name:port" (one record each) or
    "ipv4:10.0.0.1:50051,10.0.0.2:50051". timeout: default seconds per call (None: no deadline).
    tls: a TLS (or True for gRPC's default roots); None is plaintext. token: the bearer token, sent
    as "authorization: Bearer <token>" on every call; token_file: a file to read it from instead
    (either way the whitespace around it is stripped, and anything but visible ASCII left is a
    ValueError that does not show the token). A call that reaches no server raises
    tensorops.Unavailable, "no tensorops server answers at TARGET (is it running?)", with a hint
    when TLS settings look like the cause. round_robin and max_attempts: how calls
    spread over the replicas and how often one that fails with UNAVAILABLE is tried (see
    tensorops.service_config). copy: whether results are writable arrays of their own (one
    copy) rather than read-only views over the response. Every op method takes the arguments of
    its builder in tensorops.requests plus store_as=, overwrite=, expected_version=, in_place=,
    return_data=, update_id=, copy= and timeout=, returns an ndarray (a torch tensor when a
    tensor argument is one, a tensorops.Ref when stored) and raises tensorops.Error. put, get,
    list, info, delete, ref and snapshot_store use the tensor store. register_shared_memory,
    unregister_shared_memory, list_shared_memory and shared_memory share memory with a server on
    this host (tensorops.SharedMemoryRegion). A Client may be used from many threads at once.
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
            raise self._error(e) from None

    def run(self, op, *args, copy=None, timeout=None, **kwargs):
        """Runs any op through the generic Run RPC: op is an OpRequest or a builder's name.

        Takes the op methods' store_as=, in_place=, ... too and returns what they return. An op
        that stores its result or updates in place gets a fresh update id on each run, unless
        it has one of its own (update_id=, or in its OpRequest); op is never modified.
        """
        request, decoding = self._run_call(op, args, kwargs, copy)
        return self._decode(self._call("Run", request, timeout).result, decoding)

    def backward(self, op, grad_output, *args, copy=None, timeout=None, **kwargs):
        """The gradients of op's differentiable inputs for grad_output, by argument name.

        op is a builder's name followed by the forward call's arguments, or an OpRequest:
            client.backward("gather", g, x, 1, index)  ->  {"input": ndarray}
        """
        request, decoding = self._backward_call(op, grad_output, args, kwargs, copy)
        return self._gradients(self._call("Backward", request, timeout), decoding)

    def put(self, name, array, *, overwrite=False, expected_version=None,
            chunk_bytes=DEFAULT_CHUNK_BYTES, progress=None, timeout=None):
        """Stores `array` (an ndarray, array-like, bfloat16 or torch tensor) under `name`.

        The bytes go in chunks of chunk_bytes over one PutTensor stream, so any size fits; the
        tensor becomes visible when the upload completes, all at once. A name that exists is
        replaced only with overwrite=True or when expected_version is its current version
        (tensorops.FailedPrecondition otherwise). progress(bytes_done, bytes_total) is called
        after each chunk, on gRPC's thread; an exception it raises cancels the upload, nothing is
        stored, and put raises that exception. Never
        retried automatically (see tensorops.service_config): on tensorops.Unavailable, call
        it again. Returns a tensorops.Ref to the stored tensor at its new version.
        An array over a registered tensorops.SharedMemoryRegion (C-contiguous), or a
        tensorops.InSharedMemory, is read by the server where it lies: the stream carries the
        header alone (progress is called once, with the tensor's bytes as done and total).
        """
        upload = self._upload(name, array, overwrite, expected_version, chunk_bytes, progress)
        try:
            response = self._call("PutTensor", iter(upload), timeout)
        except Error:
            upload.reraise_progress_error()
            raise
        return self._put_result(response)

    def get(self, name, version=None, *, out=None, chunk_bytes=None, progress=None,
            timeout=None):
        """The stored tensor `name` (a str or a tensorops.Ref) as a writable ndarray of its own
        (tensorops.bfloat16 for bfloat16).

        version: the version it must be at (tensorops.FailedPrecondition otherwise); for a Ref,
        default its version. The bytes arrive in chunks of chunk_bytes (default: the server's,
        4 MiB), all of one version; progress(bytes_done, bytes_total) is called after each.
        out: an ndarray over a registered tensorops.SharedMemoryRegion (or a
        tensorops.InSharedMemory) whose bytes cover the tensor's: the server writes them there
        and no bytes cross the socket; returns out as op methods' out= does.
        """
        name, request = self._get_request(name, version, chunk_bytes, out)
        download = Download(name, progress, out)
        responses = self._stub.GetTensor(request, timeout=self._timeout(timeout),
                                         metadata=self._metadata)
        try:
            for response in responses:
                download.add(response)
        except grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            responses.cancel()
        return download.result()

    def list(self, *, timeout=None):
        """Every stored tensor of this client's namespace as a tensorops.TensorInfo, by name."""
        response = self._call("ListTensors", store_pb2.ListTensorsRequest(), timeout)
        return [TensorInfo.from_proto(info) for info in response.tensors]

    def info(self, name, *, timeout=None):
        """The tensorops.TensorInfo of the stored tensor `name` (tensorops.NotFound if none)."""
        return TensorInfo.from_proto(self._call("TensorInfo", self._info_request(name),
                                                timeout).info)

    def delete(self, name, expected_version=None, *, timeout=None):
        """Deletes the stored tensor `name` (a str or a tensorops.Ref); with expected_version
        (for a Ref, default its version) only if it is at that version
        (tensorops.FailedPrecondition otherwise). Never retried automatically."""
        self._call("DeleteTensor", self._delete_request(name, expected_version), timeout)

    def ref(self, name, version=None, *, timeout=None):
        """A tensorops.Ref to the stored tensor `name`, with its dtype and shape from the server
        (tensorops.NotFound if there is none). version: the version ops must find it at; None:
        whatever version is current when each op runs. tensorops.Ref(name) makes one without
        asking the server."""
        info = self.info(name, timeout=timeout)
        return Ref(info.name, version, info.dtype, info.shape)

    def register_shared_memory(self, name, key=None, byte_size=None, offset=0, *, timeout=None):
        """Registers the POSIX shared-memory object `key` ("/name", as shm_open takes it), its
        `byte_size` bytes from `offset`, as the region `name` of this client's namespace (a
        tensorops.SharedMemoryRegion may stand for all four). The server maps it: it must be on
        the server's host. tensorops.InvalidArgument for a bad name, offset or size,
        AlreadyExists for a name in use, NotFound for an object that does not exist,
        ResourceExhausted past the server's limits."""
        self._call("RegisterSharedMemory",
                   self._register_request(name, key, byte_size, offset), timeout)

    def register_cuda_shared_memory(self, name, raw_handle, device_id, byte_size, *,
                                    timeout=None):
        """Registers `byte_size` bytes of a GPU buffer as the region `name`: `raw_handle` is the
        64 bytes of its CUDA IPC handle (cudaIpcGetMemHandle in this process, which must keep
        the buffer allocated while the region is registered), `device_id` its GPU. The server's
        kernels read arguments from it and write results into it in place.
        tensorops.FailedPrecondition from a server whose calls run on no GPU, InvalidArgument
        for a handle its GPU cannot open or a buffer smaller than `byte_size`."""
        self._call("RegisterSharedMemory",
                   self._register_cuda_request(name, raw_handle, device_id, byte_size), timeout)

    def unregister_shared_memory(self, name="", *, timeout=None):
        """Unregisters the region `name` (a str or a tensorops.SharedMemoryRegion), or every
        region of this client's namespace when it is ""; returns the names unregistered,
        sorted. The server unmaps a region once the calls already using it are done."""
        if isinstance(name, SharedMemoryRegion):
            name = name.name
        request = shared_memory_pb2.UnregisterSharedMemoryRequest(name=name)
        return list(self._call("UnregisterSharedMemory", request, timeout).names)

    def list_shared_memory(self, name="", *, timeout=None):
        """The registered regions of this client's namespace as tensorops.SharedMemoryInfo,
        sorted by name; only `name` when given (tensorops.NotFound when it is not registered)."""
        request = shared_memory_pb2.ListSharedMemoryRequest(name=name)
        response = self._call("ListSharedMemory", request, timeout)
        return [SharedMemoryInfo.from_proto(region) for region in response.regions]

    @contextlib.contextmanager
    def shared_memory(self, name, byte_size, *, key=None, timeout=None):
        """A new tensorops.SharedMemoryRegion of `byte_size` bytes, registered as `name` for
        the `with` block; on leaving it the region is unregistered, unmapped (once no array
        over it is left) and its object unlinked:

            with client.shared_memory("batch", 1 << 20) as region:
                x = region.array(np.float32, (256, 64))
        """
        with SharedMemoryRegion(name, byte_size, key=key) as region:
            self.register_shared_memory(region, timeout=timeout)
            try:
                yield region
            finally:
                try:
                    self.unregister_shared_memory(name, timeout=timeout)
                except NotFound:
                    pass  # unregistered in the block already

    def snapshot_store(self, *, timeout=None):
        """Has the server write a snapshot of its whole store (every namespace) to its
        --store_dir now; returns a tensorops.Snapshot (path, generation, tensors, bytes,
        written_unix_nanos, duration_micros) once the file is on disk.
        tensorops.FailedPrecondition from a server started without --store_dir."""
        return Snapshot.from_proto(self._call("SnapshotStore", store_pb2.SnapshotStoreRequest(),
                                              timeout))

    def server_info(self, *, timeout=None):
        """The server's tensorops.v1.ServerInfoResponse (version, devices, limits, ops...)."""
        return self._call("ServerInfo", server_info_pb2.ServerInfoRequest(), timeout)

    def run_stream(self, items, *, timeout=None):
        """Runs many ops over one RunStream; yields (request_id, ndarray or tensorops.Error).

        items: an iterable (consumed lazily, on gRPC's thread) of (request_id, OpRequest) pairs,
        or of OpRequests (their ids are their positions). Results come in completion order. An
        op that fails yields its Error and the stream goes on; if the stream itself fails, the
        iterator raises its Error. timeout bounds the whole stream. Each request whose op
        stores its result or updates in place gets a fresh update id (on the request's copy:
        the OpRequest is not modified), unless its result options have one of their own
        (requests.result_options(update_id=...)), as run's calls do. An op whose result went
        into shared memory (requests.with_result_options(op, requests.result_options(out=...)))
        yields a tensorops.InSharedMemory with the result's dtype and shape.
        """
        decoding = self._decoding(None, ())
        in_shared_memory = {}
        responses = self._stub.RunStream(self._stream_requests(items, in_shared_memory),
                                         timeout=self._timeout(timeout), metadata=self._metadata)
        try:
            for response in responses:
                yield self._stream_outcome(response, decoding, in_shared_memory)
        except grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            responses.cancel()


def _make_sync(name, builder):
    def method(self, *args, copy=None, timeout=None, **kwargs):
        rpc, request, decoding = self._op_call(builder, args, kwargs, copy)
        return self._decode(self._call(rpc, request, timeout).result, decoding)

    return method


_add_op_methods(Client, _make_sync)
