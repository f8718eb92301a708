"""tensorops.aio.Client: the asyncio client, on grpc.aio, for many calls in flight.

    async with tensorops.aio.Client("127.0.0.1:50051") as client:
        results = await asyncio.gather(*(client.gather(x, 1, i) for i in indices))

Every method of tensorops.Client, as a coroutine (run_stream: an async iterator).
"""
import grpc
import grpc.aio

from tensorops import requests
from tensorops._client import _add_op_methods, _Base
from tensorops._errors import from_rpc_error
from tensorops._tensor import from_tensor
from tensorops.v1 import server_info_pb2, service_pb2_grpc


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
            raise from_rpc_error(e) from None

    async def run(self, op, *args, timeout=None, **kwargs):
        """As tensorops.Client.run."""
        request = requests.build(op, *args, **kwargs)
        return from_tensor((await self._call("Run", request, timeout)).result)

    async def backward(self, op, grad_output, *args, timeout=None, **kwargs):
        """As tensorops.Client.backward."""
        request = self._backward_request(op, grad_output, args, kwargs)
        return self._gradients(await self._call("Backward", request, timeout))

    async def server_info(self, *, timeout=None):
        """As tensorops.Client.server_info."""
        return await self._call("ServerInfo", server_info_pb2.ServerInfoRequest(), timeout)

    async def run_stream(self, items, *, timeout=None):
        """As tensorops.Client.run_stream, as an async iterator; items may be a plain iterable
        or an async iterable of (request_id, OpRequest) pairs or OpRequests."""
        if hasattr(items, "__aiter__"):
            async def stream_requests():
                position = 0
                async for item in items:
                    yield self._stream_request(position, item)
                    position += 1
            request_iterator = stream_requests()
        else:
            request_iterator = self._stream_requests(items)
        call = self._stub.RunStream(request_iterator, timeout=self._timeout(timeout),
                                    metadata=self._metadata)
        try:
            async for response in call:
                yield self._stream_outcome(response)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()


def _make_async(name, builder):
    async def method(self, *args, timeout=None, **kwargs):
        rpc, request = self._unary_parts(builder(*args, **kwargs))
        return from_tensor((await self._call(rpc, request, timeout)).result)

    return method


_add_op_methods(Client, _make_async)
