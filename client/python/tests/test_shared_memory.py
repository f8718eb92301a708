"""Shared memory with a server on this host: regions registered, listed and unregistered; every op
with each tensor argument in a region, and its result written into one, giving the bytes it gives
inline; the store through regions; bounds, unknown regions, namespaces; and an object shrunk or
removed under a registered region failing the calls that use it, never the server."""
import asyncio
import os
import re
import subprocess
import sys
import uuid

import numpy as np
import pytest

import reference as ref
import tensorops
import tensorops.aio
from conftest import PACKAGE_ROOT, ServerProcess, start_token_server
from test_ops import rand

RNG = np.random.default_rng(39)


def unique(prefix="r"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class Arena:
    """Places arrays one after another in a region, each at a 64-byte boundary."""

    def __init__(self, region):
        self.region = region
        self.used = 0

    def alloc(self, dtype, shape):
        """An array of the region; dtype "bfloat16": a tensorops.bfloat16 over its uint16 bits."""
        if dtype == "bfloat16":
            return tensorops.bfloat16(self.alloc(np.uint16, shape))
        offset = -(-self.used // 64) * 64
        array = self.region.array(dtype, shape, offset)
        self.used = offset + array.nbytes
        return array

    def place(self, value):
        """A copy of `value` (an ndarray or tensorops.bfloat16) in the region."""
        if isinstance(value, tensorops.bfloat16):
            return tensorops.bfloat16(self.place(value.bits))
        array = self.alloc(value.dtype, value.shape)
        array[...] = value
        return array


def raw(result):
    """(dtype, shape, bytes) of a result: what "the same bytes" compares."""
    array = result.bits if isinstance(result, tensorops.bfloat16) else np.asarray(result)
    name = "bfloat16" if isinstance(result, tensorops.bfloat16) else array.dtype.name
    return name, array.shape, np.ascontiguousarray(array).tobytes()


@pytest.fixture
def region(client):
    with client.shared_memory(unique(), 1 << 20) as region:
        yield region


# ---------------------------------------------------------------------------------------------
# Every op: (id, method, args, kwargs); each ndarray (or bfloat16) among args and kwargs is a
# tensor argument.

def op_cases():
    x = rand((3, 4, 5), np.float32)
    cases = [("gather", "gather", (x, 1, RNG.integers(-4, 4, (3, 2, 5))), {}),
             ("take_along_axis", "take_along_axis",
              (rand((3, 4), np.float64), np.array([[2], [0]], np.int32), 0), {}),
             ("gather-bfloat16", "gather",
              (tensorops.bfloat16.from_float32(rand((3, 4), np.float32)), 0,
               RNG.integers(0, 3, (2, 4))), {}),
             ("gather-int8", "gather", (rand((4, 6), np.int8), 1, RNG.integers(0, 6, (4, 3))), {}),
             ("gather-bool", "gather", (rand((4, 6), bool), 0, RNG.integers(0, 4, (2, 6))), {}),
             ("scatter", "scatter",
              (rand((4, 3), np.float64), 0, RNG.integers(0, 4, (5, 3)), rand((5, 3), np.float64)),
              {"reduce": "sum"}),
             ("scatter_add", "scatter_add",
              (rand((4, 3), np.int32), 0, RNG.integers(0, 4, (5, 3)), rand((5, 3), np.int32)), {}),
             ("scatter_reduce", "scatter_reduce",
              (rand((4, 3), np.float16), 0, RNG.integers(0, 4, (5, 3)), rand((5, 3), np.float16),
               "amax"), {"include_self": False}),
             ("put_along_axis", "put_along_axis",
              (rand((3, 4), np.float32), np.array([[2], [0]], np.int64),
               rand((2, 4), np.float32), 0), {"reduce": "add"}),
             ("index_select", "index_select",
              (rand((4, 5, 2), np.complex64), 1, np.array([3, -1, 0, 3], np.int64)), {}),
             ("index_add", "index_add",
              (rand((5, 3), np.float32), 0, np.array([0, 4, 0], np.int32),
               rand((3, 3), np.float32)), {"alpha": 2.5}),
             ("index_copy", "index_copy",
              (rand((3, 5), np.int64), 1, np.array([4, 1], np.int64), rand((3, 2), np.int64)), {}),
             ("index_reduce", "index_reduce",
              (rand((5, 3), np.float64), 0, np.array([0, 4, 0, 2], np.int64),
               rand((4, 3), np.float64), "mean"), {}),
             ("select_scatter", "select_scatter",
              (rand((3, 4, 2), np.float32), rand((3, 2), np.float32), 1, -1), {}),
             ("slice_scatter", "slice_scatter",
              (rand((7, 3), np.uint8), rand((3, 3), np.uint8), 0, 1, None, 2), {}),
             ("diagonal_scatter", "diagonal_scatter",
              (rand((4, 5), np.float32), rand((4,), np.float32), 1), {}),
             ("gather_nd", "gather_nd",
              (rand((3, 4, 5), np.float32),
               np.stack([RNG.integers(0, 3, (2, 6)), RNG.integers(-4, 4, (2, 6))], axis=-1)), {}),
             ("scatter_nd", "scatter_nd",
              (rand((4, 3), np.float32), np.array([[3, 0], [1, 2], [3, 0]]),
               rand((3,), np.float32)), {"reduce": "add"}),
             ("scatter_nd-shape", "scatter_nd",
              (None, np.array([[2], [0], [2]]), rand((3, 3), np.int16)), {"shape": [4, 3]}),
             ("masked_scatter", "masked_scatter",
              (rand((3, 4), np.int16), np.array([[True, False, True, True]]),
               rand((20,), np.int16)), {}),
             ]
    assert {method for _, method, _, _ in cases} >= set(tensorops.requests.OPS), "every op"
    return cases


OP_CASES = op_cases()


def tensor_positions(args, kwargs):
    """The places of the tensor arguments: ints index args, strs name kwargs."""
    tensors = (np.ndarray, tensorops.bfloat16)
    return ([i for i, a in enumerate(args) if isinstance(a, tensors)] +
            [k for k, v in kwargs.items() if isinstance(v, tensors)])


def replaced(args, kwargs, position, value):
    args, kwargs = list(args), dict(kwargs)
    if isinstance(position, int):
        args[position] = value
    else:
        kwargs[position] = value
    return args, kwargs


@pytest.mark.parametrize("case", OP_CASES, ids=lambda case: case[0])
def test_each_tensor_argument_in_a_region_gives_the_inline_bytes(client, region, case):
    case_id, method, args, kwargs = case
    call = getattr(client, method)
    inline = raw(call(*args, **kwargs))
    positions = tensor_positions(args, kwargs)
    assert positions
    arena = Arena(region)
    placed = {}
    for position in positions:
        value = args[position] if isinstance(position, int) else kwargs[position]
        placed[position] = arena.place(value)
        one_args, one_kwargs = replaced(args, kwargs, position, placed[position])
        request = getattr(tensorops.requests, method)(*one_args, **one_kwargs)
        assert f'region: "{region.name}"' in str(request), "the argument travels as a reference"
        assert raw(call(*one_args, **one_kwargs)) == inline, f"{case_id}, {position} in a region"
    # Every argument in the region at once, and the result written into it.
    all_args, all_kwargs = list(args), dict(kwargs)
    for position, value in placed.items():
        all_args, all_kwargs = replaced(all_args, all_kwargs, position, value)
    assert raw(call(*all_args, **all_kwargs)) == inline, f"{case_id}, all in a region"
    dtype, shape, _ = inline
    out = arena.alloc(dtype, shape)
    result = call(*all_args, **all_kwargs, out=out)
    assert result is out
    assert raw(out) == inline, f"{case_id}, result into a region"
    # Arguments inline, result into the region (through the generic Run too).
    out = arena.alloc(dtype, shape)
    assert client.run(method, *args, **kwargs, out=out) is out
    assert raw(out) == inline, f"{case_id}, run's result into a region"


def test_out_larger_than_the_result_gets_a_view_of_its_first_bytes(client, region):
    x = rand((3, 4), np.float32)
    index = RNG.integers(0, 4, (3, 2))
    buffer = region.array(np.uint8, 4096, offset=128)
    buffer[...] = 0xAB
    result = client.gather(x, 1, index, out=buffer)
    assert result.dtype == np.float32 and result.shape == (3, 2)
    assert np.shares_memory(result, buffer) and result.ctypes.data == buffer.ctypes.data
    np.testing.assert_array_equal(result, ref.gather(x, 1, index))
    assert (buffer[24:] == 0xAB).all(), "the bytes after the result are left as they were"


def test_in_shared_memory_names_bytes_explicitly(client, region):
    x = rand((4, 6), np.float64)
    region.array(np.float64, (4, 6), offset=512)[...] = x
    index = np.array([3, 0], np.int64)
    source = tensorops.InSharedMemory(region.name, 512, "float64", (4, 6))
    assert source.byte_size == x.nbytes
    target = tensorops.InSharedMemory(region.name, 1024, "uint8", (4096,))
    result = client.index_select(source, 0, index, out=target)
    assert result == tensorops.InSharedMemory(region.name, 1024, "float64", (2, 6))
    np.testing.assert_array_equal(region.array(np.float64, (2, 6), offset=1024), x[[3, 0]])
    assert region.ref(region.array(np.float64, (4, 6), offset=512)[1:]) == \
        tensorops.InSharedMemory(region.name, 512 + 48, "float64", (3, 6))


def test_in_shared_memory_takes_numpy_dtypes(client, region):
    x = rand((2, 3), np.float32)
    region.array(np.float32, (2, 3), offset=256)[...] = x
    by_type = tensorops.InSharedMemory(region.name, 256, np.float32, [2, 3])
    assert by_type == tensorops.InSharedMemory(region.name, 256, "float32", (2, 3))
    assert by_type.byte_size == x.nbytes
    assert tensorops.InSharedMemory(region.name, 0, np.dtype("<i8"), (1,)).dtype == "int64"
    assert tensorops.InSharedMemory(region.name, 0, "bfloat16", (1,)).byte_size == 2
    np.testing.assert_array_equal(client.gather(by_type, 1, np.array([[2], [0]])),
                                  ref.gather(x, 1, np.array([[2], [0]])))
    for dtype in ("float128", np.str_, ">f4"):
        with pytest.raises(ValueError, match=re.escape(
                f"InSharedMemory: dtype = {dtype!r} is not a dtype tensorops supports (expected "
                "one of bool, uint8, int8, int16, int32, int64, float16, float32, float64, "
                "complex64, complex128, bfloat16, as a name or a little-endian numpy dtype)")):
            tensorops.InSharedMemory(region.name, 0, dtype, (1,))


def test_arrays_of_a_closed_region_travel_as_bytes(client):
    """An array that outlives its region's `with` block is this process's memory alone: sent
    as its bytes, not by the region's name, which another region has since (here one of other
    values, registered under the same name); out= of one is an error, not a write there."""
    name = unique()
    with client.shared_memory(name, 4096) as old:
        x = old.array(np.float32, (2, 3))
        x[...] = [[1, 2, 3], [4, 5, 6]]
        bits = tensorops.bfloat16(old.array(np.uint16, (2,), offset=64))
        bits.bits[...] = tensorops.bfloat16.from_float32([1.5, -2]).bits
        out = old.array(np.float32, (2, 1), offset=1024)
    with client.shared_memory(name, 4096) as new:
        new.array(np.float32, 1024)[...] = 9
        request = tensorops.requests.gather(x, 1, np.array([[2], [0]]))
        assert not request.gather.input.HasField("shared_memory")
        assert request.gather.input.data == x.tobytes()
        np.testing.assert_array_equal(client.gather(x, 1, np.array([[2], [0]])), [[3], [4]])
        np.testing.assert_array_equal(np.asarray(client.index_select(bits, 0, np.array([1]))),
                                      [-2])
        stored = unique("shm/closed")
        client.put(stored, x)
        np.testing.assert_array_equal(client.get(stored), x)
        client.delete(stored)
        closed = f"out is over the shared-memory region '{name}', which is closed"
        with pytest.raises(ValueError, match=closed):
            client.gather(x, 1, np.array([[2], [0]]), out=out)
        with pytest.raises(ValueError, match=closed):
            client.get(stored, out=out)
        with pytest.raises(ValueError, match=f"array is over the shared-memory region '{name}', "
                                             "which is closed"):
            old.ref(x)
        assert (new.array(np.float32, 1024) == 9).all(), "the new region is left as it was"
    np.testing.assert_array_equal(x, [[1, 2, 3], [4, 5, 6]])


def test_a_strided_view_of_a_region_travels_as_bytes(client, region):
    x = region.array(np.float32, (4, 6))
    x[...] = rand((4, 6), np.float32)
    strided = x[:, ::2]
    request = tensorops.requests.gather(strided, 0, np.array([[1, 0, 3]]))
    assert not request.gather.input.HasField("shared_memory")
    assert request.gather.input.data == np.ascontiguousarray(strided).tobytes()
    np.testing.assert_array_equal(client.gather(strided, 0, np.array([[1, 0, 3]])),
                                  ref.gather(strided, 0, np.array([[1, 0, 3]])))
    with pytest.raises(ValueError, match="must be C-contiguous"):
        client.gather(x, 0, np.array([[1, 0, 3, 2, 0, 0]]), out=region.array(
            np.float32, (2, 6), offset=1024)[:, ::2])
    with pytest.raises(ValueError, match="out must be an ndarray over a shared-memory region"):
        client.gather(x, 0, np.array([[1, 0, 3, 2, 0, 0]]), out=np.zeros((1, 6), np.float32))


def test_backward_and_streams_take_arguments_in_a_region(client, region):
    arena = Arena(region)
    x = rand((3, 4), np.float32)
    index = RNG.integers(0, 4, (3, 2))
    grad = rand((3, 2), np.float32)
    inline = client.backward("gather", grad, x, 1, index)
    placed = client.backward("gather", arena.place(grad), arena.place(x), 1, arena.place(index))
    assert raw(placed["input"]) == raw(inline["input"])
    out = arena.alloc(np.float32, (3, 2))
    into_out = tensorops.requests.with_result_options(
        tensorops.requests.gather(x, 1, index), tensorops.requests.result_options(out=out))
    items = [(7, tensorops.requests.gather(arena.place(x), 1, arena.place(index))), (8, into_out)]
    results = dict(client.run_stream(items))
    assert raw(results[7]) == raw(ref.gather(x, 1, index))
    assert results[8] == region.ref(out)
    assert raw(out) == raw(ref.gather(x, 1, index))


# ---------------------------------------------------------------------------------------------
# The store through regions

def test_put_from_a_region_and_get_into_one(client, region):
    name = unique("shm/put")
    arena = Arena(region)
    values = arena.place(rand((64, 33), np.float64))
    progress = []
    stored = client.put(name, values, progress=lambda done, total: progress.append((done, total)))
    try:
        assert stored == tensorops.Ref(name, 1, "float64", (64, 33))
        assert progress == [(values.nbytes, values.nbytes)]
        np.testing.assert_array_equal(client.get(name), values)
        out = arena.alloc(np.float64, (64, 33))
        got_progress = []
        assert client.get(name, out=out,
                          progress=lambda d, t: got_progress.append((d, t))) is out
        np.testing.assert_array_equal(out, values)
        assert got_progress == [(values.nbytes, values.nbytes)]
        # Into a larger buffer: the tensor's dtype and shape over its first bytes.
        buffer = arena.alloc(np.uint8, values.nbytes + 100)
        got = client.get(stored, out=buffer)
        assert got.shape == (64, 33) and got.dtype == np.float64
        assert got.ctypes.data == buffer.ctypes.data
        np.testing.assert_array_equal(got, values)
        # Too small a buffer.
        with pytest.raises(tensorops.InvalidArgument):
            client.get(name, out=arena.alloc(np.float64, (10,)))
        # An inline put read back into the region; a bfloat16 through the region.
        bits = tensorops.bfloat16.from_float32(rand((5, 3), np.float32))
        client.put(name, bits, overwrite=True)
        got = client.get(name, out=tensorops.bfloat16(arena.alloc(np.uint16, (5, 3))))
        assert isinstance(got, tensorops.bfloat16)
        np.testing.assert_array_equal(got.bits, bits.bits)
        assert client.put(name, got, overwrite=True).dtype == "bfloat16"
        np.testing.assert_array_equal(client.get(name).bits, bits.bits)
    finally:
        client.delete(name)


def test_ops_read_stored_tensors_and_write_results_into_a_region(client, region):
    name = unique("shm/table")
    table = rand((100, 16), np.float32)
    client.put(name, table)
    try:
        ids = Arena(region).place(np.array([5, 99, 0, 5], np.int64))
        out = region.array(np.float32, (4, 16), offset=4096)
        assert client.index_select(tensorops.Ref(name), 0, ids, out=out) is out
        np.testing.assert_array_equal(out, table[[5, 99, 0, 5]])
    finally:
        client.delete(name)


# ---------------------------------------------------------------------------------------------
# Registering, listing, unregistering; errors

def test_register_list_unregister(client):
    first, second = unique("a"), unique("b")
    with tensorops.SharedMemoryRegion(first, 4096) as one, \
            tensorops.SharedMemoryRegion(second, 1000, offset=96) as two:
        client.register_shared_memory(one)
        client.register_shared_memory(second, two.key, 1000, 96)
        try:
            listed = {info.name: info for info in client.list_shared_memory()}
            assert listed[first] == tensorops.SharedMemoryInfo(first, "system", 4096, one.key, 0)
            assert listed[second] == tensorops.SharedMemoryInfo(second, "system", 1000, two.key,
                                                                96)
            assert client.list_shared_memory(second) == [listed[second]]
            with pytest.raises(tensorops.AlreadyExists):
                client.register_shared_memory(one)
            # An array of a region registered at an offset is placed from the region's start.
            x = two.array(np.int32, (2, 3), offset=8)
            x[...] = [[1, 2, 3], [4, 5, 6]]
            assert two.ref(x).offset == 8
            np.testing.assert_array_equal(client.index_select(x, 1, np.array([2, 0])),
                                          [[3, 1], [6, 4]])
        finally:
            assert client.unregister_shared_memory(second) == [second]
            assert client.unregister_shared_memory(first) == [first]
        assert first not in {info.name for info in client.list_shared_memory()}
        with pytest.raises(tensorops.NotFound):
            client.list_shared_memory(first)


def test_register_errors(client):
    with tensorops.SharedMemoryRegion(unique(), 4096) as region:
        with pytest.raises(tensorops.NotFound):
            client.register_shared_memory(unique(), f"/tensorops-no-such-{uuid.uuid4().hex}",
                                          4096)
        with pytest.raises(tensorops.InvalidArgument):  # more bytes than the object holds
            client.register_shared_memory(unique(), region.key, 8192)
        with pytest.raises(tensorops.InvalidArgument):
            client.register_shared_memory(unique(), region.key, 4096, 4096)
        with pytest.raises(tensorops.InvalidArgument):  # a name outside [A-Za-z0-9._/-]
            client.register_shared_memory("no spaces", region.key, 4096)
        with pytest.raises(TypeError):
            client.register_shared_memory(unique(), region.key)


def test_cuda_regions_need_a_server_on_a_gpu(client, server):
    # The test servers run on the CPU: the refusal names the rule; a malformed handle is refused
    # before anything is sent. (The GPU suites register real CUDA buffers: tests/cuda_*.)
    with pytest.raises(tensorops.FailedPrecondition, match="runs no calls on a GPU"):
        client.register_cuda_shared_memory(unique(), bytes(64), 0, 4096)
    with pytest.raises(ValueError, match="raw_handle has 8 bytes"):
        client.register_cuda_shared_memory(unique(), bytes(8), 0, 4096)

    async def main():
        async with tensorops.aio.Client(server.address, timeout=30) as aio_client:
            with pytest.raises(tensorops.FailedPrecondition, match="runs no calls on a GPU"):
                await aio_client.register_cuda_shared_memory(unique(), bytes(64), 0, 4096)

    asyncio.run(main())


def test_bounds_and_alignment(client, region):
    index = np.array([[0]])
    near_end = tensorops.InSharedMemory(region.name, region.byte_size - 8, "float32", (4,))
    with pytest.raises(tensorops.InvalidArgument):
        client.gather(near_end, 0, np.array([0]))
    with pytest.raises(tensorops.InvalidArgument):
        client.gather(np.ones((1, 4), np.float32), 0, index, out=near_end)
    beyond = tensorops.InSharedMemory(region.name, region.byte_size + 64, "int8", (1,))
    with pytest.raises(tensorops.InvalidArgument):
        client.gather(beyond, 0, np.array([0]))
    misaligned = tensorops.InSharedMemory(region.name, 2, "float32", (1, 4))
    with pytest.raises(tensorops.InvalidArgument):
        client.gather(misaligned, 0, index)
    # The client checks its own arrays before sending anything.
    with pytest.raises(ValueError, match="needs 1048577 bytes"):
        region.array(np.uint8, region.byte_size + 1)
    with pytest.raises(ValueError, match="not a multiple of the item size"):
        region.array(np.float32, 4, offset=2)


def test_unknown_region_is_not_found(client):
    missing = tensorops.InSharedMemory(unique("missing"), 0, "float32", (2, 2))
    with pytest.raises(tensorops.NotFound):
        client.gather(missing, 0, np.array([[0, 1]]))
    with pytest.raises(tensorops.NotFound):
        client.gather(np.ones((2, 2), np.float32), 0, np.array([[0, 1]]), out=missing)
    with pytest.raises(tensorops.NotFound):
        client.put(unique("shm/x"), missing)
    with tensorops.SharedMemoryRegion(unique(), 4096) as unregistered:
        with pytest.raises(tensorops.NotFound):
            client.gather(unregistered.array(np.float32, (2, 2)), 0, np.array([[0, 1]]))


def test_regions_live_in_their_tokens_namespace(tmp_path):
    server = start_token_server(tmp_path, "token-a", "token-b")
    try:
        with tensorops.Client(server.address, timeout=30, token="token-a") as a, \
                tensorops.Client(server.address, timeout=30, token="token-b") as b, \
                a.shared_memory("mine", 4096) as region:
            x = region.array(np.float32, (2, 2))
            x[...] = [[1, 2], [3, 4]]
            np.testing.assert_array_equal(a.gather(x, 0, np.array([[1, 0]])), [[3, 2]])
            assert [info.name for info in a.list_shared_memory()] == ["mine"]
            assert b.list_shared_memory() == []
            with pytest.raises(tensorops.NotFound):
                b.list_shared_memory("mine")
            with pytest.raises(tensorops.NotFound):
                b.gather(x, 0, np.array([[1, 0]]))
            with pytest.raises(tensorops.NotFound):
                b.gather(np.ones((1, 2), np.float32), 0, np.array([[0, 0]]), out=x)
            assert b.unregister_shared_memory("") == []
            # The same name in b's namespace is b's own region.
            with b.shared_memory("mine", 4096) as theirs:
                y = theirs.array(np.float32, (2, 2))
                y[...] = 7
                np.testing.assert_array_equal(b.gather(y, 0, np.array([[1, 0]])), [[7, 7]])
                np.testing.assert_array_equal(a.gather(x, 0, np.array([[1, 0]])), [[3, 2]])
    finally:
        server.stop()
    assert server.process.returncode == 0, "".join(server.log)


@pytest.mark.parametrize("change", ["shrink", "unlink"])
def test_an_object_shrunk_or_removed_under_its_region_fails_that_call_only(change):
    server = ServerProcess()
    try:
        with tensorops.Client(server.address, timeout=30) as client:
            region = tensorops.SharedMemoryRegion(unique(), 1 << 16)
            client.register_shared_memory(region)
            x = region.array(np.float32, (4, 4))
            x[...] = np.arange(16).reshape(4, 4)
            out = region.array(np.float32, (1, 4), offset=4096)
            np.testing.assert_array_equal(client.gather(x, 0, np.array([[3, 0, 1, 2]])),
                                          [[12, 1, 6, 11]])
            name = unique("shm/stored")
            client.put(name, np.ones((4, 4), np.float32))
            if change == "shrink":
                # This process must not touch the region's bytes from here on (SIGBUS).
                fd = os.open(f"/dev/shm/{region.key.lstrip('/')}", os.O_RDWR)
                os.ftruncate(fd, 0)
                os.close(fd)
            else:
                region.unlink()
            with pytest.raises(tensorops.FailedPrecondition):
                client.gather(x, 0, np.array([[3, 0, 1, 2]]))
            with pytest.raises(tensorops.FailedPrecondition):
                client.gather(np.ones((4, 4), np.float32), 0, np.array([[0, 0, 0, 0]]), out=out)
            with pytest.raises(tensorops.FailedPrecondition):
                client.put(unique("shm/x"), x)
            with pytest.raises(tensorops.FailedPrecondition):
                client.get(name, out=x)
            # The server goes on serving, and lets the region go.
            np.testing.assert_array_equal(
                client.gather(np.arange(4, dtype=np.float32).reshape(2, 2), 1,
                              np.array([[1, 0], [0, 0]])), [[1, 0], [2, 2]])
            assert client.server_info().version
            assert client.unregister_shared_memory(region.name) == [region.name]
            del x, out
            region.close()
            region.unlink()
    finally:
        server.stop()
    assert server.process.returncode == 0, "".join(server.log)


def test_aio_client(server):
    async def main():
        async with tensorops.aio.Client(server.address, timeout=30) as client:
            async with client.shared_memory(unique(), 8192) as region:
                assert region.name in {info.name for info in await client.list_shared_memory()}
                x = Arena(region).place(rand((3, 4), np.float32))
                index = np.array([[2, 0, 1, 1]])
                out = region.array(np.float32, (1, 4), offset=4096)
                assert await client.gather(x, 0, index, out=out) is out
                np.testing.assert_array_equal(out, ref.gather(x, 0, index))
                name = unique("shm/aio")
                await client.put(name, x)
                got = region.array(np.float32, (3, 4), offset=6144)
                assert await client.get(name, out=got) is got
                np.testing.assert_array_equal(got, x)
                await client.delete(name)
                listed = await client.list_shared_memory(region.name)
                assert [info.byte_size for info in listed] == [8192]
            with pytest.raises(tensorops.NotFound):
                await client.list_shared_memory(region.name)
            assert not os.path.exists(f"/dev/shm/{region.key.lstrip('/')}")

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# The region on its own (no server)

def test_the_context_manager_unregisters_and_unlinks(client):
    with client.shared_memory(unique(), 4096) as region:
        path = f"/dev/shm/{region.key.lstrip('/')}"
        assert os.path.getsize(path) == 4096
        kept = region.array(np.int64, (8,))
        kept[...] = 5
    assert region.closed and not os.path.exists(path)
    assert region.name not in {info.name for info in client.list_shared_memory()}
    # An array made before the region closed stays valid: the mapping goes with the last one.
    assert kept.sum() == 40
    with pytest.raises(ValueError, match="is closed"):
        region.array(np.int64, (8,))


def test_attach_to_an_existing_object():
    with tensorops.SharedMemoryRegion(unique(), 4096) as creator:
        creator.array(np.int32, (4,))[...] = [1, 2, 3, 4]
        with tensorops.SharedMemoryRegion("other", 16, key=creator.key, create=False) as other:
            np.testing.assert_array_equal(other.array(np.int32, (4,)), [1, 2, 3, 4])
        assert os.path.exists(f"/dev/shm/{creator.key.lstrip('/')}"), \
            "a region that did not create its object leaves it"
        with pytest.raises(ValueError, match="holds 4096 bytes"):
            tensorops.SharedMemoryRegion("big", 8192, key=creator.key, create=False)
    with pytest.raises(FileNotFoundError):
        tensorops.SharedMemoryRegion("gone", 16, key=creator.key, create=False)


def test_no_warnings_and_no_object_left_at_exit(tmp_path):
    """A process that leaves a region open (arrays alive, object not unlinked) and one that
    attaches to another's object exit silently; the creator's object is unlinked at its exit,
    the attached one is not (multiprocessing's resource tracker would unlink both, and warn)."""
    script = tmp_path / "leave.py"
    script.write_text(
        "import sys, numpy as np, tensorops\n"
        "r = tensorops.SharedMemoryRegion('left', 4096)\n"
        "a = r.array(np.float32, (4,)); a[...] = 1\n"
        "r.close()\n"
        "other = tensorops.SharedMemoryRegion('theirs', 64, key=sys.argv[1], create=False)\n"
        "b = other.array(np.uint8, 64)\n"
        "print(r.key)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with tensorops.SharedMemoryRegion(unique(), 64) as theirs:
        done = subprocess.run([sys.executable, "-W", "error", str(script), theirs.key],
                              capture_output=True, text=True, env=env, cwd=PACKAGE_ROOT,
                              timeout=60)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        key = done.stdout.strip()
        assert key.startswith("/tensorops-")
        assert not os.path.exists(f"/dev/shm/{key.lstrip('/')}")
        assert os.path.exists(f"/dev/shm/{theirs.key.lstrip('/')}")


def test_a_region_dev_shm_has_no_room_for_fails_at_creation(tmp_path):
    """A /dev/shm without room for a region (a container's is 64 MiB unless given more) fails its
    creation with ENOSPC naming the cause, instead of a SIGBUS in whichever process first touches
    a page without room. Run in a child with a private 1 MiB /dev/shm (a mount namespace of its
    own); skipped where the child may not make one."""
    script = tmp_path / "full.py"
    script.write_text(
        "import errno, tensorops\n"
        "try:\n"
        "    tensorops.SharedMemoryRegion('big', 4 << 20)\n"
        "except OSError as error:\n"
        "    assert error.errno == errno.ENOSPC and '/dev/shm has no room' in str(error), error\n"
        "    print('refused')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    command = ("mount --make-rprivate / && mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 3; "
               f"exec {sys.executable} {script}")
    try:
        done = subprocess.run(["unshare", "--mount", "sh", "-c", command], capture_output=True,
                              text=True, env=env, cwd=PACKAGE_ROOT, timeout=60)
    except FileNotFoundError:
        pytest.skip("no unshare(1) here")
    if done.returncode == 3 or "unshare failed" in done.stderr:
        pytest.skip(f"cannot mount a small /dev/shm in a mount namespace here: {done.stderr}")
    assert done.returncode == 0 and done.stdout.strip() == "refused", (done.stdout, done.stderr)
