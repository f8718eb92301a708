"""KServe v2 end to end: stock `tritonclient.grpc` against the real tensorops-server.

docs/kserve.md is the contract. Every op (and some backward models) is called as a model through
InferenceServerClient.infer, async_infer and a start_stream/async_stream_infer stream, with its
attributes as request parameters, and each result is compared bit for bit with the same call made
through tensorops.v1 by the repository's Python client on the same server; the loop references
of client/python/tests/reference.py check both independently. Then the metadata, config, health
and statistics RPCs, the errors (whose messages must carry tensorops' own text), the tensor store
parameters, and the README-style example of docs/kserve.md, run as printed there.
"""
import contextlib
import dataclasses
import io
import os
import queue
import re
import time

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

import reference as ref
import tensorops

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(REPO, "docs", "kserve.md")
README = os.path.join(REPO, "README.md")

RNG = np.random.default_rng(20240717)

# The numpy dtype of each v2 datatype the server serves (docs/kserve.md, Datatypes); BF16 is
# ml_dtypes.bfloat16, which tritonclient 2.73 requires for BF16 inputs and returns for outputs.
DTYPES = {"BOOL": np.bool_, "UINT8": np.uint8, "INT8": np.int8, "INT16": np.int16,
          "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
          "BF16": ml_dtypes.bfloat16, "FP32": np.float32, "FP64": np.float64}

# docs/kserve.md, Models: each forward model's inputs. A backward model takes these and
# "grad_output", and returns grad_input, plus grad_src for the ops with a src tensor.
MODEL_INPUTS = {
    "gather": ["input", "index"],
    "scatter": ["input", "index", "src"],
    "index_select": ["input", "index"],
    "index_reduce": ["input", "index", "src"],
    "select_scatter": ["input", "src"],
    "slice_scatter": ["input", "src"],
    "diagonal_scatter": ["input", "src"],
    "gather_nd": ["input", "index"],
    "scatter_nd": ["index", "src", "input"],
    "masked_scatter": ["input", "mask", "src"],
}
# docs/kserve.md, Attributes: the parameters each op takes (include_self, broadcast and
# deterministic where its tensorops.v1 request has them).
OP_ATTRIBUTES = {
    "gather": {"axis", "broadcast"},
    "scatter": {"axis", "reduce", "include_self", "broadcast", "deterministic", "value"},
    "index_select": {"axis"},
    "index_reduce": {"axis", "reduce", "include_self", "alpha"},
    "select_scatter": {"axis", "index"},
    "slice_scatter": {"axis", "start", "end", "step"},
    "diagonal_scatter": {"offset", "axis1", "axis2"},
    "gather_nd": {"batch_dims", "axes"},
    "scatter_nd": {"batch_dims", "axes", "shape", "reduce", "include_self", "deterministic"},
    "masked_scatter": set(),
}


def model_io(model):
    """(inputs, outputs) of a model by docs/kserve.md's table."""
    op = model.removesuffix("_backward")
    inputs = MODEL_INPUTS[op]
    if op == model:
        return inputs, ["output"]
    return inputs + ["grad_output"], ["grad_input"] + (["grad_src"] if "src" in inputs else [])


ALL_MODELS = [m for op in MODEL_INPUTS for m in (op, op + "_backward")]


def usual_datatype(tensor_name):
    """The datatype metadata and config name for an input or output (docs/kserve.md, Models)."""
    return {"index": "INT64", "mask": "BOOL"}.get(tensor_name, "FP32")


# ---------------------------------------------------------------------------------------------
# Tensors and comparisons


def rand(shape, datatype):
    """Random values of a datatype: small integers (signed ones negative too) or floats in
    [0.5, 2), so that sums, products and means stay exact or well conditioned."""
    dtype = np.dtype(DTYPES[datatype])
    if datatype == "BOOL":
        return RNG.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "u":
        return RNG.integers(0, 10, size=shape).astype(dtype)
    if dtype.kind == "i":
        return RNG.integers(-9, 10, size=shape).astype(dtype)
    return RNG.uniform(0.5, 2, size=shape).astype(dtype)


def ints(shape, low, high, datatype="INT64"):
    """An index tensor of a datatype (INT32 or INT64) with values in [low, high)."""
    return RNG.integers(low, high, size=shape).astype(DTYPES[datatype])


def as_array(value):
    """A tensorops.v1 result as an ndarray: its bfloat16 (raw bits) as ml_dtypes.bfloat16."""
    if isinstance(value, tensorops.bfloat16):
        return value.bits.view(ml_dtypes.bfloat16)
    return np.asarray(value)


def bits(array):
    """The array's raw elements as unsigned integers, so that equality is bitwise."""
    array = np.ascontiguousarray(array)
    return array.view(np.dtype(f"u{array.dtype.itemsize}"))


def assert_same(got, want, what):
    """The v2 result `got` is `want` (tensorops.v1's) exactly: dtype, shape and every bit."""
    want = as_array(want)
    assert got is not None, f"{what}: no such output in the response"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, tensorops.v1 gives {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, tensorops.v1 gives {want.shape}"
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{what}: {got} != {want}")


def assert_close(got, expected, what):
    """`got` matches the loop reference: exactly for integers and bools, within the datatype's
    rounding for floats (the reference reduces in float64, the server in its own order)."""
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    if got.dtype == ml_dtypes.bfloat16 or got.dtype.kind == "f":
        rtol = {2: 1e-2, 4: 1e-5, 8: 1e-12}[got.dtype.itemsize]
        np.testing.assert_allclose(got.astype(np.float64),
                                   np.asarray(expected).astype(np.float64),
                                   rtol=rtol, atol=rtol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, np.asarray(expected).astype(got.dtype), err_msg=what)


def v2_inputs(arrays):
    """tritonclient InferInputs of {name: ndarray}, in that order, their data in raw contents."""
    inputs = []
    for name, array in arrays.items():
        datatype = np_to_triton_dtype(array.dtype)
        infer_input = grpcclient.InferInput(name, list(array.shape), datatype)
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return inputs


@contextlib.contextmanager
def raises(status, *fragments):
    """Like pytest.raises(InferenceServerException), and the exception has that gRPC status
    (e.g. "INVALID_ARGUMENT"; None: any) and a message containing every fragment."""
    with pytest.raises(InferenceServerException) as info:
        yield info
    check_error(info.value, status, *fragments)


def check_error(error, status, *fragments):
    assert isinstance(error, InferenceServerException), repr(error)
    if status is not None:
        assert error.status() == f"StatusCode.{status}", \
            f"status {error.status()}, expected {status}: {error.message()}"
    for fragment in fragments:
        assert fragment in error.message(), \
            f"{fragment!r} is not in the message {error.message()!r}"


def v1_error(call):
    """The tensorops.Error a tensorops.v1 call raises (its message is what v2 must carry)."""
    with pytest.raises(tensorops.Error) as info:
        call()
    return info.value


# ---------------------------------------------------------------------------------------------
# The forward calls: one Case per model call, each with its tensorops.v1 twin.


@dataclasses.dataclass
class Case:
    id: str
    model: str
    inputs: dict       # input name -> ndarray, sent in this order
    parameters: dict   # the request parameters (the op's attributes)
    v1: object         # v1(tensorops.Client) -> the same call through tensorops.v1
    reference: object = None  # reference() -> the expected result (reference.py, numpy); or None


# Each builder below makes one Case from fresh random tensors; the lambdas close over the
# builder's own locals, so that every Case keeps its own tensors.


def gather_case(datatype, index_datatype):
    x = rand((3, 4, 5), datatype)
    index = ints((3, 2, 5), -4, 4, index_datatype)  # negative indices count from the end
    return Case(f"gather-{datatype}-{index_datatype}", "gather", {"input": x, "index": index},
                {"axis": 1}, lambda c: c.gather(x, 1, index), lambda: ref.gather(x, 1, index))


def gather_broadcast_case():
    """paddle.take_along_axis: an index of shape (2, 1) stands for (2, 4)."""
    x = rand((3, 4), "FP32")
    index = ints((2, 1), 0, 3)
    return Case("gather-broadcast", "gather", {"input": x, "index": index},
                {"axis": 0, "broadcast": True}, lambda c: c.gather(x, 0, index, broadcast=True),
                lambda: ref.gather(x, 0, np.broadcast_to(index, (2, 4))))


def scatter_case(datatype, reduce=None, include_self=None, axis=0, deterministic=None):
    """scatter with src and duplicate-heavy indices (along axis 0, every index is 0 or 1: four
    sources per destination on average). reduce None sends no reduce parameter (assign)."""
    x = rand((4, 3), datatype) if axis == 0 else rand((3, 5), datatype)
    index = ints((8, 3), 0, 2) if axis == 0 else ints((3, 4), 0, 5)
    src = rand(index.shape, datatype)
    parameters = {"axis": axis}
    for name, value in [("reduce", reduce), ("include_self", include_self),
                        ("deterministic", deterministic)]:
        if value is not None:
            parameters[name] = value
    case_id = "-".join(f"{k}={v}" for k, v in parameters.items())
    return Case(f"scatter-{datatype}-{case_id}", "scatter",
                {"input": x, "index": index, "src": src}, parameters,
                lambda c: c.scatter(x, axis, index, src, reduce=reduce, include_self=include_self,
                                    deterministic=bool(deterministic)),
                lambda: ref.scatter(x, axis, index, src, reduce or "assign",
                                    True if include_self is None else include_self))


def scatter_value_case(datatype, value, reduce=None):
    """scatter with the scalar `value` parameter instead of src (an int64, double or bool
    parameter, as tritonclient sends a Python int, float or bool)."""
    x = rand((3, 5), datatype)
    index = ints((2, 5), 0, 3)
    parameters = {"axis": 0, "value": value, **({"reduce": reduce} if reduce else {})}
    return Case(f"scatter-value-{datatype}-{value}", "scatter", {"input": x, "index": index},
                parameters, lambda c: c.scatter(x, 0, index, value=value, reduce=reduce),
                lambda: ref.scatter(x, 0, index, value, reduce or "assign"))


def scatter_broadcast_case():
    """paddle.put_along_axis: an index of shape (2, 1) stands for (2, 4)."""
    x = rand((3, 4), "FP32")
    index = ints((2, 1), 0, 3)
    src = rand((2, 4), "FP32")
    return Case("scatter-broadcast", "scatter", {"input": x, "index": index, "src": src},
                {"axis": 0, "broadcast": True},
                lambda c: c.scatter(x, 0, index, src, broadcast=True),
                lambda: ref.scatter(x, 0, np.broadcast_to(index, (2, 4)), src))


def index_select_case(datatype, index_datatype):
    x = rand((4, 5, 2), datatype)
    index = ints((6,), -5, 5, index_datatype)
    return Case(f"index_select-{datatype}-{index_datatype}", "index_select",
                {"input": x, "index": index}, {"axis": 1},
                lambda c: c.index_select(x, 1, index), lambda: np.take(x, index, axis=1))


def index_reduce_case(datatype, reduce, include_self=None, alpha=None):
    """index_reduce along axis 0 with duplicate indices, except for assign (index_copy), whose
    winner among duplicates PyTorch leaves open. reduce None sends none: the default, assign."""
    x = rand((5, 3), datatype)
    index = RNG.permutation(5)[:3] if reduce in (None, "assign") else ints((6,), 0, 5)
    src = rand((len(index), 3), datatype)
    parameters = {"axis": 0}
    for name, value in [("reduce", reduce), ("include_self", include_self), ("alpha", alpha)]:
        if value is not None:
            parameters[name] = value
    case_id = "-".join(f"{k}={v}" for k, v in parameters.items())
    return Case(f"index_reduce-{datatype}-{case_id}", "index_reduce",
                {"input": x, "index": index, "src": src}, parameters,
                lambda c: c.index_reduce(x, 0, index, src, reduce or "assign",
                                         include_self=include_self, alpha=alpha),
                lambda: ref.index_reduce(x, 0, index, src, reduce or "assign",
                                         True if include_self is None else include_self,
                                         1 if alpha is None else alpha))


def select_scatter_case(datatype):
    x = rand((3, 4, 2), datatype)
    src = rand((3, 2), datatype)

    def expected():
        out = x.copy()
        out[:, -1, :] = src
        return out

    return Case(f"select_scatter-{datatype}", "select_scatter", {"input": x, "src": src},
                {"axis": 1, "index": -1}, lambda c: c.select_scatter(x, src, 1, -1), expected)


def slice_scatter_case(datatype, axis, start=None, end=None, step=None):
    """slice_scatter; a None start, end or step is left out of the parameters (its default)."""
    x = rand((7, 3) if axis == 0 else (3, 7), datatype)
    window = [slice(None)] * 2
    window[axis] = slice(start, end, step)
    window = tuple(window)
    src = rand(x[window].shape, datatype)
    parameters = {"axis": axis}
    for name, value in [("start", start), ("end", end), ("step", step)]:
        if value is not None:
            parameters[name] = value

    def expected():
        out = x.copy()
        out[window] = src
        return out

    case_id = "-".join(f"{k}={v}" for k, v in parameters.items())
    return Case(f"slice_scatter-{datatype}-{case_id}", "slice_scatter", {"input": x, "src": src},
                parameters, lambda c: c.slice_scatter(x, src, axis, start, end, step), expected)


def diagonal_scatter_case(datatype, shape, offset, axis1=None, axis2=None):
    """diagonal_scatter; a None axis1 or axis2 is left out of the parameters (0 and 1)."""
    x = rand(shape, datatype)
    a1, a2 = 0 if axis1 is None else axis1, 1 if axis2 is None else axis2
    src = rand(np.diagonal(x, offset, a1, a2).shape, datatype)
    parameters = {"offset": offset}
    if axis1 is not None:
        parameters.update(axis1=axis1, axis2=axis2)
    return Case(f"diagonal_scatter-{datatype}-offset={offset}-axes={a1},{a2}", "diagonal_scatter",
                {"input": x, "src": src}, parameters,
                lambda c: c.diagonal_scatter(x, src, offset, axis1, axis2),
                lambda: ref.diagonal_scatter(x, src, offset, a1, a2))


def gather_nd_case(case_id, x, index, parameters, reference, batch_dims=0, axes=None):
    return Case(f"gather_nd-{case_id}", "gather_nd", {"input": x, "index": index}, parameters,
                lambda c: c.gather_nd(x, index, batch_dims=batch_dims, axes=axes), reference)


def gather_nd_cases():
    x = rand((3, 4, 5), "FP32")
    index = np.stack([ints((2, 6), 0, 3), ints((2, 6), -4, 4)], axis=-1)
    yield gather_nd_case("FP32", x, index, {}, lambda: ref.gather_nd(x, index))

    x1 = rand((3, 4, 5), "INT32")
    index1 = ints((3, 6, 1), 0, 4, "INT32")
    yield gather_nd_case("batch_dims-INT32", x1, index1, {"batch_dims": 1},
                         lambda: ref.gather_nd(x1, index1, 1), batch_dims=1)

    # The axes form, axes "0,2": out[i] = x[index[i, 0], i_1, index[i, 1]], out.shape = B.
    x2 = rand((3, 4, 5), "FP64")
    index2 = np.stack([ints((2, 3, 6), 0, 3), ints((2, 3, 6), 0, 5)], axis=-1)

    def axes_form():
        out = np.empty(index2.shape[:-1], x2.dtype)
        for pos in np.ndindex(*out.shape):
            out[pos] = x2[index2[pos][0], pos[1], index2[pos][1]]
        return out

    yield gather_nd_case("axes-string-FP64", x2, index2, {"axes": "0,2"}, axes_form, axes=[0, 2])

    # One axis, as "[1]" and as an int64: GatherNd(x, idx[..., None], axes=[1]) is Gather.
    for case_id, datatype, axes in [("axes-bracket-FP16", "FP16", "[1]"),
                                    ("axes-int64-INT64", "INT64", 1)]:
        x3 = rand((3, 4), datatype)
        index3 = ints((3, 2), 0, 4)
        yield gather_nd_case(case_id, x3, index3[..., None], {"axes": axes},
                             lambda x3=x3, index3=index3: ref.gather(x3, 1, index3), axes=[1])


def scatter_nd_case(case_id, arrays, parameters, v1_call, reference):
    """scatter_nd; its inputs go in docs/kserve.md's order (index, src, input): by name."""
    order = {"index": 0, "src": 1, "input": 2}
    arrays = dict(sorted(arrays.items(), key=lambda item: order[item[0]]))
    return Case(f"scatter_nd-{case_id}", "scatter_nd", arrays, parameters, v1_call, reference)


def scatter_nd_cases():
    x = rand((4, 3), "FP32")
    index = np.stack([ints((6,), 0, 2), ints((6,), 0, 3)], axis=-1)  # duplicates
    src = rand((6,), "FP32")
    yield scatter_nd_case("sum-FP32", {"input": x, "index": index, "src": src},
                          {"reduce": "sum"}, lambda c: c.scatter_nd(x, index, src, reduce="sum"),
                          lambda: ref.scatter_nd(x, index, src, "sum"))

    x1 = rand((4, 3), "FP64")
    index1 = np.array([[3, 0], [1, 2], [0, 1]])
    src1 = rand((3,), "FP64")
    yield scatter_nd_case("assign-FP64", {"input": x1, "index": index1, "src": src1}, {},
                          lambda c: c.scatter_nd(x1, index1, src1),
                          lambda: ref.scatter_nd(x1, index1, src1))

    x2 = rand((4, 3), "INT64")
    src2 = rand((6,), "INT64")

    def amax_without_self():
        out = x2.copy()
        for coords in {tuple(row) for row in index}:
            out[coords] = max(src2[j] for j, row in enumerate(index) if tuple(row) == coords)
        return out

    yield scatter_nd_case("amax-INT64", {"input": x2, "index": index, "src": src2},
                          {"reduce": "amax", "include_self": False},
                          lambda c: c.scatter_nd(x2, index, src2, reduce="amax",
                                                 include_self=False), amax_without_self)

    # Without an input: zeros of `shape`, a string "4,3" (with reduce sum, tf.scatter_nd) ...
    rows = ints((5, 1), 0, 4)
    row_src = rand((5, 3), "FP32")
    yield scatter_nd_case("shape-string-FP32", {"index": rows, "src": row_src},
                          {"shape": "4,3", "reduce": "sum"},
                          lambda c: c.scatter_nd(None, rows, row_src, shape=[4, 3], reduce="sum"),
                          lambda: ref.scatter_nd(np.zeros((4, 3), np.float32), rows, row_src,
                                                 "sum"))
    # ... and an int64 for one dimension, with no reduce: the tensorops.v1 default, assign.
    cells = ints((5, 1), 0, 6)
    cell_src = rand((5,), "INT32")
    yield scatter_nd_case("shape-int64-INT32", {"index": cells, "src": cell_src}, {"shape": 6},
                          lambda c: c.scatter_nd(None, cells, cell_src, shape=[6],
                                                 reduce="assign"),
                          lambda: ref.scatter_nd(np.zeros((6,), np.int32), cells, cell_src))

    # The axes form with one axis is scatter along it.
    x3 = rand((3, 4), "FP32")
    index3 = ints((3, 2), 0, 4)
    src3 = rand((3, 2), "FP32")
    yield scatter_nd_case("axes-FP32", {"input": x3, "index": index3[..., None], "src": src3},
                          {"axes": "[1]", "reduce": "sum"},
                          lambda c: c.scatter_nd(x3, index3[..., None], src3, axes=[1],
                                                 reduce="sum"),
                          lambda: ref.scatter(x3, 1, index3, src3, "sum"))


def masked_scatter_case(datatype, shape, mask_shape):
    """masked_scatter; a mask of another shape is broadcast against the input."""
    x = rand(shape, datatype)
    mask = rand(mask_shape, "BOOL")
    src = rand((20,), datatype)
    return Case(f"masked_scatter-{datatype}-{shape}-{mask_shape}", "masked_scatter",
                {"input": x, "mask": mask, "src": src}, {},
                lambda c: c.masked_scatter(x, mask, src),
                lambda: ref.masked_scatter(x, mask, src))


def forward_cases():
    cases = [gather_case(d, i) for d, i in [
        ("FP32", "INT64"), ("FP64", "INT32"), ("INT32", "INT64"), ("INT64", "INT32"),
        ("FP16", "INT64"), ("BF16", "INT64"), ("BOOL", "INT32"), ("INT8", "INT64"),
        ("UINT8", "INT64"), ("INT16", "INT32")]]
    cases.append(gather_broadcast_case())
    cases += [scatter_case(d, "sum", s) for d, s in [
        ("FP32", True), ("FP64", False), ("INT32", None), ("INT64", False), ("FP16", True)]]
    cases += [scatter_case("FP32", "sum", deterministic=True),
              scatter_case("FP64", "mean"), scatter_case("INT64", "amax", False),
              scatter_case("FP32", "prod", False), scatter_case("INT32", "amin", True, axis=1),
              scatter_case("BOOL", axis=1), scatter_case("BF16", "assign", axis=1),
              scatter_value_case("INT32", 7), scatter_value_case("FP32", 2.5, "sum"),
              scatter_value_case("BOOL", True), scatter_broadcast_case()]
    cases += [index_select_case(d, i) for d, i in [
        ("FP32", "INT64"), ("INT64", "INT32"), ("BOOL", "INT64"), ("FP16", "INT32"),
        ("BF16", "INT64")]]
    cases += [index_reduce_case("FP64", "amax", False), index_reduce_case("FP32", "sum", alpha=2.5),
              index_reduce_case("INT32", "sum", alpha=3), index_reduce_case("FP32", "mean", True),
              index_reduce_case("FP64", "prod", False), index_reduce_case("INT64", None)]
    cases += [select_scatter_case(d) for d in ["FP32", "INT16", "BOOL", "FP64"]]
    cases += [slice_scatter_case("INT32", 0, start=1, step=2),
              slice_scatter_case("FP32", 0, start=-4, end=-1),
              slice_scatter_case("UINT8", 0, end=5, step=3),
              slice_scatter_case("FP64", 1, start=2)]
    cases += [diagonal_scatter_case("FP64", (3, 2, 4), 1, 0, 2),
              diagonal_scatter_case("FP32", (4, 5), -2),
              diagonal_scatter_case("INT64", (4, 5), 1)]
    cases += list(gather_nd_cases())
    cases += list(scatter_nd_cases())
    cases += [masked_scatter_case("INT16", (3, 4), (1, 4)),
              masked_scatter_case("FP32", (3, 4), (3, 4)),
              masked_scatter_case("BOOL", (2, 3), (2, 3)),
              masked_scatter_case("BF16", (3, 4), (3, 1)),
              masked_scatter_case("FP64", (4,), (3, 4))]
    return cases


CASES = forward_cases()
assert {case.model for case in CASES} == set(MODEL_INPUTS), "every op has a case"
assert len({case.id for case in CASES}) == len(CASES), "case ids are unique"

_V1_RESULTS = {}


def v1_result(v1, case):
    """The case's tensorops.v1 result, computed once per session (it is deterministic)."""
    if case.id not in _V1_RESULTS:
        _V1_RESULTS[case.id] = as_array(case.v1(v1))
    return _V1_RESULTS[case.id]


def check_result(v1, case, result):
    """A v2 InferResult of `case` is tensorops.v1's result, and close to the reference."""
    response = result.get_response()
    assert response.model_name == case.model
    assert response.id == case.id, "the response carries its request's id"
    assert [output.name for output in response.outputs] == ["output"]
    got = result.as_numpy("output")
    assert_same(got, v1_result(v1, case), case.id)
    if case.reference is not None:
        assert_close(got, case.reference(), f"{case.id} (reference)")


# ---------------------------------------------------------------------------------------------
# Every op through infer, async_infer and a stream


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_infer_matches_tensorops_v1(triton, v1, case):
    result = triton.infer(case.model, v2_inputs(case.inputs), parameters=case.parameters,
                          request_id=case.id)
    check_result(v1, case, result)


def test_async_infer_matches_tensorops_v1(triton, v1):
    """Every case in flight at once through async_infer; each callback gets its own result."""
    done = queue.Queue()
    for case in CASES:
        triton.async_infer(case.model, v2_inputs(case.inputs),
                           callback=lambda result, error, case=case: done.put((case, result,
                                                                                error)),
                           parameters=case.parameters, request_id=case.id, client_timeout=60)
    seen = set()
    for _ in CASES:
        case, result, error = done.get(timeout=90)
        assert error is None, f"{case.id}: {error}"
        check_result(v1, case, result)
        seen.add(case.id)
    assert seen == {case.id for case in CASES}


def test_stream_matches_tensorops_v1(server, v1):
    """Every case over one ModelStreamInfer stream, with a failing request in the middle: one
    response per request, each carrying its id and marked triton_final_response (the client
    opts in to empty final responses, which a request's one response makes unneeded); the
    failure comes back as an error response with tensorops.v1's message, and the stream goes
    on."""
    bad_x = rand((3, 4), "FP32")
    bad_index = np.full((3, 2), 7)
    v1_message = v1_error(lambda: v1.gather(bad_x, 1, bad_index)).message
    responses = queue.Queue()
    client = grpcclient.InferenceServerClient(server.address)
    try:
        # stream_timeout bounds the stream, so that a server that never ends it fails the test.
        client.start_stream(callback=lambda result, error: responses.put((result, error)),
                            stream_timeout=120)
        for position, case in enumerate(CASES):
            client.async_stream_infer(case.model, v2_inputs(case.inputs), request_id=case.id,
                                      parameters=case.parameters,
                                      enable_empty_final_response=True)
            if position == len(CASES) // 2:
                client.async_stream_infer("gather",
                                          v2_inputs({"input": bad_x, "index": bad_index}),
                                          request_id="bad", parameters={"axis": 1})
        client.stop_stream()  # half-closes the stream and waits for every response
    finally:
        client.close()
    results, errors = {}, []
    while not responses.empty():
        result, error = responses.get_nowait()
        if error is not None:
            errors.append(error)
            continue
        request_id = result.get_response().id
        assert request_id not in results, f"two responses for {request_id}"
        assert result.get_response().parameters["triton_final_response"].bool_param, request_id
        results[request_id] = result
    assert len(errors) == 1, [str(e) for e in errors]
    check_error(errors[0], None, v1_message)
    assert set(results) == {case.id for case in CASES}
    for case in CASES:
        check_result(v1, case, results[case.id])


# ---------------------------------------------------------------------------------------------
# Backward models


def backward_cases():
    """(id, model, inputs with grad_output, parameters, the tensorops.v1 Backward call)."""
    def case(case_id, model, inputs, parameters, v1_call):
        return pytest.param(model, inputs, parameters, v1_call, id=case_id)

    for datatype in ["FP32", "FP64"]:
        x = rand((3, 4), datatype)
        index = ints((3, 3), 0, 4)  # duplicates: their gradients add up
        g = rand((3, 3), datatype)
        yield case(f"gather-{datatype}", "gather_backward",
                   {"input": x, "index": index, "grad_output": g}, {"axis": 1},
                   lambda c, x=x, index=index, g=g: c.backward("gather", g, x, 1, index))

    x = rand((4, 3), "FP32")
    index = ints((5, 3), 0, 4)
    src = rand((5, 3), "FP32")
    g = rand((4, 3), "FP32")
    yield case("scatter-sum", "scatter_backward",
               {"input": x, "index": index, "src": src, "grad_output": g},
               {"axis": 0, "reduce": "sum", "include_self": False},
               lambda c: c.backward("scatter_reduce", g, x, 0, index, src, "sum",
                                    include_self=False))

    x1 = rand((3, 5), "FP64")
    index1 = ints((2, 5), 0, 3)
    g1 = rand((3, 5), "FP64")
    yield case("scatter-value", "scatter_backward",  # a scalar value gets no gradient
               {"input": x1, "index": index1, "grad_output": g1},
               {"axis": 0, "value": 2.0, "reduce": "sum"},
               lambda c: c.backward("scatter", g1, x1, 0, index1, value=2.0, reduce="sum"))

    x2 = rand((4, 5, 2), "FP16")
    index2 = ints((6,), 0, 5)
    g2 = rand((4, 6, 2), "FP16")
    yield case("index_select-FP16", "index_select_backward",
               {"input": x2, "index": index2, "grad_output": g2}, {"axis": 1},
               lambda c: c.backward("index_select", g2, x2, 1, index2))

    x3 = rand((5, 3), "FP32")
    index3 = ints((6,), 0, 5)
    src3 = rand((6, 3), "FP32")
    g3 = rand((5, 3), "FP32")
    yield case("index_reduce-amax", "index_reduce_backward",
               {"input": x3, "index": index3, "src": src3, "grad_output": g3},
               {"axis": 0, "reduce": "amax", "include_self": False},
               lambda c: c.backward("index_reduce", g3, x3, 0, index3, src3, "amax",
                                    include_self=False))

    x4 = rand((4, 5), "FP32")
    src4 = rand((4,), "FP32")
    g4 = rand((4, 5), "FP32")
    yield case("diagonal_scatter", "diagonal_scatter_backward",
               {"input": x4, "src": src4, "grad_output": g4}, {"offset": 1},
               lambda c: c.backward("diagonal_scatter", g4, x4, src4, 1))

    rows = ints((5, 1), 0, 4)
    row_src = rand((5, 3), "FP32")
    g5 = rand((4, 3), "FP32")
    yield case("scatter_nd-shape", "scatter_nd_backward",  # no input: only src's gradient
               {"index": rows, "src": row_src, "grad_output": g5},
               {"shape": "4,3", "reduce": "sum"},
               lambda c: c.backward("scatter_nd", g5, None, rows, row_src, shape=[4, 3],
                                    reduce="sum"))

    x6 = rand((3, 4), "FP64")
    mask = rand((1, 4), "BOOL")
    src6 = rand((20,), "FP64")
    g6 = rand((3, 4), "FP64")
    yield case("masked_scatter", "masked_scatter_backward",
               {"input": x6, "mask": mask, "src": src6, "grad_output": g6}, {},
               lambda c: c.backward("masked_scatter", g6, x6, mask, src6))


@pytest.mark.parametrize("model,inputs,parameters,v1_call", list(backward_cases()))
def test_backward_matches_tensorops_v1(triton, v1, model, inputs, parameters, v1_call):
    """A backward model returns grad_<arg> for each gradient tensorops.v1's Backward returns."""
    want = {f"grad_{name}": gradient for name, gradient in v1_call(v1).items()}
    result = triton.infer(model, v2_inputs(inputs), parameters=parameters)
    names = [output.name for output in result.get_response().outputs]
    assert sorted(names) == sorted(want)
    for name, gradient in want.items():
        assert_same(result.as_numpy(name), gradient, f"{model} {name}")


def test_gather_backward_is_a_scatter_add(triton):
    """gather_backward against its definition (semantics.md, Backward): grad_output added into
    zeros at the gathered positions, duplicates summing."""
    x = rand((3, 4), "FP64")
    index = ints((3, 5), 0, 4)
    g = rand((3, 5), "FP64")
    expected = np.zeros_like(x)
    for row, column in np.ndindex(*index.shape):
        expected[row, index[row, column]] += g[row, column]
    result = triton.infer("gather_backward",
                          v2_inputs({"input": x, "index": index, "grad_output": g}),
                          parameters={"axis": 1})
    np.testing.assert_allclose(result.as_numpy("grad_input"), expected, rtol=1e-12)


def test_backward_outputs_pick_the_gradients(triton, v1):
    """`outputs` in the request picks which gradients come back."""
    x = rand((4, 3), "FP32")
    index = ints((5, 3), 0, 4)
    src = rand((5, 3), "FP32")
    g = rand((4, 3), "FP32")
    want = v1.backward("scatter_reduce", g, x, 0, index, src, "mean")
    result = triton.infer("scatter_backward",
                          v2_inputs({"input": x, "index": index, "src": src, "grad_output": g}),
                          outputs=[grpcclient.InferRequestedOutput("grad_src")],
                          parameters={"axis": 0, "reduce": "mean"})
    assert [output.name for output in result.get_response().outputs] == ["grad_src"]
    assert_same(result.as_numpy("grad_src"), want["src"], "scatter_backward grad_src")


# ---------------------------------------------------------------------------------------------
# Health, metadata, config


def test_server_live_and_ready(triton):
    assert triton.is_server_live() is True
    assert triton.is_server_ready() is True


def test_server_metadata(triton, v1):
    metadata = triton.get_server_metadata()
    assert metadata.name == "tensorops"
    assert metadata.version == v1.server_info().version
    # Not cuda_shared_memory: the test server runs on the CPU, which cannot open a CUDA region.
    assert set(metadata.extensions) == {"model_configuration", "parameters", "statistics",
                                        "system_shared_memory"}


@pytest.mark.parametrize("model", ALL_MODELS)
def test_model_ready(triton, model):
    assert triton.is_model_ready(model) is True
    assert triton.is_model_ready(model, "1") is True


def test_model_ready_unknown_model_or_version(triton):
    """tritonclient raises for the NOT_FOUND the server answers (it returns no False)."""
    with raises("NOT_FOUND", "gahter"):
        triton.is_model_ready("gahter")
    with raises("NOT_FOUND"):
        triton.is_model_ready("gather", "2")


@pytest.mark.parametrize("model", ALL_MODELS)
def test_model_metadata(triton, model):
    inputs, outputs = model_io(model)
    for version in ["", "1"]:
        metadata = triton.get_model_metadata(model, version)
        assert metadata.name == model
        assert list(metadata.versions) == ["1"]
        assert metadata.platform == "tensorops"
        assert sorted(t.name for t in metadata.inputs) == sorted(inputs)
        assert sorted(t.name for t in metadata.outputs) == sorted(outputs)
        for tensor in [*metadata.inputs, *metadata.outputs]:
            assert tensor.datatype == usual_datatype(tensor.name), tensor.name
            assert list(tensor.shape) == [-1], tensor.name


@pytest.mark.parametrize("model", ALL_MODELS)
def test_model_config(triton, model):
    inputs, outputs = model_io(model)
    config = triton.get_model_config(model).config
    assert config.name == model
    assert config.platform == "tensorops"
    assert config.backend == "tensorops"
    assert config.max_batch_size == 0
    assert sorted(t.name for t in config.input) == sorted(inputs)
    assert sorted(t.name for t in config.output) == sorted(outputs)
    for tensor in [*config.input, *config.output]:
        assert model_config_pb2.DataType.Name(tensor.data_type) == \
            "TYPE_" + usual_datatype(tensor.name), tensor.name
        assert list(tensor.dims) == [-1], tensor.name
    attributes = OP_ATTRIBUTES[model.removesuffix("_backward")]
    missing = attributes - set(config.parameters)
    assert not missing, f"attributes config.parameters does not describe: {missing}"
    for name in attributes:
        assert config.parameters[name].string_value, f"{name} has no description"


def test_metadata_and_config_of_unknown_model(triton):
    with raises("NOT_FOUND", "gahter"):
        triton.get_model_metadata("gahter")
    with raises("NOT_FOUND", "gahter"):
        triton.get_model_config("gahter")
    with raises("NOT_FOUND"):
        triton.get_model_metadata("gather", "2")


def test_repository_index_lists_every_model_ready(triton):
    index = triton.get_model_repository_index()
    assert sorted(model.name for model in index.models) == sorted(ALL_MODELS)
    for model in index.models:
        assert (model.version, model.state) == ("1", "READY"), model.name


def test_other_triton_methods_are_unimplemented_saying_what_to_use(triton):
    """Loading models, trace and logging are not served; each says so (shared memory is:
    shared_memory_test.py)."""
    for call in [triton.get_trace_settings, triton.get_log_settings,
                 lambda: triton.load_model("gather")]:
        with raises("UNIMPLEMENTED", "is not implemented: "):
            call()


# ---------------------------------------------------------------------------------------------
# Statistics


def gather_statistics(triton):
    statistics = triton.get_inference_statistics("gather")
    (entry,) = [s for s in statistics.model_stats if s.name == "gather"]
    return entry


def test_statistics_count_calls_of_both_protocols(triton, v1):
    """ModelStatistics reads /metrics' counters: v2 and tensorops.v1 calls of an op are counted
    together, the failures apart (in `fail` only, as Triton counts them)."""
    x = rand((3, 4), "FP32")
    index = ints((3, 2), 0, 4)
    before = gather_statistics(triton)
    for _ in range(2):
        triton.infer("gather", v2_inputs({"input": x, "index": index}), parameters={"axis": 1})
    v1.gather(x, 1, index)
    with raises("INVALID_ARGUMENT"):
        triton.infer("gather", v2_inputs({"input": x, "index": np.full((3, 2), 9)}),
                     parameters={"axis": 1})
    after = gather_statistics(triton)

    old, new = before.inference_stats, after.inference_stats
    assert new.success.count - old.success.count == 3
    assert new.fail.count - old.fail.count == 1
    assert new.success.ns > old.success.ns
    assert new.fail.ns >= old.fail.ns
    # The stages count the successes only, as Triton's do (the failure reached the kernel).
    for stage in ["queue", "compute_input", "compute_infer", "compute_output"]:
        assert getattr(new, stage).count - getattr(old, stage).count == 3, stage
        assert getattr(new, stage).ns >= getattr(old, stage).ns, stage
    assert new.compute_infer.ns > old.compute_infer.ns
    assert after.version in ("", "1")
    # Milliseconds since the Unix epoch: the last of the calls above, a moment ago.
    assert after.last_inference >= before.last_inference
    assert abs(after.last_inference / 1000 - time.time()) < 60


def test_statistics_of_every_model(triton):
    """An empty name asks for every model; each op is there (called or not)."""
    names = {s.name for s in triton.get_inference_statistics().model_stats}
    assert set(MODEL_INPUTS) <= names, f"missing: {set(MODEL_INPUTS) - names}"


# ---------------------------------------------------------------------------------------------
# Errors: InferenceServerException carrying tensorops' message


def error_cases():
    """Bad calls whose v2 error must be tensorops.v1's: (id, model, inputs, parameters, v1)."""
    x = rand((3, 4), "FP32")
    index = ints((2, 4), 0, 3)
    yield pytest.param("gather", {"input": x, "index": np.full((3, 2), 7)}, {"axis": 1},
                       lambda c: c.gather(x, 1, np.full((3, 2), 7)), id="index-out-of-range")
    src = rand((2, 4), "INT32")
    yield pytest.param("scatter", {"input": x, "index": index, "src": src}, {"axis": 0},
                       lambda c: c.scatter(x, 0, index, src), id="src-dtype")
    row = rand((4,), "FP32")
    yield pytest.param("select_scatter", {"input": x, "src": row}, {"axis": 0, "index": 9},
                       lambda c: c.select_scatter(x, row, 0, 9), id="select-index")
    mask = np.ones((3, 4), bool)
    few = rand((3,), "FP32")
    yield pytest.param("masked_scatter", {"input": x, "mask": mask, "src": few}, {},
                       lambda c: c.masked_scatter(x, mask, few), id="too-few-src")
    wrong_g = rand((5, 5), "FP32")  # the forward result is (2, 2)
    small_index = index[:, :2]
    yield pytest.param("gather_backward",
                       {"input": x, "index": small_index, "grad_output": wrong_g}, {"axis": 0},
                       lambda c: c.backward("gather", wrong_g, x, 0, small_index),
                       id="grad_output-shape")
    xi = rand((3, 4), "INT64")
    gi = rand((2, 2), "INT64")
    yield pytest.param("gather_backward", {"input": xi, "index": small_index, "grad_output": gi},
                       {"axis": 0}, lambda c: c.backward("gather", gi, xi, 0, small_index),
                       id="not-differentiable")


@pytest.mark.parametrize("model,inputs,parameters,v1_call", list(error_cases()))
def test_errors_are_tensorops_v1s(triton, v1, model, inputs, parameters, v1_call):
    """The same bad call through both protocols: the same status, and v2's message carries
    tensorops.v1's (the argument, the value and the rule)."""
    expected = v1_error(lambda: v1_call(v1))
    with raises(expected.code.name, expected.message):
        triton.infer(model, v2_inputs(inputs), parameters=parameters)
    # On a stream, the same failure is a response whose error_message holds the message.
    errors = queue.Queue()
    triton.start_stream(callback=lambda result, error: errors.put((result, error)),
                        stream_timeout=60)
    try:
        triton.async_stream_infer(model, v2_inputs(inputs), parameters=parameters)
    finally:
        triton.stop_stream()
    result, error = errors.get_nowait()
    assert result is None
    check_error(error, None, expected.message)


def gather_inputs():
    return v2_inputs({"input": rand((3, 4), "FP32"), "index": ints((3, 2), 0, 4)})


def test_unknown_parameter_names_it_and_the_parameters_taken(triton):
    with raises("INVALID_ARGUMENT", "axiz", "axis"):
        triton.infer("gather", gather_inputs(), parameters={"axiz": 1})


def test_parameter_of_the_wrong_kind(triton):
    with raises("INVALID_ARGUMENT", "axis"):
        triton.infer("gather", gather_inputs(), parameters={"axis": "one"})
    x = rand((3, 4), "FP32")
    index = ints((2, 4), 0, 3)
    src = rand((2, 4), "FP32")
    with raises("INVALID_ARGUMENT", "reduce"):
        triton.infer("scatter", v2_inputs({"input": x, "index": index, "src": src}),
                     parameters={"axis": 0, "reduce": 1})
    with raises("INVALID_ARGUMENT", "reduce", "median"):
        triton.infer("scatter", v2_inputs({"input": x, "index": index, "src": src}),
                     parameters={"axis": 0, "reduce": "median"})


def test_unknown_model_and_version(triton):
    with raises("NOT_FOUND", "gahter"):
        triton.infer("gahter", gather_inputs(), parameters={"axis": 1})
    with raises("NOT_FOUND"):
        triton.infer("gather", gather_inputs(), model_version="2", parameters={"axis": 1})


def test_version_one_is_the_model(triton, v1):
    x = rand((3, 4), "FP32")
    index = ints((3, 2), 0, 4)
    result = triton.infer("gather", v2_inputs({"input": x, "index": index}), model_version="1",
                          parameters={"axis": 1})
    assert_same(result.as_numpy("output"), v1.gather(x, 1, index), "gather version 1")


def test_complex_datatype_points_to_tensorops_v1(triton):
    """COMPLEX64 has no v2 name. tritonclient cannot name it (its set_data_from_numpy checks the
    datatype), so the input is made as FP64 (the same 8 bytes an element) and renamed, as a
    client written against the protocol could send it."""
    x = (rand((3, 4), "FP32") + 1j * rand((3, 4), "FP32")).astype(np.complex64)
    complex_input = grpcclient.InferInput("input", [3, 4], "FP64")
    complex_input.set_data_from_numpy(x.view(np.float64))
    complex_input._get_tensor().datatype = "COMPLEX64"
    index = v2_inputs({"index": ints((3, 2), 0, 4)})
    with raises("INVALID_ARGUMENT", "COMPLEX64", "tensorops.v1"):
        triton.infer("gather", [complex_input, *index], parameters={"axis": 1})


def test_unserved_datatype_lists_those_served(triton):
    x = RNG.integers(0, 9, (3, 4)).astype(np.uint16)
    with raises("INVALID_ARGUMENT", "UINT16", "FP32"):
        triton.infer("gather", v2_inputs({"input": x, "index": ints((3, 2), 0, 4)}),
                     parameters={"axis": 1})


def test_unknown_input_name(triton):
    with raises("INVALID_ARGUMENT", "indx"):
        triton.infer("gather", v2_inputs({"input": rand((3, 4), "FP32"),
                                          "indx": ints((3, 2), 0, 4)}), parameters={"axis": 1})


def test_requested_outputs(triton, v1):
    x = rand((3, 4), "FP32")
    index = ints((3, 2), 0, 4)
    inputs = v2_inputs({"input": x, "index": index})
    result = triton.infer("gather", inputs, parameters={"axis": 1},
                          outputs=[grpcclient.InferRequestedOutput("output")])
    assert_same(result.as_numpy("output"), v1.gather(x, 1, index), "gather, output requested")
    with raises("INVALID_ARGUMENT", "nope"):
        triton.infer("gather", inputs, parameters={"axis": 1},
                     outputs=[grpcclient.InferRequestedOutput("nope")])


def test_reserved_parameters(triton, v1):
    """Triton's priority and timeout are accepted and ignored; the sequence parameters are
    refused (the models are stateless)."""
    x = rand((3, 4), "FP32")
    index = ints((3, 2), 0, 4)
    inputs = v2_inputs({"input": x, "index": index})
    result = triton.infer("gather", inputs, parameters={"axis": 1}, priority=1, timeout=10**6)
    assert_same(result.as_numpy("output"), v1.gather(x, 1, index), "gather with priority")
    # tritonclient sends sequence_id, sequence_start and sequence_end together; the server
    # checks them in that order, so the message names sequence_id.
    with raises("INVALID_ARGUMENT") as info:
        triton.infer("gather", inputs, parameters={"axis": 1}, sequence_id=7,
                     sequence_start=True)
    assert 'parameter "sequence_id" asks for a sequence' in info.value.message(), \
        info.value.message()


def test_bearer_token_through_headers(tmp_path):
    """With --auth_token_file, a v2 call needs the token as tensorops.v1 calls do: tritonclient
    sends it as the `authorization` header (gRPC metadata)."""
    from conftest import ServerProcess

    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token")
    os.chmod(token_file, 0o600)
    server = ServerProcess(f"--auth_token_file={token_file}")
    try:
        x = rand((3, 4), "FP32")
        index = ints((3, 2), 0, 4)
        with grpcclient.InferenceServerClient(server.address) as client:
            with raises("UNAUTHENTICATED", "missing authorization"):
                client.infer("gather", v2_inputs({"input": x, "index": index}),
                             parameters={"axis": 1})
            with raises("UNAUTHENTICATED", "wrong bearer token"):
                client.infer("gather", v2_inputs({"input": x, "index": index}),
                             parameters={"axis": 1},
                             headers={"authorization": "Bearer wrong"})
            result = client.infer("gather", v2_inputs({"input": x, "index": index}),
                                  parameters={"axis": 1},
                                  headers={"authorization": "Bearer s3cret-token"})
            np.testing.assert_array_equal(result.as_numpy("output"), ref.gather(x, 1, index))
    finally:
        server.stop()
    assert server.process.returncode == 0, "".join(server.log)


# ---------------------------------------------------------------------------------------------
# The tensor store through parameters


def test_stored_input_and_stored_result(triton, v1):
    """An input named by its `stored` parameter, and a result kept with store_as. tritonclient
    has no setter for an input's parameters: they are set on the request tensor it sends."""
    x = rand((3, 4), "FP32")
    index = ints((3, 2), 0, 4)
    want = v1.gather(x, 1, index)
    stored = v1.put("kserve-test-x", x, overwrite=True)
    try:
        def stored_input(**parameters):
            infer_input = grpcclient.InferInput("input", [3, 4], "FP32")
            for name, value in parameters.items():
                parameter = infer_input._get_tensor().parameters[name]
                if isinstance(value, str):
                    parameter.string_param = value
                else:
                    parameter.int64_param = value
            return [infer_input, *v2_inputs({"index": index})]

        result = triton.infer("gather", stored_input(stored="kserve-test-x"),
                              parameters={"axis": 1})
        assert_same(result.as_numpy("output"), want, "gather of a stored input")
        result = triton.infer("gather", stored_input(stored="kserve-test-x",
                                                     stored_version=stored.version),
                              parameters={"axis": 1})
        assert_same(result.as_numpy("output"), want, "gather of a stored input at its version")

        # A version it is not at, and a name that is not stored: tensorops.v1's errors.
        stale = v1_error(lambda: v1.gather(tensorops.Ref("kserve-test-x", stored.version + 1),
                                           1, index))
        with raises(stale.code.name, stale.message):
            triton.infer("gather", stored_input(stored="kserve-test-x",
                                                stored_version=stored.version + 1),
                         parameters={"axis": 1})
        with raises("NOT_FOUND", "kserve-test-missing"):
            triton.infer("gather", stored_input(stored="kserve-test-missing"),
                         parameters={"axis": 1})

        # The request parameter stored_inputs names them through tritonclient's public API.
        result = triton.infer("gather", v2_inputs({"index": index}),
                              parameters={"axis": 1, "stored_inputs": "input=kserve-test-x"})
        assert_same(result.as_numpy("output"), want, "gather of an input named in stored_inputs")
        result = triton.infer("gather", v2_inputs({"index": index}),
                              parameters={"axis": 1,
                                          "stored_inputs": f"input=kserve-test-x@{stored.version}"})
        assert_same(result.as_numpy("output"), want, "stored_inputs with a version")
        with raises("INVALID_ARGUMENT", 'input "input" is given twice'):
            triton.infer("gather", v2_inputs({"input": x, "index": index}),
                         parameters={"axis": 1, "stored_inputs": "input=kserve-test-x"})
        with raises("INVALID_ARGUMENT", "INPUT=NAME@VERSION"):
            triton.infer("gather", v2_inputs({"index": index}),
                         parameters={"axis": 1, "stored_inputs": "input:kserve-test-x"})

        # store_as: the output names the stored result and comes back without data, as an empty
        # array that as_numpy reads, the stored shape in a parameter ...
        result = triton.infer("gather", v2_inputs({"input": x, "index": index}),
                              parameters={"axis": 1, "store_as": "kserve-test-out",
                                          "overwrite": True})
        output = result.get_output("output")
        assert output.parameters["stored"].string_param == "kserve-test-out"
        info = v1.info("kserve-test-out")
        assert output.parameters["stored_version"].int64_param == info.version
        assert output.parameters["stored_shape"].string_param == "3,2"
        assert result.get_response().raw_output_contents[0] == b""
        assert result.as_numpy("output").shape == (0,)
        assert_same(v1.get("kserve-test-out"), want, "the result stored through v2")
        # ... unless return_data is set.
        result = triton.infer("gather", v2_inputs({"input": x, "index": index}),
                              parameters={"axis": 1, "store_as": "kserve-test-out",
                                          "overwrite": True, "return_data": True})
        assert result.get_output("output").parameters["stored_version"].int64_param == \
            info.version + 1
        assert_same(result.as_numpy("output"), want, "a stored result with return_data")
    finally:
        for name in ["kserve-test-x", "kserve-test-out"]:
            with contextlib.suppress(tensorops.NotFound):
                v1.delete(name)


# ---------------------------------------------------------------------------------------------
# docs/kserve.md's example, as printed there


def run_example(server, path, code):
    """Runs `code`, an example from `path`, unchanged but for the address: it prints what the
    comment of its print line says."""
    assert "127.0.0.1:50051" in code
    printed = re.search(r"print\(.*\.as_numpy\(\"output\"\)\)\s*#\s*(.*)", code)
    assert printed, "the example prints its result with the expected value in a comment"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(code.replace("127.0.0.1:50051", server.address), path, "exec"), {})
    assert stdout.getvalue().split() == printed.group(1).split()


def test_docs_example(server):
    """The example at the top of docs/kserve.md runs as printed there."""
    with open(DOCS, encoding="utf-8") as f:
        run_example(server, DOCS, re.search(r"```python\n(.*?)```", f.read(), re.S).group(1))


# README.md block: import numpy as np
def test_readme_example(server):
    """README.md's KServe example (its Python block that imports tritonclient) runs as printed
    there (tests/readme_test.py checks that every README block has its test)."""
    with open(README, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    examples = [code for code in blocks if "import tritonclient.grpc" in code]
    assert len(examples) == 1, blocks
    run_example(server, README, examples[0])
