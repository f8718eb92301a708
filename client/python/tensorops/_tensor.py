"""numpy arrays, torch tensors and references <-> tensorops.v1.Tensor; scalars; reductions."""
import dataclasses
import math
import numbers
import operator
import sys

import numpy as np

from tensorops._shared_memory import InSharedMemory, in_shared_memory, shared_memory_of, view_over
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
# The name of each wire dtype, as numpy and torch spell it ("float32", "bfloat16").
DTYPE_NAMES = {wire: dtype.name for dtype, wire in _WIRE_DTYPE.items()}
DTYPE_NAMES[_DT.DATA_TYPE_BFLOAT16] = "bfloat16"
_WIRE_BY_NAME = {name: wire for wire, name in DTYPE_NAMES.items()}


@dataclasses.dataclass(frozen=True)
class Ref:
    """A tensor kept in the server's store, given by name: usable wherever an op takes an array.

    name: the stored tensor's name. version: when set, the op requires the tensor to be at exactly
    this version (tensorops.FailedPrecondition naming the current one otherwise); None uses
    whatever version is current when the op runs. dtype ("float32", "bfloat16", ...) and shape
    describe the tensor when known; they are never sent, and serve the client only (a list given
    as `src` next to a Ref input takes the Ref's dtype). data: the result's array when an op was
    called with return_data=True, else None.

    client.put, client.ref and ops called with store_as= or in_place=True return Refs pinned to
    the version they saw or made; ref.latest() is the same name at whatever version is current.
    """
    name: str
    version: int = None
    dtype: str = None
    shape: tuple = None
    data: object = dataclasses.field(default=None, compare=False, repr=False)

    def latest(self):
        """This Ref without its version: ops use whatever version is current when they run."""
        return dataclasses.replace(self, version=None, data=None)

    def proto(self):
        """The tensor_pb2.Tensor that references this stored tensor."""
        ref = tensor_pb2.TensorRef(name=self.name)
        if self.version is not None:
            ref.version = self.version
        return tensor_pb2.Tensor(stored=ref)


def _torch():
    """The torch module if the program has imported it (a torch tensor can exist only then)."""
    return sys.modules.get("torch")


def is_torch_tensor(value):
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def torch_device(values):
    """The device of the first torch tensor among `values`, or None when there is none."""
    torch = _torch()
    if torch is None:
        return None
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.device
    return None


class bfloat16:
    """A bfloat16 tensor, which numpy lacks: `bits` holds the raw bits as a uint16 ndarray.

    bfloat16 is the top 16 bits of a float32. Build one from raw bits with bfloat16(bits), or
    from floats with bfloat16.from_float32(x) (round to nearest even; NaN stays NaN); read it back
    with to_float32() or np.asarray(b) (float32). Results of bfloat16 ops come back as bfloat16.
    An ml_dtypes.bfloat16 ndarray is accepted as input too.
    """

    def __init__(self, bits):
        bits = np.asarray(bits)
        if bits.dtype.kind != "u" or bits.dtype.itemsize != 2:
            raise TypeError(f"bfloat16: bits.dtype = {bits.dtype} is not uint16 (bits are the "
                            "raw bfloat16 bits, of any byte order)")
        if not bits.dtype.isnative:
            bits = bits.astype(np.uint16)  # the values, in this machine's byte order
        self.bits = bits

    @classmethod
    def from_float32(cls, values):
        # np.asarray keeps a 0-d input 0-d (np.ascontiguousarray would make it 1-d); a float32
        # view as uint32 needs no contiguity, the item sizes being equal.
        floats = np.asarray(values, dtype=np.float32)
        as_u32 = floats.view(np.uint32)
        rounded = (as_u32 + np.uint32(0x7FFF) + ((as_u32 >> 16) & np.uint32(1))) >> 16
        return cls(np.where(np.isnan(floats), np.uint16(0x7FC0),
                            np.asarray(rounded).astype(np.uint16)))

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


def _torch_to_numpy(tensor):
    """A torch tensor's values as an ndarray (a view when it is on the CPU), detached from
    autograd; bfloat16 as its raw uint16 bits."""
    torch = _torch()
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    tensor = tensor.resolve_conj().resolve_neg()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


def wire_array(value, name="tensor"):
    """(wire dtype, ndarray in little-endian byte order) of an array-like, bfloat16, ml_dtypes
    bfloat16 array or torch tensor (detached, copied to the CPU, bfloat16 as its bits)."""
    if isinstance(value, Ref):
        raise TypeError(f"{name} is a reference to the stored tensor {value.name!r}, where the "
                        "tensor's values are needed")
    if isinstance(value, InSharedMemory):
        raise TypeError(f"{name} is a tensor in the shared-memory region {value.region!r}, where "
                        "the tensor's values are needed")
    if isinstance(value, bfloat16):
        array, wire = value.bits, _DT.DATA_TYPE_BFLOAT16
    elif is_torch_tensor(value):
        array = _torch_to_numpy(value)
        wire = (_DT.DATA_TYPE_BFLOAT16 if value.dtype == _torch().bfloat16
                else _WIRE_DTYPE.get(array.dtype))
        if wire is None:
            raise TypeError(f"{name}: torch dtype {value.dtype} is not supported by tensorops")
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
    return wire, array


def placed_in_shared_memory(value):
    """The tensorops.InSharedMemory of `value` when the server can read it in place (one, an
    ndarray over a region that is C-contiguous, little-endian and aligned, or a bfloat16 whose
    bits are), else None."""
    if isinstance(value, InSharedMemory):
        return value
    if isinstance(value, bfloat16):
        return in_shared_memory(value.bits, "bfloat16")
    return in_shared_memory(value)


def shared_memory_target(value, name):
    """The tensorops.InSharedMemory of `value` given as out= (one, an ndarray over a region, or a
    bfloat16 whose bits are), or ValueError saying why it cannot be one."""
    if isinstance(value, bfloat16):
        return shared_memory_of(value.bits, name, "bfloat16")
    return shared_memory_of(value, name)


def shared_memory_tensor(placed, name="tensor"):
    """The tensor_pb2.Tensor referencing the bytes a tensorops.InSharedMemory names."""
    wire = _WIRE_BY_NAME.get(placed.dtype)
    if wire is None:  # None, where run_stream does not know it yet (InSharedMemory checks names)
        raise TypeError(f"{name}: dtype {placed.dtype!r} is not supported by tensorops "
                        f"(expected one of {', '.join(_WIRE_BY_NAME)})")
    return tensor_pb2.Tensor(dtype=wire, shape=placed.shape, shared_memory=placed.proto())


def to_tensor(value, name="tensor"):
    """A tensor_pb2.Tensor holding `value` (see wire_array), referencing a Ref's tensor, or
    referencing the bytes of a tensor in shared memory (placed_in_shared_memory: an ndarray
    over a region that the server cannot read in place, e.g. a strided view, is sent as bytes)."""
    if isinstance(value, Ref):
        return value.proto()
    placed = placed_in_shared_memory(value)
    if placed is not None:
        return shared_memory_tensor(placed, name)
    wire, array = wire_array(value, name)
    # protobuf needs a bytes object: one copy, which tobytes() makes from any layout (C order).
    return tensor_pb2.Tensor(dtype=wire, shape=array.shape, data=array.tobytes())


def _is_array_like_only(value):
    """Whether `value` is an array-like without a dtype of its own: a list, a tuple or a Python
    number (numpy scalars, arrays, torch tensors, bfloat16 and Refs have one)."""
    return (isinstance(value, (list, tuple, numbers.Number))
            and not isinstance(value, np.generic))


def wire_dtype_of(value, tensor):
    """The wire dtype of an op's argument `value` whose message is `tensor`; None if unknown (a
    Ref without dtype)."""
    if tensor.dtype:
        return tensor.dtype
    if isinstance(value, Ref) and value.dtype is not None:
        return _WIRE_BY_NAME.get(value.dtype)
    return None


def _first_unfit(natural, limits):
    """The first element of `natural` (an ndarray of numbers) that an integer dtype of `limits`
    (np.iinfo) cannot hold once truncated toward zero, as a Python number; None when all fit."""
    kind = natural.dtype.kind
    if kind == "b" or natural.size == 0:
        return None
    if kind in "iu":
        # Python ints compare exactly; numpy compares uint64 with int64 through float64, which
        # lets 2**63 pass for int64.
        if int(natural.min()) >= limits.min and int(natural.max()) <= limits.max:
            return None
        return next(int(e) for e in natural.flat if not limits.min <= int(e) <= limits.max)
    if kind == "f":
        # limits.min and limits.max + 1 are 0 or powers of two, exact as floats (limits.max of
        # int64 is not: it rounds up to 2**63, which does not fit).
        truncated = np.trunc(natural)
        with np.errstate(invalid="ignore"):
            fits = ((truncated >= float(limits.min)) & (truncated < float(limits.max + 1))
                    & np.isfinite(natural))
        return None if fits.all() else natural[~fits].flat[0].item()
    for element in natural.flat:  # objects: Python ints beyond 64 bits, and their company
        try:
            whole = math.trunc(element)
        except (ValueError, OverflowError):  # nan, inf
            return element
        if not limits.min <= whole <= limits.max:
            return element
    return None


def _convert(value, wire, name, like_name):
    """`value` (a list, tuple or Python number) as an array of the wire dtype `wire`, as
    torch.tensor(value, dtype=...) converts: floats to integers truncate toward zero, but a
    number the dtype cannot hold (an integer out of its range; for an integer dtype, also a
    float that is not finite or whose integer part is out of its range) and a complex value for
    a real dtype are ValueErrors naming the argument, the value and the rule."""
    target_name = DTYPE_NAMES[wire]
    natural = np.asarray(value)
    kind = natural.dtype.kind
    # numpy holds integers beyond 64 bits (2**64, or 2**63 next to a negative one) as objects.
    numbers_as_objects = kind == "O" and all(isinstance(e, numbers.Number) for e in natural.flat)
    if kind not in "biufc" and not numbers_as_objects:
        raise TypeError(f"{name} = {value!r} is not numeric (its elements are {natural.dtype})")
    has_complex = kind == "c" or (numbers_as_objects and not all(
        isinstance(e, numbers.Real) for e in natural.flat))
    if has_complex and target_name not in ("complex64", "complex128"):
        raise ValueError(f"{name} = {value!r} has complex values, which {like_name}.dtype = "
                         f"{target_name} cannot hold")
    target = _NUMPY_DTYPE[wire]
    if wire != _DT.DATA_TYPE_BFLOAT16 and target.kind in "iu":
        limits = np.iinfo(target)
        bad = _first_unfit(natural, limits)
        if isinstance(bad, numbers.Integral):
            raise ValueError(f"{name}: {bad} does not fit {like_name}.dtype = {target_name} "
                             f"(expected {limits.min} <= value <= {limits.max})")
        if bad is not None:
            raise ValueError(f"{name}: {bad} does not fit {like_name}.dtype = {target_name} "
                             f"(expected a finite number whose integer part is {limits.min} "
                             f"<= value <= {limits.max})")
    try:
        if wire == _DT.DATA_TYPE_BFLOAT16:
            return bfloat16.from_float32(natural.astype(np.float32))
        return natural.astype(target)
    except OverflowError:  # an integer object beyond what a float64 holds (2**1024 and up)
        raise ValueError(f"{name} = {value!r} holds an integer too large for {like_name}.dtype "
                         f"= {target_name} (expected a magnitude below 2**1024)") from None


def to_tensor_like(value, like, like_tensor, name, like_name="input"):
    """A tensor_pb2.Tensor for `value`, an op argument that must have the dtype of another one
    (`like`, sent as `like_tensor`): a list, tuple or Python number takes that dtype, as
    torch.tensor(value, dtype=like.dtype) would; arrays, tensors and Refs keep their own, which
    the server checks."""
    if _is_array_like_only(value):
        wire = wire_dtype_of(like, like_tensor)
        if wire is not None:
            value = _convert(value, wire, name, like_name)
    return to_tensor(value, name)


def from_tensor(tensor, copy=False, device=None):
    """The values of a result tensor message.

    Default: a read-only ndarray over the message's bytes (no copy), or a bfloat16 for BFLOAT16.
    copy=True: a writable ndarray of its own (one copy). device (a torch.device): a torch tensor
    on it, which shares the writable copy's memory on the CPU (torch.bfloat16 for BFLOAT16).
    """
    dtype = _NUMPY_DTYPE.get(tensor.dtype)
    if dtype is None:
        raise TypeError(f"server sent unknown dtype {tensor.dtype}")
    array = np.frombuffer(tensor.data, dtype=dtype).reshape(tuple(tensor.shape))
    if copy or device is not None:
        array = array.copy()
    return wrap_array(array, tensor.dtype, device)


def result_in_shared_memory(out, wire, shape):
    """What a call that wrote its result (of wire dtype `wire` and `shape`) into out= returns:
    `out` itself when it has that dtype and shape; else the result's dtype and shape at out's
    place (an InSharedMemory, or an ndarray or bfloat16 over the same bytes as out)."""
    dtype_name = DTYPE_NAMES.get(wire)
    if dtype_name is None:
        raise TypeError(f"server sent unknown dtype {wire}")
    shape = tuple(shape)
    if isinstance(out, InSharedMemory):
        return dataclasses.replace(out, dtype=dtype_name, shape=shape)
    array = out.bits if isinstance(out, bfloat16) else out
    out_name = "bfloat16" if isinstance(out, bfloat16) else array.dtype.name
    if out_name == dtype_name and array.shape == shape:
        return out
    return wrap_array(view_over(array, _NUMPY_DTYPE[wire], shape), wire)


def wrap_array(array, wire, device=None):
    """`array` (little-endian, of wire dtype `wire`) as a client returns it: an ndarray, a
    bfloat16, or with a torch device a torch tensor over the same memory (array must be
    writable), moved to the device."""
    if device is None:
        return bfloat16(array) if wire == _DT.DATA_TYPE_BFLOAT16 else array
    torch = _torch()
    if wire == _DT.DATA_TYPE_BFLOAT16:
        tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(array)
    return tensor if device.type == "cpu" else tensor.to(device)


# The range of the wire's int64 fields (axes, indices, Scalar.int_value).
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def to_int64(value, name):
    """`value` (an int, a numpy integer or anything else with __index__) as an int for an
    int64 field, or TypeError (not an integer) or ValueError (out of range) naming the argument
    `name`, the value and the rule; protobuf's own say neither the argument nor the range."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} = {value!r} is not an integer (expected an int, "
                        f"{INT64_MIN} <= value <= {INT64_MAX})") from None
    if not INT64_MIN <= number <= INT64_MAX:
        raise ValueError(f"{name} = {value!r} is out of range (expected an int, "
                         f"{INT64_MIN} <= value <= {INT64_MAX}: an int64)")
    return number


def to_int64_list(values, name):
    """`values` (None, or an iterable of integers) as a list of ints for a repeated int64 field;
    errors as to_int64's, naming the element (name[i])."""
    if values is None:
        return []
    return [to_int64(value, f"{name}[{i}]") for i, value in enumerate(values)]


def to_scalar(value, name="value"):
    """A tensor_pb2.Scalar holding a Python or numpy number (or a 0-d ndarray of one), or
    TypeError / ValueError naming the argument `name`, the value and the rule."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]  # numpy's reductions give 0-d arrays for numbers: take the number
    if isinstance(value, (bool, np.bool_)):
        return tensor_pb2.Scalar(bool_value=bool(value))
    if isinstance(value, numbers.Integral):
        return tensor_pb2.Scalar(int_value=to_int64(value, name))
    if isinstance(value, numbers.Real):
        return tensor_pb2.Scalar(float_value=float(value))
    if isinstance(value, numbers.Complex):
        value = complex(value)
        return tensor_pb2.Scalar(complex_value=tensor_pb2.Complex(real=value.real,
                                                                  imag=value.imag))
    raise TypeError(f"{name} = {value!r} is not a scalar (expected a bool, int, float or complex "
                    "number, or a 0-d array of one)")


def is_scalar(value):
    """Whether `value` is a Python or numpy scalar (not an ndarray, not even 0-d)."""
    return isinstance(value, (numbers.Number, np.generic))


def wire_dtype(name):
    """The wire DataType of a dtype name ("float32", "bfloat16")."""
    return _WIRE_BY_NAME[name]


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
