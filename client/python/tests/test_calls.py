"""Errors, deadlines, RunStream, ServerInfo, Backward and the asyncio client."""
import asyncio
import socket

import grpc
import numpy as np
import pytest

import reference as ref
import tensorops

RNG = np.random.default_rng(7)


def test_out_of_range_index_is_invalid_argument(client):
    x = np.array([[1, 2], [3, 4]], np.float32)
    with pytest.raises(tensorops.InvalidArgument) as info:
        client.gather(x, 1, np.array([[0, 9], [1, 0]]))
    error = info.value
    assert isinstance(error, tensorops.Error)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.message.startswith("gather: ")
    assert "9 is out of range for axis 1" in error.message
    assert "INVALID_ARGUMENT" in str(error)


def test_bad_arguments_are_invalid_argument(client):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(tensorops.InvalidArgument, match="scatter"):
        client.scatter(x, 0, np.zeros((1, 3), np.int64), np.ones((1, 3), np.float64))  # dtype
    with pytest.raises(tensorops.InvalidArgument):
        client.index_select(x, 5, np.array([0]))  # axis


def test_client_side_errors():
    with pytest.raises(ValueError, match="unknown reduction"):
        tensorops.requests.scatter(np.ones(2), 0, np.zeros(1, np.int64), 1.0, reduce="median")
    with pytest.raises(TypeError, match="not supported"):
        tensorops.requests.gather(np.array(["a"]), 0, np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="unknown op"):
        tensorops.requests.build("fft")


def test_shape_over_the_limit_is_resource_exhausted(client):
    with pytest.raises(tensorops.ResourceExhausted) as info:
        client.scatter_nd(None, np.zeros((0, 1), np.int64), np.zeros((0,), np.float32),
                          shape=[1 << 33])
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_deadline_exceeded(client):
    x = np.ones((1 << 20,), np.float32)
    index = np.zeros((1 << 20,), np.int64)
    with pytest.raises(tensorops.DeadlineExceeded) as info:
        client.scatter(x, 0, index, x, reduce="sum", timeout=1e-6)
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def free_port():
    with socket.socket() as s:  # a port nothing listens on once the socket is closed
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_closed_port_is_unavailable():
    target = f"127.0.0.1:{free_port()}"
    with tensorops.Client(target, timeout=10) as c:
        for call in (c.server_info, lambda: c.gather(np.ones(2), 0, np.zeros(1, np.int64)),
                     lambda: c.get("x"), lambda: list(c.run_stream([]))):
            with pytest.raises(tensorops.Unavailable) as info:
                call()
            error = info.value
            assert error.code == grpc.StatusCode.UNAVAILABLE
            assert error.message.startswith(
                f"no tensorops server answers at {target} (is it running?) [gRPC: "), error.message
            assert str(error).startswith(f"UNAVAILABLE: no tensorops server answers at {target}")


def test_closed_port_aio_client_is_unavailable():
    target = f"127.0.0.1:{free_port()}"

    async def main():
        async with tensorops.aio.Client(target, timeout=10) as c:
            with pytest.raises(tensorops.Unavailable) as info:
                await c.server_info()
            return info.value

    error = asyncio.run(main())
    assert error.code == grpc.StatusCode.UNAVAILABLE
    assert error.message.startswith(f"no tensorops server answers at {target} (is it running?)")


def test_server_unavailable_messages_are_kept():
    # An UNAVAILABLE the server sent (it is shutting down) keeps the server's words.
    message = "the server is shutting down and takes no new calls"
    assert tensorops._errors.unreachable_message("127.0.0.1:1", message) is None


def test_a_reset_under_the_memory_limit_names_the_flag():
    # gRPC's reset of a request its resource quota could not hold carries no message of the
    # server's; the client's error names the flag that sizes the quota, keeping the code.
    class Reset(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.RESOURCE_EXHAUSTED

        def details(self):
            return "Received RST_STREAM with error code 11"

    error = tensorops._errors.from_rpc_error(Reset(), target="127.0.0.1:1")
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max_memory_bytes" in error.message
    assert error.message.endswith("[gRPC: Received RST_STREAM with error code 11]")


def test_server_info(client):
    info = client.server_info()
    assert info.version
    assert {"Gather", "Scatter", "IndexSelect", "IndexReduce", "SelectScatter", "SliceScatter",
            "DiagonalScatter", "GatherNd", "ScatterNd", "MaskedScatter"} <= set(info.ops)
    assert info.devices[0].kind == "cpu"
    assert info.devices[0].threads == 2
    assert info.limits.max_elements == 1 << 32
    assert len(info.dtypes) == 12
    assert not info.tls and not info.auth_token_required


def test_run_stream_many_requests_one_bad(client):
    x = RNG.uniform(size=(4, 6)).astype(np.float32)
    items, expected = [], {}
    for request_id in range(100, 140):
        index = RNG.integers(0, 6, (4, 3))
        if request_id == 117:
            index[2, 1] = 6  # out of range
        items.append((request_id, tensorops.requests.gather(x, 1, index)))
        expected[request_id] = ref.gather(x, 1, index) if request_id != 117 else None
    outcomes = dict(client.run_stream(iter(items)))
    assert sorted(outcomes) == sorted(expected)
    for request_id, outcome in outcomes.items():
        if request_id == 117:
            assert isinstance(outcome, tensorops.InvalidArgument)
            assert outcome.message.startswith("gather: ")
        else:
            np.testing.assert_array_equal(outcome, expected[request_id])


def test_run_stream_plain_requests_get_their_positions(client):
    x = np.arange(6, dtype=np.int64)
    outcomes = dict(client.run_stream(
        [tensorops.requests.index_select(x, 0, np.array([i])) for i in range(6)]))
    assert {i: int(v[0]) for i, v in outcomes.items()} == {i: i for i in range(6)}


def test_backward_gather(client):
    x = RNG.uniform(size=(3, 4)).astype(np.float64)
    index = np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]])
    grad_output = RNG.uniform(size=index.shape)
    expected = np.zeros_like(x)
    for pos in np.ndindex(*index.shape):
        expected[pos[0], index[pos]] += grad_output[pos]
    gradients = client.backward("gather", grad_output, x, 1, index)
    assert set(gradients) == {"input"}
    np.testing.assert_allclose(gradients["input"], expected)


def test_backward_scatter_sum(client):
    x = RNG.uniform(size=(4, 3)).astype(np.float32)
    index = RNG.integers(0, 4, (5, 3))
    src = RNG.uniform(size=(5, 3)).astype(np.float32)
    grad_output = RNG.uniform(size=(4, 3)).astype(np.float32)
    request = tensorops.requests.scatter_reduce(x, 0, index, src, "sum")
    gradients = client.backward(request, grad_output)
    assert set(gradients) == {"input", "src"}
    np.testing.assert_allclose(gradients["input"], grad_output)
    np.testing.assert_allclose(gradients["src"], ref.gather(grad_output, 0, index))


def test_aio_client_many_calls_in_flight(server):
    x = RNG.uniform(size=(5, 7)).astype(np.float32)
    indices = [RNG.integers(0, 7, (5, 3)) for _ in range(32)]

    async def main():
        async with tensorops.aio.Client(server.address, timeout=60) as c:
            results = await asyncio.gather(*(c.gather(x, 1, i) for i in indices))
            with pytest.raises(tensorops.InvalidArgument, match="gather: "):
                await c.gather(x, 1, np.full((5, 3), 7))
            grads = await c.backward("index_select", np.ones((2, 7), np.float32), x, 0,
                                     np.array([4, 4]))
            async def stream_items():  # an async iterable; plain iterables work too
                for i, idx in enumerate(indices[:8]):
                    yield i, tensorops.requests.gather(x, 1, idx)

            outcomes = [o async for o in c.run_stream(stream_items())]
            info = await c.server_info()
            return results, grads, outcomes, info

    results, grads, outcomes, info = asyncio.run(main())
    for result, index in zip(results, indices):
        np.testing.assert_array_equal(result, ref.gather(x, 1, index))
    expected_grad = np.zeros_like(x)
    expected_grad[4] = 2
    np.testing.assert_array_equal(grads["input"], expected_grad)
    assert sorted(i for i, _ in outcomes) == list(range(8))
    for i, result in outcomes:
        np.testing.assert_array_equal(result, ref.gather(x, 1, indices[i]))
    assert "Gather" in info.ops
