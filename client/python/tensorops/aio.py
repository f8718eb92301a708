"""tensorops.aio.Client: the asyncio client, on grpc.aio, for many calls in flight.

    async with tensorops.aio.Client("127.0.0.1:50051") as client:
        results = await asyncio.gather(*(client.gather(x, 1, i) for i in indices))

Every method of tensorops.Client, as a coroutine (run_stream: an async iterator).
"""
import asyncio
import contextlib

import grpc
import grpc.aio

from tensorops._client import _add_op_methods, _Base
from tensorops._errors import Error, NotFound
from tensorops._shared_memory import SharedMemoryInfo, SharedMemoryRegion
from tensorops._store import DEFAULT_CHUNK_BYTES, Download, Snapshot, TensorInfo
from tensorops._tensor import Ref
from tensorops.v1 import server_info_pb2, service_pb2_grpc, shared_memory_pb2, store_pb2


class Client(_Base):
    """The asyncio twin of tensorops.Client (same arguments); create it inside a running loop."""

    def __init__(self, target, **kwargs):
        super().__init__(target, **kwargs)
        if self._credentials is not None:
            self._channel = grpc.aio.secure_channel(target, self._credentials, self._options)
        else:
            self._channel = grpc.aio.insecure_channel(target, self._options)
        self._stub = service_pb2_grpc.TensorOpsStub(self._channel)

    async def close(self):
        await self._channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def _call(self, rpc, request, timeout):
        try:
            return await getattr(self._stub, rpc)(request, timeout=self._timeout(timeout),
                                                  metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(e) from None

    async def run(self, op, *args, copy=None, timeout=None, **kwargs):
        """As tensorops.Client.run."""
        request, decoding = self._run_call(op, args, kwargs, copy)
        return self._decode((await self._call("Run", request, timeout)).result, decoding)

    async def backward(self, op, grad_output, *args, copy=None, timeout=None, **kwargs):
        """As tensorops.Client.backward."""
        request, decoding = self._backward_call(op, grad_output, args, kwargs, copy)
        return self._gradients(await self._call("Backward", request, timeout), decoding)

    async def put(self, name, array, *, overwrite=False, expected_version=None,
                  chunk_bytes=DEFAULT_CHUNK_BYTES, progress=None, timeout=None):
        """As tensorops.Client.put (progress is called on the event loop's thread)."""
        upload = self._upload(name, array, overwrite, expected_version, chunk_bytes, progress)
        try:
            response = await self._call("PutTensor", iter(upload), timeout)
        except (Error, asyncio.CancelledError):
            # grpc.aio cancels the call when the request iterator raises, and the await then
            # raises CancelledError: when progress raised, its exception is what put raises, as
            # the sync client's does (a cancellation of the caller's task is raised as it is).
            upload.reraise_progress_error()
            raise
        return self._put_result(response)

    async def get(self, name, version=None, *, out=None, chunk_bytes=None, progress=None,
                  timeout=None):
        """As tensorops.Client.get."""
        name, request = self._get_request(name, version, chunk_bytes, out)
        download = Download(name, progress, out)
        call = self._stub.GetTensor(request, timeout=self._timeout(timeout),
                                    metadata=self._metadata)
        try:
            async for response in call:
                download.add(response)
        except grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            call.cancel()
        return download.result()

    async def list(self, *, timeout=None):
        """As tensorops.Client.list."""
        response = await self._call("ListTensors", store_pb2.ListTensorsRequest(), timeout)
        return [TensorInfo.from_proto(info) for info in response.tensors]

    async def info(self, name, *, timeout=None):
        """As tensorops.Client.info."""
        response = await self._call("TensorInfo", self._info_request(name), timeout)
        return TensorInfo.from_proto(response.info)

    async def delete(self, name, expected_version=None, *, timeout=None):
        """As tensorops.Client.delete."""
        await self._call("DeleteTensor", self._delete_request(name, expected_version), timeout)

    async def ref(self, name, version=None, *, timeout=None):
        """As tensorops.Client.ref."""
        info = await self.info(name, timeout=timeout)
        return Ref(info.name, version, info.dtype, info.shape)

    async def register_shared_memory(self, name, key=None, byte_size=None, offset=0, *,
                                     timeout=None):
        """As tensorops.Client.register_shared_memory."""
        await self._call("RegisterSharedMemory",
                         self._register_request(name, key, byte_size, offset), timeout)

    async def register_cuda_shared_memory(self, name, raw_handle, device_id, byte_size, *,
                                          timeout=None):
        """As tensorops.Client.register_cuda_shared_memory."""
        await self._call("RegisterSharedMemory",
                         self._register_cuda_request(name, raw_handle, device_id, byte_size),
                         timeout)

    async def unregister_shared_memory(self, name="", *, timeout=None):
        """As tensorops.Client.unregister_shared_memory."""
        if isinstance(name, SharedMemoryRegion):
            name = name.name
        request = shared_memory_pb2.UnregisterSharedMemoryRequest(name=name)
        return list((await self._call("UnregisterSharedMemory", request, timeout)).names)

    async def list_shared_memory(self, name="", *, timeout=None):
        """As tensorops.Client.list_shared_memory."""
        request = shared_memory_pb2.ListSharedMemoryRequest(name=name)
        response = await self._call("ListSharedMemory", request, timeout)
        return [SharedMemoryInfo.from_proto(region) for region in response.regions]

    @contextlib.asynccontextmanager
    async def shared_memory(self, name, byte_size, *, key=None, timeout=None):
        """As tensorops.Client.shared_memory, with `async with`."""
        with SharedMemoryRegion(name, byte_size, key=key) as region:
            await self.register_shared_memory(region, timeout=timeout)
            try:
                yield region
            finally:
                try:
                    await self.unregister_shared_memory(name, timeout=timeout)
                except NotFound:
                    pass  # unregistered in the block already

    async def snapshot_store(self, *, timeout=None):
        """As tensorops.Client.snapshot_store."""
        response = await self._call("SnapshotStore", store_pb2.SnapshotStoreRequest(), timeout)
        return Snapshot.from_proto(response)

    async def server_info(self, *, timeout=None):
        """As tensorops.Client.server_info."""
        return await self._call("ServerInfo", server_info_pb2.ServerInfoRequest(), timeout)

    async def run_stream(self, items, *, timeout=None):
        """As tensorops.Client.run_stream, as an async iterator; items may be a plain iterable
        or an async iterable of (request_id, OpRequest) pairs or OpRequests."""
        in_shared_memory = {}
        if hasattr(items, "__aiter__"):
            async def stream_requests():
                position = 0
                async for item in items:
                    yield self._stream_request(position, item, in_shared_memory)
                    position += 1
            request_iterator = stream_requests()
        else:
            request_iterator = self._stream_requests(items, in_shared_memory)
        decoding = self._decoding(None, ())
        call = self._stub.RunStream(request_iterator, timeout=self._timeout(timeout),
                                    metadata=self._metadata)
        try:
            async for response in call:
                yield self._stream_outcome(response, decoding, in_shared_memory)
        except grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            call.cancel()


def _make_async(name, builder):
    async def method(self, *args, copy=None, timeout=None, **kwargs):
        rpc, request, decoding = self._op_call(builder, args, kwargs, copy)
        return self._decode((await self._call(rpc, request, timeout)).result, decoding)

    return method


_add_op_methods(Client, _make_async)
