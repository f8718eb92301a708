"""The tensor store through the client: put/get in chunks, references as op inputs,
list/info/delete, results stored or written in place, and retries that apply once."""
import asyncio
import concurrent.futures
import threading

import grpc
import numpy as np
import pytest

import reference as ref
import tensorops
import tensorops.aio
from tensorops.v1 import ops_pb2, service_pb2_grpc, store_pb2, tensor_pb2

RNG = np.random.default_rng(31)


@pytest.fixture
def names(client):
    """Yields a fresh prefix for this test's names and deletes what it stored under it."""
    prefix = f"test/{RNG.integers(1 << 62):x}/"
    yield prefix
    for info in client.list():
        if info.name.startswith(prefix):
            client.delete(info.name)


@pytest.mark.parametrize("values", [
    RNG.normal(size=(64, 33)),                                   # 16,896 bytes: 17 chunks
    RNG.integers(-128, 127, (5, 7, 3), dtype=np.int8),
    (RNG.normal(size=(40,)) + 1j * RNG.normal(size=(40,))).astype(np.complex64),
    RNG.integers(0, 2, (9, 9)).astype(bool),
    np.float16(3.5).reshape(()),                                 # a scalar
    np.zeros((0, 3), np.int32),                                  # no elements
    RNG.normal(size=(6, 4))[:, ::2].astype(">f8"),               # strided, big-endian
], ids=["float64", "int8", "complex64", "bool", "scalar", "empty", "strided"])
def test_put_get_round_trip_in_chunks(client, names, values):
    name = names + "x"
    put_progress, get_progress = [], []
    stored = client.put(name, values, chunk_bytes=1000,
                        progress=lambda done, total: put_progress.append((done, total)))
    assert stored == tensorops.Ref(name, 1, values.dtype.newbyteorder("=").name, values.shape)
    total = values.nbytes
    chunks = -(-total // 1000)
    assert put_progress == ([(min(1000 * (i + 1), total), total) for i in range(chunks)]
                            or [(0, 0)])
    got = client.get(name, chunk_bytes=777,
                     progress=lambda done, total: get_progress.append((done, total)))
    assert got.dtype == values.dtype.newbyteorder("=") and got.shape == values.shape
    assert got.flags.writeable
    np.testing.assert_array_equal(got, values)
    assert get_progress[-1] == (total, total)
    assert len(get_progress) == max(1, -(-total // 777))


def test_put_get_bfloat16_and_refs(client, names):
    values = tensorops.bfloat16.from_float32(RNG.normal(size=(3, 5)).astype(np.float32))
    stored = client.put(names + "b", values)
    assert stored.dtype == "bfloat16"
    for got in (client.get(stored), client.get(names + "b", 1), client.get(stored.latest())):
        assert isinstance(got, tensorops.bfloat16)
        np.testing.assert_array_equal(got.bits, values.bits)


def test_an_exception_in_progress_cancels_the_upload(client, names):
    def stop_after_three_chunks(done, total):
        if done > 3000:
            raise KeyboardInterrupt(f"stopped at {done} of {total}")

    with pytest.raises(KeyboardInterrupt, match="stopped at 4000 of 80000"):
        client.put(names + "x", np.zeros(10000), chunk_bytes=1000,
                   progress=stop_after_three_chunks)
    with pytest.raises(tensorops.NotFound):
        client.info(names + "x")


def test_chunk_bytes_is_checked(client, names):
    with pytest.raises(ValueError, match=r"chunk_bytes = 0 is out of range \(expected an int, "
                                         r"1 <= chunk_bytes <= 1073740800"):
        client.put(names + "x", np.ones(3), chunk_bytes=0)


def test_references_give_the_same_bytes_as_inline(client, names):
    x = RNG.normal(size=(6, 5)).astype(np.float32)
    src = RNG.normal(size=(4, 5)).astype(np.float32)
    index = RNG.integers(0, 6, (4, 5))
    mask = RNG.integers(0, 2, (6, 5)).astype(bool)
    x_ref = client.put(names + "x", x)
    src_ref = client.put(names + "src", src)
    index_ref = client.put(names + "index", index)
    mask_ref = client.put(names + "mask", mask)
    calls = [
        ("gather", (x, 1, index[:, :3] % 5), (x_ref, 1, index[:, :3] % 5)),
        ("scatter_reduce", (x, 0, index, src, "sum"), (x_ref, 0, index_ref, src_ref, "sum")),
        ("index_select", (x, 0, index[:, 0]), (client.ref(names + "x"), 0, index[:, 0])),
        ("index_add", (x, 0, index[:, 0], src), (x_ref.latest(), 0, index[:, 0], src_ref)),
        ("masked_scatter", (x, mask, np.tile(src, (8, 1))),
         (x_ref, mask_ref, np.tile(src, (8, 1)))),
        ("slice_scatter", (x, src, 0, 1, 5), (x_ref, src_ref, 0, 1, 5)),
    ]
    for method, inline, by_reference in calls:
        expected = getattr(client, method)(*inline)
        got = getattr(client, method)(*by_reference)
        assert got.dtype == expected.dtype and got.shape == expected.shape, method
        assert got.tobytes() == expected.tobytes(), method
    np.testing.assert_array_equal(client.gather(x_ref, 1, index % 5), ref.gather(x, 1, index % 5))
    # A list src next to a reference from client.ref takes its dtype (float32).
    np.testing.assert_array_equal(client.select_scatter(client.ref(names + "x"), [1] * 5, 0, 2)[2],
                                  np.ones(5, np.float32))


def test_list_info_delete_and_versions(client, names):
    a = client.put(names + "a", np.arange(6, dtype=np.int64).reshape(2, 3))
    b = client.put(names + "b", np.ones(4, np.float32))
    listed = [info for info in client.list() if info.name.startswith(names)]
    assert [info.name for info in listed] == [names + "a", names + "b"]
    info = client.info(names + "a")
    assert (info.dtype, info.shape, info.bytes, info.version, info.device) == (
        "int64", (2, 3), 48, 1, "cpu")
    assert 0 < info.created_unix_nanos <= info.updated_unix_nanos
    assert info.ref() == a

    with pytest.raises(tensorops.FailedPrecondition):
        client.put(names + "a", np.zeros(1))  # exists, no overwrite
    a2 = client.put(names + "a", np.zeros(2, np.float64), overwrite=True)
    assert a2.version == 2 and client.info(a2).created_unix_nanos == info.created_unix_nanos
    a3 = client.put(names + "a", np.zeros(3, np.float64), expected_version=2)
    assert a3.version == 3
    with pytest.raises(tensorops.FailedPrecondition):
        client.put(names + "a", np.zeros(3), expected_version=2)
    with pytest.raises(tensorops.FailedPrecondition):
        client.get(names + "a", version=1)
    with pytest.raises(tensorops.FailedPrecondition):
        client.index_select(a, 0, np.array([0]))  # a pins version 1
    np.testing.assert_array_equal(client.index_select(a.latest(), 0, np.array([0])), [0.0])

    with pytest.raises(tensorops.FailedPrecondition):
        client.delete(names + "a", expected_version=1)
    client.delete(a3)  # at version 3
    client.delete(b.name)
    with pytest.raises(tensorops.NotFound):
        client.info(names + "a")
    with pytest.raises(tensorops.NotFound):
        client.get(names + "b")
    with pytest.raises(tensorops.NotFound):
        client.ref(names + "b")
    assert not [info for info in client.list() if info.name.startswith(names)]


def test_refs_are_rejected_where_values_are_needed(client):
    with pytest.raises(TypeError, match="array is a reference to the stored tensor 'x'"):
        client.put("y", tensorops.Ref("x"))


# Results stored or written in place: these need the server's ResultOptions.

def test_store_as(client, names):
    x = RNG.normal(size=(4, 3)).astype(np.float32)
    index = np.array([[0, 2], [1, 1], [2, 0], [0, 0]])
    stored = client.gather(x, 1, index, store_as=names + "out")
    assert stored == tensorops.Ref(names + "out", 1, "float32", (4, 2))
    assert stored.data is None
    np.testing.assert_array_equal(client.get(stored), ref.gather(x, 1, index))
    with pytest.raises(tensorops.FailedPrecondition):
        client.gather(x, 1, index, store_as=names + "out")  # exists
    again = client.gather(x, 1, index + 0, store_as=names + "out", overwrite=True,
                          return_data=True)
    assert again.version == 2
    np.testing.assert_array_equal(again.data, ref.gather(x, 1, index))


def test_in_place_sum_changes_the_stored_tensor_and_its_version(client, names):
    x = RNG.normal(size=(5, 4)).astype(np.float32)
    index = RNG.integers(0, 5, (3, 4))
    src = RNG.normal(size=(3, 4)).astype(np.float32)
    stored = client.put(names + "x", x)
    expected = client.scatter_reduce(x, 0, index, src, "sum")
    updated = client.scatter_reduce(stored, 0, index, src, "sum", in_place=True)
    assert updated == tensorops.Ref(names + "x", 2, "float32", (5, 4))
    assert client.info(names + "x").version == 2
    assert client.get(names + "x").tobytes() == expected.tobytes()
    # Chained from the Ref it returned; return_data brings the values along.
    again = client.scatter_reduce(updated, 0, index, src, "sum", in_place=True, return_data=True)
    assert again.version == 3
    np.testing.assert_array_equal(again.data, client.get(names + "x"))
    with pytest.raises(tensorops.FailedPrecondition):
        client.scatter_reduce(updated, 0, index, src, "sum", in_place=True)  # at 3, not 2


def test_a_repeated_in_place_request_applies_once(client, names):
    """What a retry sends: the same request, with the same update id, twice (at the stub)."""
    x = np.zeros((2, 3), np.int64)
    client.put(names + "x", x)
    op = tensorops.requests.scatter_add(tensorops.Ref(names + "x"), 0,
                                        np.array([[0, 1, 0]]), np.array([[5, 6, 7]]))
    options = tensorops.requests.result_options(in_place=True)
    assert options.update_id == "", "the client picks the id when it sends the request"
    op = tensorops.requests.with_update_id(tensorops.requests.with_result_options(op, options))
    assert len(op.scatter.result_options.update_id) == 32
    request = op.scatter
    first = client._stub.Scatter(request, timeout=60)
    second = client._stub.Scatter(request, timeout=60)
    assert first.result.stored.version == second.result.stored.version == 2
    np.testing.assert_array_equal(client.get(names + "x"), [[5, 0, 7], [0, 6, 0]])
    assert client.info(names + "x").version == 2
    # A new call (a new update id) applies again.
    client.scatter_add(tensorops.Ref(names + "x"), 0, np.array([[0, 1, 0]]),
                       np.array([[5, 6, 7]]), in_place=True)
    np.testing.assert_array_equal(client.get(names + "x"), [[10, 0, 14], [0, 12, 0]])


def test_running_one_op_request_twice_makes_two_changes(client, names):
    """run and run_stream give each request of an OpRequest that changes the store a fresh
    update id (as the op methods do per call), on a copy: the caller's OpRequest is left as it
    was. Only an id the caller set makes a second run a repeat of the first."""
    client.put(names + "x", np.zeros(3, np.int64))
    op = tensorops.requests.with_result_options(
        tensorops.requests.scatter_add(tensorops.Ref(names + "x"), 0, np.array([1]),
                                       np.array([5])),
        tensorops.requests.result_options(in_place=True))
    sent = op.SerializeToString()
    assert client.run(op).version == 2
    assert client.run(op).version == 3
    assert {result.version for _, result in client.run_stream([(1, op), (2, op)])} == {4, 5}
    assert op.SerializeToString() == sent, "the caller's OpRequest is not modified"
    np.testing.assert_array_equal(client.get(names + "x"), [0, 20, 0])

    async def run_with_aio():
        async with tensorops.aio.Client(client.target, timeout=60) as aio_client:
            await aio_client.run(op)
            return [result async for _, result in aio_client.run_stream([op])]

    assert [result.version for result in asyncio.run(run_with_aio())] == [7]
    # store_as, and a plain op with in_place=True: a change per run too.
    gather = tensorops.requests.with_result_options(
        tensorops.requests.gather(np.arange(3), 0, np.array([2])),
        tensorops.requests.result_options(store_as=names + "y", overwrite=True))
    assert [client.run(gather).version for _ in range(2)] == [1, 2]
    plain = tensorops.requests.scatter_add(tensorops.Ref(names + "x"), 0, np.array([0]),
                                           np.array([1]))
    assert [client.run(plain, in_place=True).version for _ in range(2)] == [8, 9]
    # An id of the caller's own is sent as it is: the second run is the first one's repeat.
    mine = tensorops.requests.with_result_options(
        tensorops.requests.scatter_add(tensorops.Ref(names + "x"), 0, np.array([2]),
                                       np.array([1])),
        tensorops.requests.result_options(in_place=True, update_id=names + "mine"))
    assert [client.run(mine).version for _ in range(2)] == [10, 10]
    assert [result.version for _, result in client.run_stream([mine])] == [10]
    np.testing.assert_array_equal(client.get(names + "x"), [2, 30, 1])


def test_aio_put_raises_what_progress_raised(server, names):
    def stop_after_three_chunks(done, total):
        if done > 3000:
            raise ValueError(f"stopped at {done} of {total}")

    async def main():
        async with tensorops.aio.Client(server.address, timeout=60) as aio_client:
            with pytest.raises(ValueError, match="stopped at 4000 of 80000"):
                await aio_client.put(names + "x", np.zeros(10000), chunk_bytes=1000,
                                     progress=stop_after_three_chunks)
            with pytest.raises(tensorops.NotFound):
                await aio_client.info(names + "x")

    asyncio.run(main())


# Retries, against a fake server that fails the first attempt of every call with UNAVAILABLE.

class _FlakyServicer(service_pb2_grpc.TensorOpsServicer):
    def __init__(self):
        self.lock = threading.Lock()
        self.attempts = {}  # rpc -> [update ids or names]

    def _attempt(self, rpc, what, context):
        with self.lock:
            seen = self.attempts.setdefault(rpc, [])
            seen.append(what)
            first = len(seen) % 2 == 1
        if first:
            context.abort(grpc.StatusCode.UNAVAILABLE, "first attempt fails")

    def Scatter(self, request, context):
        self._attempt("Scatter", request.result_options.update_id, context)
        return ops_pb2.ScatterResponse(result=tensor_pb2.Tensor(
            dtype=request.input.dtype or tensor_pb2.DATA_TYPE_FLOAT32, shape=[2],
            stored=tensor_pb2.TensorRef(name=request.input.stored.name, version=7)))

    def PutTensor(self, request_iterator, context):
        header = next(request_iterator).header
        for _ in request_iterator:
            pass
        self._attempt("PutTensor", header.name, context)
        return store_pb2.PutTensorResponse(info=store_pb2.TensorInfo(name=header.name))

    def DeleteTensor(self, request, context):
        self._attempt("DeleteTensor", request.name, context)
        return store_pb2.DeleteTensorResponse()


@pytest.fixture
def flaky():
    servicer = _FlakyServicer()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    service_pb2_grpc.add_TensorOpsServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with tensorops.Client(f"127.0.0.1:{port}", timeout=30) as client:
        yield client, servicer
    server.stop(None)


def test_retried_in_place_calls_reuse_their_update_id(flaky):
    client, servicer = flaky
    x = tensorops.Ref("table")
    for _ in range(2):
        result = client.scatter(x, 0, np.array([0]), np.ones(1, np.float32), in_place=True)
        assert result == tensorops.Ref("table", 7, "float32", (2,))
    first, retry, second, second_retry = servicer.attempts["Scatter"]
    assert len(first) == 32 and retry == first  # one id per call, on every attempt
    assert second == second_retry != first       # and a new one for the next call
    client.scatter(x, 0, np.array([0]), np.ones(1, np.float32), in_place=True,
                   update_id="mine")
    assert servicer.attempts["Scatter"][4:] == ["mine", "mine"]


def test_put_and_delete_are_not_retried(flaky):
    client, servicer = flaky
    with pytest.raises(tensorops.Unavailable):
        client.put("t", np.ones(3))
    with pytest.raises(tensorops.Unavailable):
        client.delete("t")
    assert servicer.attempts == {"PutTensor": ["t"], "DeleteTensor": ["t"]}


def test_aio_client_store(server, names):
    import asyncio

    values = RNG.normal(size=(50, 20)).astype(np.float32)
    progress = []

    async def main():
        async with tensorops.aio.Client(server.address, timeout=60) as c:
            stored = await c.put(names + "a", values, chunk_bytes=1024,
                                 progress=lambda done, total: progress.append(done))
            got = await c.get(names + "a", chunk_bytes=999)
            by_reference = await c.index_select(await c.ref(names + "a"), 0, np.array([3, 1]))
            listed = [info.name for info in await c.list() if info.name.startswith(names)]
            info = await c.info(stored)
            await c.delete(stored)
            with pytest.raises(tensorops.NotFound):
                await c.info(names + "a")
            return stored, got, by_reference, listed, info

    stored, got, by_reference, listed, info = asyncio.run(main())
    assert stored == tensorops.Ref(names + "a", 1, "float32", (50, 20))
    assert progress[-1] == values.nbytes and len(progress) == -(-values.nbytes // 1024)
    np.testing.assert_array_equal(got, values)
    np.testing.assert_array_equal(by_reference, values[[3, 1]])
    assert listed == [names + "a"] and info.version == 1


def test_snapshot_store_needs_a_store_dir(client):
    with pytest.raises(tensorops.FailedPrecondition, match="--store_dir"):
        client.snapshot_store()


def test_snapshot_store_writes_the_whole_store(tmp_path):
    import asyncio
    import os
    import time

    from conftest import ServerProcess

    store_dir = tmp_path / "store"
    server = ServerProcess(f"--store_dir={store_dir}", "--store_snapshot_interval_s=0")
    try:
        with tensorops.Client(server.address, timeout=60) as c:
            c.put("a", np.arange(6, dtype=np.float32).reshape(2, 3))
            c.put("b", np.array([7, 8]))
            before = time.time_ns()
            first = c.snapshot_store()
            after = time.time_ns()
            assert isinstance(first, tensorops.Snapshot)
            assert os.path.dirname(first.path) == str(store_dir)
            assert os.path.basename(first.path) == f"snapshot-{first.generation:012d}.tosnap"
            assert first.tensors == 2
            assert first.bytes == os.path.getsize(first.path) > 40  # 40 bytes of tensors, framed
            assert before - 10**9 <= first.written_unix_nanos <= after + 10**9
            assert 0 <= first.duration_micros * 1000 <= after - before
            c.delete("b")
            second = c.snapshot_store()
            assert second.generation > first.generation and second.tensors == 1
            assert not os.path.exists(first.path)  # replaced by the newer one

        async def main():
            async with tensorops.aio.Client(server.address, timeout=60) as c:
                return await c.snapshot_store()

        third = asyncio.run(main())
        assert third.generation > second.generation and third.tensors == 1
        assert os.path.exists(third.path)
    finally:
        server.stop()
    assert server.process.returncode == 0, "".join(server.log)
