"""Every dtype across the wire, bfloat16 and float16 included; layouts numpy may hand us."""
import numpy as np
import pytest

import reference as ref
import tensorops

RNG = np.random.default_rng(11)
DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32,
          np.float64, np.complex64, np.complex128]


def values(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return RNG.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
    if dtype.kind == "c":
        return (RNG.normal(size=shape) + 1j * RNG.normal(size=shape)).astype(dtype)
    return RNG.normal(size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_round_trip(client, dtype):
    x = values((3, 5), dtype)
    index = np.array([[4, 0, 2], [1, 1, 3], [0, 4, 4]], np.int32)
    result = client.gather(x, 1, index)
    assert result.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(result, ref.gather(x, 1, index))
    assert not result.flags.writeable  # a view over the response's bytes


def test_float16_scatter_sum(client):
    x = values((4, 3), np.float16)
    index = RNG.integers(0, 4, (6, 3))
    src = values((6, 3), np.float16)
    expected = ref.scatter(x, 0, index, src, "sum").astype(np.float16)
    np.testing.assert_allclose(client.scatter_reduce(x, 0, index, src, "sum"), expected,
                               rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_scatter_prod(client, dtype):
    x = values((3, 2), dtype)
    index = np.array([[0, 2], [0, 1]])
    src = values((2, 2), dtype)
    np.testing.assert_allclose(client.scatter(x, 0, index, src, reduce="prod"),
                               ref.scatter(x, 0, index, src, "prod").astype(dtype), rtol=1e-5)
    # A complex scalar value.
    np.testing.assert_allclose(client.scatter(x, 0, index, 1 - 2j),
                               ref.scatter(x, 0, index, np.asarray(1 - 2j, dtype)), rtol=1e-6)


def test_bfloat16_round_trip_and_sum(client):
    floats = np.array([[1.0, -2.5, 3.140625], [0.0, 96.0, -7.0]], np.float32)  # exact in bf16
    x = tensorops.bfloat16.from_float32(floats)
    assert x.bits[0, 0] == 0x3F80  # 1.0: the top half of float32's 0x3F800000
    np.testing.assert_array_equal(x.to_float32(), floats)
    np.testing.assert_array_equal(tensorops.bfloat16.from_float32(
        np.array([1.00390625, 1.01171875], np.float32)).bits, [0x3F80, 0x3F82])  # ties to even
    result = client.index_select(x, 1, np.array([2, 0]))
    assert isinstance(result, tensorops.bfloat16)
    np.testing.assert_array_equal(result.bits, x.bits[:, [2, 0]])
    # Index [[0, 0]] along axis 1: both src elements add into x[0, 0] (1 + 0.5 + 0.25).
    src = tensorops.bfloat16.from_float32(np.array([[0.5, 0.25]], np.float32))
    summed = client.scatter_reduce(x, 1, np.array([[0, 0]]), src, "sum")
    expected = floats.copy()
    expected[0, 0] = 1.75
    np.testing.assert_array_equal(summed.bits, tensorops.bfloat16.from_float32(expected).bits)


def test_strided_and_big_endian_inputs(client):
    base = values((4, 10), np.float64)
    strided = base[:, ::3]  # not contiguous
    big_endian = base.astype(">f8")
    transposed = base.T  # Fortran order
    index = np.array([[0], [2]])
    np.testing.assert_array_equal(client.gather(strided, 0, index[:, :1]),
                                  ref.gather(np.ascontiguousarray(strided), 0, index))
    np.testing.assert_array_equal(client.gather(big_endian, 0, index),
                                  ref.gather(base, 0, index))
    np.testing.assert_array_equal(client.index_select(transposed, 0, np.array([9, 1])),
                                  base.T[[9, 1]])
    assert client.gather(big_endian, 0, index).dtype == np.dtype("<f8")
