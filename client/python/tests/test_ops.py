"""Every op through tensorops.Client against the loop references in reference.py."""
import numpy as np
import pytest

import reference as ref
import tensorops

RNG = np.random.default_rng(2024)
REDUCES = ["assign", "sum", "prod", "mean", "amax", "amin"]


def rand(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return RNG.integers(1, 5, size=shape).astype(dtype)
    if dtype.kind == "b":
        return RNG.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "c":
        return (RNG.uniform(0.5, 2, shape) + 1j * RNG.uniform(0.5, 2, shape)).astype(dtype)
    return RNG.uniform(0.5, 2, shape).astype(dtype)


def check(actual, expected, dtype):
    assert isinstance(actual, np.ndarray)
    assert actual.dtype == np.dtype(dtype)
    assert actual.shape == expected.shape
    if np.dtype(dtype).kind in "fc":
        np.testing.assert_allclose(actual, expected.astype(dtype), rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(actual, expected.astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "int64", "complex64"])
def test_gather(client, dtype):
    x = rand((3, 4, 5), dtype)
    index = RNG.integers(-4, 4, size=(3, 2, 5))
    check(client.gather(x, 1, index), ref.gather(x, 1, index), dtype)


def test_take_along_axis_broadcasts_like_paddle(client):
    x = rand((3, 4), np.float32)
    indices = np.array([[2], [0]], np.int32)
    expected = ref.gather(x, 0, np.broadcast_to(indices, (2, 4)))
    check(client.take_along_axis(x, indices, 0), expected, np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(client, dtype, reduce, include_self):
    x = rand((4, 3), dtype)
    index = RNG.integers(0, 4, size=(5, 3))  # duplicates on purpose
    src = rand((5, 3), dtype)
    expected = ref.scatter(x, 0, index, src, reduce, include_self)
    if reduce == "assign":
        actual = client.scatter(x, 0, index, src)
    else:
        actual = client.scatter_reduce(x, 0, index, src, reduce, include_self=include_self)
    check(actual, expected, dtype)


@pytest.mark.parametrize("alias,reduce", [("add", "sum"), ("multiply", "prod"), ("mul", "prod"),
                                          ("max", "amax"), ("min", "amin"), ("update", "assign")])
def test_reduction_aliases(client, alias, reduce):
    x = rand((3, 4), np.float64)
    index = RNG.integers(0, 3, size=(2, 4))
    src = rand((2, 4), np.float64)
    check(client.scatter(x, 0, index, src, reduce=alias), ref.scatter(x, 0, index, src, reduce),
          np.float64)


def test_scatter_scalar_value_and_add(client):
    x = rand((3, 4), np.int32)
    index = np.array([[0, 1, 2, 0]])
    check(client.scatter(x, 0, index, 7), ref.scatter(x, 0, index, 7), np.int32)
    check(client.scatter(x, 0, index, value=2, reduce="sum"), ref.scatter(x, 0, index, 2, "sum"),
          np.int32)
    src = rand((1, 4), np.int32)
    check(client.scatter_add(x, 0, index, src), ref.scatter(x, 0, index, src, "sum"), np.int32)


@pytest.mark.parametrize("reduce", ["assign", "add", "mul", "mean", "amax", "amin"])
def test_put_along_axis_broadcasts_like_paddle(client, reduce):
    arr = rand((3, 4), np.float32)
    indices = np.array([[2], [0]], np.int64)
    values = np.float32(9.5)
    full_index = np.broadcast_to(indices, (2, 4))
    expected = ref.scatter(arr, 0, full_index, values,
                           {"add": "sum", "mul": "prod"}.get(reduce, reduce))
    check(client.put_along_axis(arr, indices, values, 0, reduce=reduce), expected, np.float32)


def test_index_select(client):
    x = rand((4, 5, 2), np.float32)
    index = np.array([3, -1, 0, 3], np.int64)
    check(client.index_select(x, 1, index), np.take(x, index, axis=1), np.float32)


def test_index_add_with_alpha(client):
    x = rand((5, 3), np.float32)
    index = np.array([0, 4, 0], np.int32)
    source = rand((3, 3), np.float32)
    check(client.index_add(x, 0, index, source, alpha=2.5),
          ref.index_reduce(x, 0, index, source, "sum", alpha=2.5), np.float32)


def test_index_copy(client):
    x = rand((3, 5), np.int64)
    index = np.array([4, 1], np.int64)
    source = rand((3, 2), np.int64)
    check(client.index_copy(x, 1, index, source), ref.index_reduce(x, 1, index, source, "assign"),
          np.int64)


def test_index_reduce_defaults_to_sum(client):
    # As the C++ client's IndexReduceOptions and tensorops-cli index_reduce: index_add.
    x = rand((5, 3), np.float32)
    index = np.array([0, 4, 0], np.int64)
    source = rand((3, 3), np.float32)
    request = tensorops.requests.index_reduce(x, 0, index, source)
    assert request.index_reduce.reduce == tensorops.REDUCTIONS["sum"]
    check(client.index_reduce(x, 0, index, source),
          ref.index_reduce(x, 0, index, source, "sum"), np.float32)
    check(client.index_reduce(x, 0, index, source, alpha=2),
          ref.index_reduce(x, 0, index, source, "sum", alpha=2), np.float32)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(client, reduce, include_self):
    x = rand((5, 3), np.float64)
    index = np.array([0, 4, 0, 2], np.int64)
    source = rand((4, 3), np.float64)
    check(client.index_reduce(x, 0, index, source, reduce, include_self=include_self),
          ref.index_reduce(x, 0, index, source, reduce, include_self), np.float64)


def test_select_scatter(client):
    x = rand((3, 4, 2), np.float32)
    src = rand((3, 2), np.float32)
    expected = x.copy()
    expected[:, -1, :] = src
    check(client.select_scatter(x, src, 1, -1), expected, np.float32)


@pytest.mark.parametrize("start,end,step", [(None, None, 1), (1, None, 2), (0, 5, 3), (-4, -1, 1)])
def test_slice_scatter(client, start, end, step):
    x = rand((7, 3), np.int32)
    expected = x.copy()
    target = expected[slice(start, end, step), :]
    src = rand(target.shape, np.int32)
    expected[slice(start, end, step), :] = src
    check(client.slice_scatter(x, src, 0, start, end, step), expected, np.int32)


@pytest.mark.parametrize("offset", [0, 1, -2])
def test_diagonal_scatter(client, offset):
    x = rand((4, 5), np.float32)
    src = rand(np.diagonal(x, offset).shape, np.float32)
    check(client.diagonal_scatter(x, src, offset), ref.diagonal_scatter(x, src, offset),
          np.float32)


def test_diagonal_scatter_other_axes(client):
    x = rand((3, 2, 4), np.float64)
    src = rand(np.diagonal(x, 1, 0, 2).shape, np.float64)
    check(client.diagonal_scatter(x, src, 1, dim1=0, dim2=2),
          ref.diagonal_scatter(x, src, 1, 0, 2), np.float64)
    check(client.diagonal_scatter(x, src, offset=1, axis1=0, axis2=2),
          ref.diagonal_scatter(x, src, 1, 0, 2), np.float64)


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(client, batch_dims):
    x = rand((3, 4, 5), np.float32)
    if batch_dims == 0:
        index = np.stack([RNG.integers(0, 3, (2, 6)), RNG.integers(-4, 4, (2, 6))], axis=-1)
    else:
        index = RNG.integers(0, 4, (3, 6, 1))
    check(client.gather_nd(x, index, batch_dims=batch_dims), ref.gather_nd(x, index, batch_dims),
          np.float32)


def test_gather_nd_axes_form_is_gather(client):
    x = rand((3, 4), np.float32)
    index = RNG.integers(0, 4, (3, 2))
    check(client.gather_nd(x, index[..., None], axes=[1]), ref.gather(x, 1, index), np.float32)


def test_scatter_nd(client):
    x = rand((4, 3), np.float32)
    index = np.array([[3, 0], [1, 2], [3, 0]])
    src = rand((3,), np.float32)
    check(client.scatter_nd(x, index, src), ref.scatter_nd(x, index, src), np.float32)
    check(client.scatter_nd(x, index, src, reduce="add"), ref.scatter_nd(x, index, src, "sum"),
          np.float32)
    rows = np.array([[2], [0], [2]])
    row_src = rand((3, 3), np.float32)
    zeros = np.zeros((4, 3), np.float32)
    check(client.scatter_nd(None, rows, row_src, shape=[4, 3]),
          ref.scatter_nd(zeros, rows, row_src, "sum"), np.float32)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_tensor_scatter_nd_max_min(client, reduce):
    x = rand((3, 4), np.float64)
    index = np.array([[1, 1], [2, 3], [1, 1]])
    src = rand((3,), np.float64)
    expected = x.copy()
    for pos, coords in enumerate(index):
        pick = max if reduce == "amax" else min
        expected[tuple(coords)] = pick(expected[tuple(coords)], src[pos])
    check(client.scatter_nd(x, index, src, reduce=reduce), expected, np.float64)


def test_scatter_nd_axes_form_inverts_gather_nd(client):
    # With axes=[1], ScatterNd(x, idx[..., None], src) is scatter along axis 1.
    x = rand((3, 4), np.float32)
    index = np.array([[0, 3], [2, 2], [1, 0]])
    src = rand((3, 2), np.float32)
    check(client.scatter_nd(x, index[..., None], src, axes=[1], reduce="sum"),
          ref.scatter(x, 1, index, src, "sum"), np.float32)


def test_empty_tensors(client):
    x = rand((3, 0), np.float32)
    result = client.gather(x, 0, np.zeros((2, 0), np.int64))
    assert result.shape == (2, 0) and result.dtype == np.float32
    check(client.index_select(rand((4, 2), np.int8), 0, np.zeros((0,), np.int32)),
          np.zeros((0, 2), np.int8), np.int8)


def test_masked_scatter(client):
    x = rand((3, 4), np.int16)
    mask = np.array([[True, False, True, True]])
    src = rand((20,), np.int16)
    check(client.masked_scatter(x, mask, src), ref.masked_scatter(x, mask, src), np.int16)


def test_run_generic(client):
    import tensorops

    x = rand((3, 4), np.float32)
    index = RNG.integers(0, 4, (3, 2))
    check(client.run("gather", x, 1, index), ref.gather(x, 1, index), np.float32)
    check(client.run(tensorops.requests.index_select(x, 0, np.array([2, 0]))), x[[2, 0]],
          np.float32)
