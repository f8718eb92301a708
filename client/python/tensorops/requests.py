"""Builders of tensorops.v1.OpRequest, one per operation, with the arguments of the Client's methods.

run_stream and backward take these: e.g.
    client.run_stream([(1, requests.gather(x, 1, index)), (2, requests.index_select(x, 0, i))])
Each builder checks nothing the server checks; it only converts arrays and names.

Tensor arguments are numpy arrays, torch tensors (detached and copied to the CPU), array-likes
(lists, tuples, Python numbers), tensorops.Ref (a stored tensor) or tensors in a registered
shared-memory region (an ndarray over a tensorops.SharedMemoryRegion, or tensorops.InSharedMemory),
which are sent as references to their bytes. An argument that must have
the input's dtype (src, source) keeps its dtype when it has one (arrays, tensors; the server
rejects a mismatch) and takes the input's when it is a list, tuple or Python number, as
torch.tensor(src, dtype=input.dtype) would.
"""
import uuid

from tensorops._tensor import (is_scalar, shared_memory_target, to_int64, to_int64_list,
                               to_reduction, to_scalar, to_tensor, to_tensor_like)
from tensorops.v1 import generic_pb2, ops_pb2, tensor_pb2

# Every builder below, by name, and the unary RPC that runs it alone.
OPS = {
    "gather": "Gather", "take_along_axis": "Gather", "scatter": "Scatter",
    "scatter_add": "Scatter", "scatter_reduce": "Scatter", "put_along_axis": "Scatter",
    "index_select": "IndexSelect", "index_add": "IndexReduce", "index_copy": "IndexReduce",
    "index_reduce": "IndexReduce", "select_scatter": "SelectScatter",
    "slice_scatter": "SliceScatter", "diagonal_scatter": "DiagonalScatter",
    "gather_nd": "GatherNd", "scatter_nd": "ScatterNd", "masked_scatter": "MaskedScatter",
}
# The unary RPC of each OpRequest field.
OPS_BY_FIELD = {
    "gather": "Gather", "scatter": "Scatter", "index_select": "IndexSelect",
    "index_reduce": "IndexReduce", "select_scatter": "SelectScatter",
    "slice_scatter": "SliceScatter", "diagonal_scatter": "DiagonalScatter",
    "gather_nd": "GatherNd", "scatter_nd": "ScatterNd", "masked_scatter": "MaskedScatter",
}


def gather(input, axis, index, *, broadcast=False):
    """torch.gather(input, axis, index); broadcast=True is paddle.take_along_axis's broadcast."""
    return generic_pb2.OpRequest(gather=ops_pb2.GatherRequest(
        input=to_tensor(input, "input"), index=to_tensor(index, "index"),
        axis=to_int64(axis, "gather: axis"), broadcast=broadcast))


def take_along_axis(arr, indices, axis, *, broadcast=True):
    """paddle.take_along_axis(arr, indices, axis, broadcast=True)."""
    return gather(arr, axis, indices, broadcast=broadcast)


def scatter(input, axis, index, src=None, *, value=None, reduce=None, include_self=None,
            broadcast=False, deterministic=False):
    """torch.scatter(input, axis, index, src or value, reduce=...): src is an array or a scalar.

    reduce: None/'assign', 'sum'/'add', 'prod'/'mul'/'multiply', 'mean', 'amax'/'max',
    'amin'/'min'. include_self: None (the server's default, true) or a bool.
    """
    if (src is None) == (value is None):
        raise ValueError("scatter: give exactly one of src and value")
    input_tensor = to_tensor(input, "input")
    request = ops_pb2.ScatterRequest(input=input_tensor,
                                     index=to_tensor(index, "index"),
                                     axis=to_int64(axis, "scatter: axis"),
                                     reduce=to_reduction(reduce), broadcast=broadcast,
                                     deterministic=deterministic)
    if src is not None and not is_scalar(src):
        request.src.CopyFrom(to_tensor_like(src, input, input_tensor, "src"))
    else:
        request.value.CopyFrom(to_scalar(src if src is not None else value,
                                         "scatter: src" if src is not None else "scatter: value"))
    if include_self is not None:
        request.include_self = include_self
    return generic_pb2.OpRequest(scatter=request)


def scatter_add(input, axis, index, src):
    """torch.scatter_add(input, axis, index, src)."""
    return scatter(input, axis, index, src, reduce="sum")


def scatter_reduce(input, axis, index, src, reduce, *, include_self=True, deterministic=False):
    """torch.scatter_reduce(input, axis, index, src, reduce, include_self=True).

    reduce: 'sum', 'prod', 'mean', 'amax', 'amin' (and the aliases of scatter).
    """
    return scatter(input, axis, index, src, reduce=reduce, include_self=include_self,
                   deterministic=deterministic)


def put_along_axis(arr, indices, values, axis, reduce="assign", include_self=True,
                   broadcast=True):
    """paddle.put_along_axis(arr, indices, values, axis, reduce, include_self, broadcast).

    values: an array or a scalar. reduce: 'assign', 'add', 'mul'/'multiply', 'mean', 'amax',
    'amin'.
    """
    return scatter(arr, axis, indices, values, reduce=reduce, include_self=include_self,
                   broadcast=broadcast)


def index_select(input, axis, index):
    """torch.index_select(input, axis, index); paddle.gather(x, index, axis)."""
    return generic_pb2.OpRequest(index_select=ops_pb2.IndexSelectRequest(
        input=to_tensor(input, "input"), index=to_tensor(index, "index"),
        axis=to_int64(axis, "index_select: axis")))


def index_reduce(input, axis, index, source, reduce="sum", *, include_self=True, alpha=None):
    """torch.index_reduce(input, axis, index, source, reduce, include_self=True).

    reduce: 'prod', 'mean', 'amax', 'amin'; also 'sum' (with alpha), the default, as in the C++
    client and the CLI (index_add), and 'assign' (index_copy).
    """
    input_tensor = to_tensor(input, "input")
    request = ops_pb2.IndexReduceRequest(
        input=input_tensor, index=to_tensor(index, "index"),
        src=to_tensor_like(source, input, input_tensor, "source"),
        axis=to_int64(axis, "index_reduce: axis"), reduce=to_reduction(reduce))
    if include_self is not None:
        request.include_self = include_self
    if alpha is not None:
        request.alpha.CopyFrom(to_scalar(alpha, "index_reduce: alpha"))
    return generic_pb2.OpRequest(index_reduce=request)


def index_add(input, axis, index, source, *, alpha=1):
    """torch.index_add(input, axis, index, source, alpha=1); paddle.index_add."""
    return index_reduce(input, axis, index, source, "sum", include_self=None,
                        alpha=None if alpha == 1 else alpha)


def index_copy(input, axis, index, source):
    """torch.index_copy(input, axis, index, source)."""
    return index_reduce(input, axis, index, source, "assign", include_self=None)


def select_scatter(input, src, axis, index):
    """torch.select_scatter(input, src, axis, index)."""
    input_tensor = to_tensor(input, "input")
    return generic_pb2.OpRequest(select_scatter=ops_pb2.SelectScatterRequest(
        input=input_tensor, src=to_tensor_like(src, input, input_tensor, "src"),
        axis=to_int64(axis, "select_scatter: axis"),
        index=to_int64(index, "select_scatter: index")))


def slice_scatter(input, src, axis=0, start=None, end=None, step=1):
    """torch.slice_scatter(input, src, axis=0, start=None, end=None, step=1)."""
    input_tensor = to_tensor(input, "input")
    request = ops_pb2.SliceScatterRequest(input=input_tensor,
                                          src=to_tensor_like(src, input, input_tensor, "src"),
                                          axis=to_int64(axis, "slice_scatter: axis"))
    if start is not None:
        request.start = to_int64(start, "slice_scatter: start")
    if end is not None:
        request.end = to_int64(end, "slice_scatter: end")
    if step is not None:
        request.step = to_int64(step, "slice_scatter: step")
    return generic_pb2.OpRequest(slice_scatter=request)


def diagonal_scatter(input, src, offset=0, axis1=None, axis2=None, *, dim1=None, dim2=None):
    """torch.diagonal_scatter(input, src, offset=0, dim1=0, dim2=1) (axis1/axis2 = dim1/dim2)."""
    input_tensor = to_tensor(input, "input")
    request = ops_pb2.DiagonalScatterRequest(
        input=input_tensor, src=to_tensor_like(src, input, input_tensor, "src"),
        offset=to_int64(offset, "diagonal_scatter: offset"))
    axis1 = axis1 if axis1 is not None else dim1
    axis2 = axis2 if axis2 is not None else dim2
    if axis1 is not None:
        request.axis1 = to_int64(axis1, "diagonal_scatter: axis1")
    if axis2 is not None:
        request.axis2 = to_int64(axis2, "diagonal_scatter: axis2")
    return generic_pb2.OpRequest(diagonal_scatter=request)


def gather_nd(input, index, *, batch_dims=0, axes=None):
    """tf.gather_nd(input, index, batch_dims) / paddle.gather_nd; axes= the compiler form."""
    return generic_pb2.OpRequest(gather_nd=ops_pb2.GatherNdRequest(
        input=to_tensor(input, "input"), index=to_tensor(index, "index"),
        axes=to_int64_list(axes, "gather_nd: axes"),
        batch_dims=to_int64(batch_dims, "gather_nd: batch_dims")))


def scatter_nd(input, index, src, *, reduce=None, include_self=None, axes=None, batch_dims=0,
               shape=None, deterministic=False):
    """tf.tensor_scatter_nd_update/add/min/max (input given) or tf.scatter_nd /
    paddle.scatter_nd (input None, shape= the zeros to start from).

    reduce defaults to 'assign' with an input and to 'sum' with shape= (as tf.scatter_nd and
    paddle.scatter_nd, which add duplicates).
    """
    if reduce is None:
        reduce = "assign" if input is not None else "sum"
    request = ops_pb2.ScatterNdRequest(index=to_tensor(index, "index"),
                                       axes=to_int64_list(axes, "scatter_nd: axes"),
                                       batch_dims=to_int64(batch_dims, "scatter_nd: batch_dims"),
                                       reduce=to_reduction(reduce),
                                       shape=to_int64_list(shape, "scatter_nd: shape"),
                                       deterministic=deterministic)
    if input is not None:
        request.input.CopyFrom(to_tensor(input, "input"))
        request.src.CopyFrom(to_tensor_like(src, input, request.input, "src"))
    else:
        request.src.CopyFrom(to_tensor(src, "src"))
    if include_self is not None:
        request.include_self = include_self
    return generic_pb2.OpRequest(scatter_nd=request)


def masked_scatter(input, mask, src):
    """torch.masked_scatter(input, mask, src)."""
    input_tensor = to_tensor(input, "input")
    return generic_pb2.OpRequest(masked_scatter=ops_pb2.MaskedScatterRequest(
        input=input_tensor, mask=to_tensor(mask, "mask"),
        src=to_tensor_like(src, input, input_tensor, "src")))


def build(op, *args, **kwargs):
    """The OpRequest of `op` (a builder's name above, e.g. 'scatter_reduce') with its arguments;
    an OpRequest passes through unchanged."""
    if isinstance(op, generic_pb2.OpRequest):
        if args or kwargs:
            raise TypeError("build: no arguments go with an OpRequest")
        return op
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {', '.join(sorted(OPS))}")
    return globals()[op](*args, **kwargs)


def result_options(*, store_as=None, overwrite=False, expected_version=None, in_place=False,
                   return_data=False, update_id=None, out=None):
    """The tensor_pb2.ResultOptions of an op's keyword arguments, or None when they ask for
    nothing (the result comes back in the response).

    out: write the result into shared memory, at the place of `out` (an ndarray over a
    registered tensorops.SharedMemoryRegion, C-contiguous, or a tensorops.InSharedMemory) whose
    bytes must cover the result's; the response then carries its dtype and shape only. Not
    together with store_as, in_place or return_data.

    store_as: store the result under this name (overwrite=True replaces a value; with
    expected_version the name must be at that version). in_place=True: update the stored tensor
    that `input` references. return_data=True: return the stored result's values too.
    update_id: the id that makes a retried store_as/in_place call apply once. Leave it None to
    have the client pick a fresh one (uuid4 hex) for every op method call, run and run_stream
    request that sends these options (see with_update_id), so that running one OpRequest twice
    is two changes; an id given here is sent as it is, by every call that sends it, and the
    server applies a change with a given id once (later calls get the first one's answer).
    """
    if not (store_as or in_place or overwrite or expected_version is not None or return_data
            or update_id or out is not None):
        return None
    options = tensor_pb2.ResultOptions(store_as=store_as or "", overwrite=overwrite,
                                       in_place=in_place, return_data=return_data)
    if out is not None:
        options.shared_memory.CopyFrom(shared_memory_target(out, "out").proto())
    if expected_version is not None:
        options.expected_version = expected_version
    if update_id:
        options.update_id = update_id
    return options


def with_result_options(op, options):
    """`op` (an OpRequest) with its op's result_options set to `options` (tensor_pb2.ResultOptions
    or None: unchanged); the OpRequest is modified and returned."""
    if options is not None:
        getattr(op, op.WhichOneof("op")).result_options.CopyFrom(options)
    return op


def with_update_id(op, *, copy=True):
    """`op` (an OpRequest) as one change to send: when its op stores its result or updates in
    place (store_as, in_place) without an update id, a copy of it (copy=False: `op` itself,
    modified) with a fresh one (uuid4 hex); else `op` as it is.

    The clients call this for each request they send (op methods, run, every run_stream
    request), as the C++ and Go clients do, so that sending one OpRequest twice makes two
    changes, and gRPC's retries of one request, which resend it unchanged, make one.
    """
    field = op.WhichOneof("op")
    if field is None:
        return op
    options = getattr(op, field).result_options
    if options.update_id or not (options.store_as or options.in_place):
        return op
    if copy:
        copied = generic_pb2.OpRequest()
        copied.CopyFrom(op)
        op = copied
    getattr(op, field).result_options.update_id = uuid.uuid4().hex
    return op
