"""numpy arrays <-> tensorops.v1.Tensor, scalars and reduction names."""
import numbers

import numpy as np

from tensorops.v1 import ops_pb2, tensor_pb2

_DT = tensor_pb2.DataType
_WIRE_DTYPE = {
    np.dtype(np.bool_): _DT.DATA_TYPE_BOOL,
    np.dtype(np.uint8): _DT.DATA_TYPE_UINT8,
    np.dtype(np.int8): _DT.DATA_TYPE_INT8,
    np.dtype(np.int16): _DT.DATA_TYPE_INT16,
    np.dtype(np.int32): _DT.DATA_TYPE_INT32,
    np.dtype(np.int64): _DT.DATA_TYPE_INT64,
    np.dtype(np.float16): _DT.DATA_TYPE_FLOAT16,
    np.dtype(np.float32): _DT.DATA_TYPE_FLOAT32,
    np.dtype(np.float64): _DT.DATA_TYPE_FLOAT64,
    np.dtype(np.complex64): _DT.DATA_TYPE_COMPLEX64,
    np.dtype(np.complex128): _DT.DATA_TYPE_COMPLEX128,
}
# Little-endian numpy dtype of each wire dtype (bfloat16: its raw bits).
_NUMPY_DTYPE = {wire: dtype.newbyteorder("<") for dtype, wire in _WIRE_DTYPE.items()}
_NUMPY_DTYPE[_DT.DATA_TYPE_BFLOAT16] = np.dtype("<u2")


class bfloat16:
    """A bfloat16 tensor, which numpy lacks: `bits` holds the raw bits as a uint16 ndarray.

    bfloat16 is the top 16 bits of a float32. Build one from raw bits with bfloat16(bits), or
    from floats with bfloat16.from_float32(x) (round to nearest even; NaN stays NaN); read it back
    with to_float32() or np.asarray(b) (float32). Results of bfloat16 ops come back as bfloat16.
    An ml_dtypes.bfloat16 ndarray is accepted as input too.
    """

    def __init__(self, bits):
        bits = np.asarray(bits)
        if bits.dtype != np.uint16:
            raise TypeError(f"bfloat16 bits must be uint16, got {bits.dtype}")
        self.bits = bits

    @classmethod
    def from_float32(cls, values):
        as_u32 = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
        rounded = (as_u32 + np.uint32(0x7FFF) + ((as_u32 >> 16) & np.uint32(1))) >> 16
        nan = np.isnan(np.asarray(values, dtype=np.float32))
        return cls(np.where(nan, np.uint16(0x7FC0), rounded.astype(np.uint16)))

    def to_float32(self):
        return (self.bits.astype(np.uint32) << 16).view(np.float32)

    def __array__(self, dtype=None, copy=None):
        values = self.to_float32()
        return values if dtype is None else values.astype(dtype)

    @property
    def shape(self):
        return self.bits.shape

    def __repr__(self):
        return f"tensorops.bfloat16({self.to_float32()!r})"


def to_tensor(value, name="tensor"):
    """A tensor_pb2.Tensor holding `value` (array-like, bfloat16, or ml_dtypes bfloat16)."""
    if isinstance(value, bfloat16):
        array, wire = value.bits, _DT.DATA_TYPE_BFLOAT16
    else:
        array = np.asarray(value)
        if array.dtype.name == "bfloat16":  # ml_dtypes
            array, wire = array.view(np.uint16), _DT.DATA_TYPE_BFLOAT16
        else:
            wire = _WIRE_DTYPE.get(array.dtype.newbyteorder("="))
            if wire is None:
                raise TypeError(f"{name}: dtype {array.dtype} is not supported by tensorops")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    # protobuf needs a bytes object: one copy, which tobytes() makes from any layout (C order).
    return tensor_pb2.Tensor(dtype=wire, shape=array.shape, data=array.tobytes())


def from_tensor(tensor):
    """A read-only ndarray over the tensor's bytes (no copy), or a bfloat16 for BFLOAT16."""
    dtype = _NUMPY_DTYPE.get(tensor.dtype)
    if dtype is None:
        raise TypeError(f"server sent unknown dtype {tensor.dtype}")
    array = np.frombuffer(tensor.data, dtype=dtype).reshape(tuple(tensor.shape))
    if tensor.dtype == _DT.DATA_TYPE_BFLOAT16:
        return bfloat16(array)
    return array


def to_scalar(value):
    """A tensor_pb2.Scalar holding a Python or numpy number."""
    if isinstance(value, (bool, np.bool_)):
        return tensor_pb2.Scalar(bool_value=bool(value))
    if isinstance(value, numbers.Integral):
        return tensor_pb2.Scalar(int_value=int(value))
    if isinstance(value, numbers.Real):
        return tensor_pb2.Scalar(float_value=float(value))
    if isinstance(value, numbers.Complex):
        value = complex(value)
        return tensor_pb2.Scalar(complex_value=tensor_pb2.Complex(real=value.real,
                                                                  imag=value.imag))
    raise TypeError(f"not a scalar: {value!r}")


def is_scalar(value):
    """Whether `value` is a Python or numpy scalar (not an ndarray, not even 0-d)."""
    return isinstance(value, (numbers.Number, np.generic))


_R = ops_pb2.Reduction
# Reduction names as PyTorch and Paddle spell them.
REDUCTIONS = {
    "assign": _R.REDUCTION_ASSIGN, "update": _R.REDUCTION_ASSIGN, "none": _R.REDUCTION_ASSIGN,
    "sum": _R.REDUCTION_SUM, "add": _R.REDUCTION_SUM,
    "prod": _R.REDUCTION_PROD, "mul": _R.REDUCTION_PROD, "multiply": _R.REDUCTION_PROD,
    "mean": _R.REDUCTION_MEAN,
    "amax": _R.REDUCTION_AMAX, "max": _R.REDUCTION_AMAX,
    "amin": _R.REDUCTION_AMIN, "min": _R.REDUCTION_AMIN,
}


def to_reduction(reduce):
    """The wire Reduction for a name in REDUCTIONS (None means assign)."""
    if reduce is None:
        return _R.REDUCTION_ASSIGN
    try:
        return REDUCTIONS[str(reduce).lower()]
    except KeyError:
        raise ValueError(f"unknown reduction {reduce!r}; expected one of "
                         f"{', '.join(sorted(REDUCTIONS))}") from None
