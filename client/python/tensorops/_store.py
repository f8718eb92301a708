"""The tensor store's messages <-> Python: TensorInfo, and the chunked PutTensor/GetTensor."""
import dataclasses

import grpc
import numpy as np

from tensorops._errors import make_error
from tensorops._tensor import (DTYPE_NAMES, _NUMPY_DTYPE, Ref, placed_in_shared_memory,
                               result_in_shared_memory, shared_memory_target, wire_array,
                               wire_dtype, wrap_array)
from tensorops.v1 import store_pb2

# The data bytes in one PutTensor message unless put(chunk_bytes=...) says otherwise: the
# server's default chunk for GetTensor.
DEFAULT_CHUNK_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One stored tensor, as client.info and client.list describe it.

    dtype: its name ("float32", "bfloat16"). bytes: numel(shape) * itemsize. version: 1 when the
    name was created, one more per change. device: where the server keeps it ("cpu").
    created_unix_nanos / updated_unix_nanos: when the name was first stored and when its value
    last changed.
    """
    name: str
    dtype: str
    shape: tuple
    bytes: int
    version: int
    device: str
    created_unix_nanos: int
    updated_unix_nanos: int

    @classmethod
    def from_proto(cls, info):
        return cls(name=info.name, dtype=DTYPE_NAMES.get(info.dtype, str(info.dtype)),
                   shape=tuple(info.shape), bytes=info.bytes, version=info.version,
                   device=info.device, created_unix_nanos=info.created_unix_nanos,
                   updated_unix_nanos=info.updated_unix_nanos)

    def ref(self):
        """A Ref to this tensor at this version."""
        return Ref(self.name, self.version, self.dtype, self.shape)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What client.snapshot_store wrote: a snapshot of the server's whole store.

    path: the file in the server's --store_dir (on the server's machine), e.g.
    "/data/snapshot-000000000007.tosnap". generation: its generation (later snapshots have higher
    ones). tensors: the tensors it holds, of every namespace. bytes: the file's size.
    written_unix_nanos: when it was complete. duration_micros: how long writing it took.
    """
    path: str
    generation: int
    tensors: int
    bytes: int
    written_unix_nanos: int
    duration_micros: int

    @classmethod
    def from_proto(cls, response):
        return cls(path=response.path, generation=response.generation, tensors=response.tensors,
                   bytes=response.bytes, written_unix_nanos=response.written_unix_nanos,
                   duration_micros=response.duration_micros)


def check_chunk_bytes(chunk_bytes, max_message_bytes):
    """Raises ValueError unless 1 <= chunk_bytes <= max_message_bytes - 1024 (a message holds
    the chunk and a few bytes of framing)."""
    limit = max_message_bytes - 1024
    if not isinstance(chunk_bytes, int) or not 1 <= chunk_bytes <= limit:
        raise ValueError(f"chunk_bytes = {chunk_bytes!r} is out of range (expected an int, "
                         f"1 <= chunk_bytes <= {limit}: the client's max_message_bytes less 1 KiB)")


def name_and_version(name, version):
    """(name, version) of get/delete's first arguments: a name or a Ref (whose version is used
    unless `version` is given)."""
    if isinstance(name, Ref):
        return name.name, version if version is not None else name.version
    if not isinstance(name, str):
        raise TypeError(f"name = {name!r} is not a str or tensorops.Ref")
    return name, version


def _malformed(message):
    """The error for a GetTensor stream that breaks its contract (a correct server never sends
    one): tensorops.Internal."""
    return make_error(grpc.StatusCode.INTERNAL, message)


class Upload:
    """A PutTensor call's request messages: the header, then the array's bytes in chunks; or,
    for an array the server can read in a shared-memory region, the header alone.

    Iterating it (gRPC does, on its own thread) calls progress(bytes_done, bytes_total) after
    each chunk has been handed to gRPC, and once with (0, 0) for an empty tensor (with
    (bytes, bytes) once for one in shared memory). An exception from progress ends the
    iteration, which cancels the call; reraise_progress_error raises it in the caller's thread.
    """

    def __init__(self, name, array, overwrite, expected_version, chunk_bytes, progress):
        if not isinstance(name, str):
            raise TypeError(f"put: name = {name!r} is not a str")
        placed = placed_in_shared_memory(array)
        if placed is not None:
            self.header = store_pb2.PutTensorHeader(name=name, dtype=wire_dtype(placed.dtype),
                                                    shape=placed.shape, overwrite=overwrite,
                                                    shared_memory=placed.proto())
            self._shared_bytes = placed.byte_size
            values = np.empty(0, np.uint8)
        else:
            wire, values = wire_array(array, "array")
            if not values.flags.c_contiguous:  # (np.ascontiguousarray would make a scalar 1-d)
                values = values.copy(order="C")
            self.header = store_pb2.PutTensorHeader(name=name, dtype=wire, shape=values.shape,
                                                    overwrite=overwrite)
            self._shared_bytes = None
        if expected_version is not None:
            self.header.expected_version = expected_version
        self._bytes = values.reshape(-1).view(np.uint8)
        self._chunk_bytes = chunk_bytes
        self._progress = progress
        self._progress_error = None

    def _report(self, done, total):
        if self._progress is None:
            return
        try:
            self._progress(done, total)
        except BaseException as e:
            # gRPC cancels the call on an Exception from the iterator; anything else (e.g. a
            # KeyboardInterrupt) would end its thread and leave the call waiting.
            self._progress_error = e
            raise RuntimeError("progress raised") from e

    def reraise_progress_error(self):
        """Raises the exception progress raised, if it did."""
        if self._progress_error is not None:
            raise self._progress_error

    def __iter__(self):
        yield store_pb2.PutTensorRequest(header=self.header)
        if self._shared_bytes is not None:
            self._report(self._shared_bytes, self._shared_bytes)
            return
        total = self._bytes.size
        done = 0
        while done < total:
            end = min(done + self._chunk_bytes, total)
            yield store_pb2.PutTensorRequest(data=self._bytes[done:end].tobytes())
            done = end
            self._report(done, total)
        if total == 0:
            self._report(0, 0)


def shared_memory_request(request, out):
    """Sets GetTensorRequest `request` to write the tensor into out='s place in shared memory
    (an ndarray over a region, a bfloat16 whose bits are, or a tensorops.InSharedMemory)."""
    request.shared_memory.CopyFrom(shared_memory_target(out, "out").proto())


class Download:
    """Assembles a GetTensor stream's messages into one writable array; with `out` (the stream
    carries the TensorInfo alone, the bytes went into shared memory), returns out, as ops do."""

    def __init__(self, name, progress, out=None):
        self._name = name
        self._progress = progress
        self._out = out
        self.info = None
        self._buffer = None
        self._done = 0

    def add(self, response):
        part = response.WhichOneof("part")
        if self.info is None:
            if part != "info":
                raise _malformed(f"get {self._name!r}: the server's first message has "
                                 f"{part}, expected the tensor's info")
            self.info = response.info
            self._buffer = np.empty(0 if self._out is not None else self.info.bytes, np.uint8)
            return
        chunk = response.data
        end = self._done + len(chunk)
        if part != "data" or end > self._buffer.size:
            raise _malformed(f"get {self._name!r}: the server sent {part} past the "
                             f"{self._buffer.size} bytes of the tensor")
        self._buffer[self._done:end] = np.frombuffer(chunk, np.uint8)
        self._done = end
        if self._progress is not None:
            self._progress(self._done, self._buffer.size)

    def result(self):
        if self.info is None or self._done != self._buffer.size:
            received = 0 if self.info is None else self._done
            expected = "its info" if self.info is None else f"{self._buffer.size} bytes"
            raise _malformed(f"get {self._name!r}: the stream ended after {received} "
                             f"bytes, expected {expected}")
        if self._out is not None:
            if self._progress is not None:
                self._progress(self.info.bytes, self.info.bytes)
            return result_in_shared_memory(self._out, self.info.dtype, self.info.shape)
        if self._buffer.size == 0 and self._progress is not None:
            self._progress(0, 0)
        dtype = _NUMPY_DTYPE.get(self.info.dtype)
        if dtype is None:
            raise TypeError(f"server sent unknown dtype {self.info.dtype}")
        return wrap_array(self._buffer.view(dtype).reshape(tuple(self.info.shape)),
                          self.info.dtype)
