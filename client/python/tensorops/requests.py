"""Builders of tensorops.v1.OpRequest, one per operation, with the arguments of the Client's methods.

run_stream and backward take these: e.g.
    client.run_stream([(1, requests.gather(x, 1, index)), (2, requests.index_select(x, 0, i))])
Each builder checks nothing the server checks; it only converts arrays and names.
"""
from tensorops._tensor import is_scalar, to_reduction, to_scalar, to_tensor
from tensorops.v1 import generic_pb2, ops_pb2

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
        input=to_tensor(input, "input"), index=to_tensor(index, "index"), axis=axis,
        broadcast=broadcast))


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
    request = ops_pb2.ScatterRequest(input=to_tensor(input, "input"),
                                     index=to_tensor(index, "index"), axis=axis,
                                     reduce=to_reduction(reduce), broadcast=broadcast,
                                     deterministic=deterministic)
    if src is not None and not is_scalar(src):
        request.src.CopyFrom(to_tensor(src, "src"))
    else:
        request.value.CopyFrom(to_scalar(src if src is not None else value))
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
        input=to_tensor(input, "input"), index=to_tensor(index, "index"), axis=axis))


def index_reduce(input, axis, index, source, reduce, *, include_self=True, alpha=None):
    """torch.index_reduce(input, axis, index, source, reduce, include_self=True).

    reduce: 'prod', 'mean', 'amax', 'amin'; also 'sum' (with alpha) and 'assign' (index_copy).
    """
    request = ops_pb2.IndexReduceRequest(
        input=to_tensor(input, "input"), index=to_tensor(index, "index"),
        src=to_tensor(source, "source"), axis=axis, reduce=to_reduction(reduce))
    if include_self is not None:
        request.include_self = include_self
    if alpha is not None:
        request.alpha.CopyFrom(to_scalar(alpha))
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
    return generic_pb2.OpRequest(select_scatter=ops_pb2.SelectScatterRequest(
        input=to_tensor(input, "input"), src=to_tensor(src, "src"), axis=axis, index=index))


def slice_scatter(input, src, axis=0, start=None, end=None, step=1):
    """torch.slice_scatter(input, src, axis=0, start=None, end=None, step=1)."""
    request = ops_pb2.SliceScatterRequest(input=to_tensor(input, "input"),
                                          src=to_tensor(src, "src"), axis=axis)
    if start is not None:
        request.start = start
    if end is not None:
        request.end = end
    if step is not None:
        request.step = step
    return generic_pb2.OpRequest(slice_scatter=request)


def diagonal_scatter(input, src, offset=0, axis1=None, axis2=None, *, dim1=None, dim2=None):
    """torch.diagonal_scatter(input, src, offset=0, dim1=0, dim2=1) (axis1/axis2 = dim1/dim2)."""
    request = ops_pb2.DiagonalScatterRequest(input=to_tensor(input, "input"),
                                             src=to_tensor(src, "src"), offset=offset)
    axis1 = axis1 if axis1 is not None else dim1
    axis2 = axis2 if axis2 is not None else dim2
    if axis1 is not None:
        request.axis1 = axis1
    if axis2 is not None:
        request.axis2 = axis2
    return generic_pb2.OpRequest(diagonal_scatter=request)


def gather_nd(input, index, *, batch_dims=0, axes=None):
    """tf.gather_nd(input, index, batch_dims) / paddle.gather_nd; axes= the compiler form."""
    return generic_pb2.OpRequest(gather_nd=ops_pb2.GatherNdRequest(
        input=to_tensor(input, "input"), index=to_tensor(index, "index"), axes=axes or [],
        batch_dims=batch_dims))


def scatter_nd(input, index, src, *, reduce=None, include_self=None, axes=None, batch_dims=0,
               shape=None, deterministic=False):
    """tf.tensor_scatter_nd_update/add/min/max (input given) or tf.scatter_nd /
    paddle.scatter_nd (input None, shape= the zeros to start from).

    reduce defaults to 'assign' with an input and to 'sum' with shape= (as tf.scatter_nd and
    paddle.scatter_nd, which add duplicates).
    """
    if reduce is None:
        reduce = "assign" if input is not None else "sum"
    request = ops_pb2.ScatterNdRequest(index=to_tensor(index, "index"), src=to_tensor(src, "src"),
                                       axes=axes or [], batch_dims=batch_dims,
                                       reduce=to_reduction(reduce), shape=shape or [],
                                       deterministic=deterministic)
    if input is not None:
        request.input.CopyFrom(to_tensor(input, "input"))
    if include_self is not None:
        request.include_self = include_self
    return generic_pb2.OpRequest(scatter_nd=request)


def masked_scatter(input, mask, src):
    """torch.masked_scatter(input, mask, src)."""
    return generic_pb2.OpRequest(masked_scatter=ops_pb2.MaskedScatterRequest(
        input=to_tensor(input, "input"), mask=to_tensor(mask, "mask"), src=to_tensor(src, "src")))


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
