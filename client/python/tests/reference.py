"""Reference implementations of the ops with plain loops over numpy arrays.

They share no code with the client or the server: each walks the index element by element, in
row-major order, the way docs/semantics.md and PyTorch define the op.
"""
import numpy as np


def _norm(i, size):
    return int(i) + size if i < 0 else int(i)


def gather(x, axis, index):
    out = np.empty(index.shape, x.dtype)
    for pos in np.ndindex(*index.shape):
        src = list(pos)
        src[axis] = _norm(index[pos], x.shape[axis])
        out[pos] = x[tuple(src)]
    return out


def _combine(self_value, values, reduce, include_self, dtype):
    """One destination's value: `values` in row-major order of the index."""
    if reduce == "assign":
        return values[-1]
    pool = ([self_value] if include_self else []) + list(values)
    wide = np.array(pool, dtype=np.complex128 if dtype.kind == "c" else
                    np.float64 if dtype.kind == "f" else np.int64)
    if reduce == "sum":
        return wide.sum()
    if reduce == "prod":
        return wide.prod()
    if reduce == "mean":
        return wide.sum() // len(pool) if dtype.kind in "iu" else wide.sum() / len(pool)
    if reduce == "amax":
        return wide.max()
    if reduce == "amin":
        return wide.min()
    raise ValueError(reduce)


def scatter(x, axis, index, src, reduce="assign", include_self=True):
    """torch.scatter_reduce semantics; src may be a scalar."""
    src = np.broadcast_to(np.asarray(src, x.dtype), index.shape) if np.ndim(src) == 0 else src
    groups = {}
    for pos in np.ndindex(*index.shape):
        dest = list(pos)
        dest[axis] = _norm(index[pos], x.shape[axis])
        groups.setdefault(tuple(dest), []).append(src[pos])
    out = x.copy()
    for dest, values in groups.items():
        out[dest] = _combine(x[dest], values, reduce, include_self, x.dtype)
    return out


def index_reduce(x, axis, index, src, reduce, include_self=True, alpha=1):
    """torch.index_add (sum, alpha) / index_copy (assign) / index_reduce."""
    moved_x = np.moveaxis(x, axis, 0)
    moved_src = np.moveaxis(src, axis, 0)
    out = np.moveaxis(x.copy(), axis, 0)  # a view of the copy
    groups = {}
    for j, i in enumerate(index):
        groups.setdefault(_norm(i, x.shape[axis]), []).append(j)
    for i, js in groups.items():
        for rest in np.ndindex(*moved_x.shape[1:]):
            values = [moved_src[(j,) + rest] * (alpha if reduce == "sum" else 1) for j in js]
            out[(i,) + rest] = _combine(moved_x[(i,) + rest], values, reduce, include_self,
                                        x.dtype)
    return np.moveaxis(out, 0, axis)


def diagonal_scatter(x, src, offset=0, axis1=0, axis2=1):
    out = x.copy()
    view = np.moveaxis(out, (axis1, axis2), (-2, -1))
    rows, cols = view.shape[-2:]
    k = 0
    for r in range(rows):
        c = r + offset
        if 0 <= c < cols:
            view[..., r, c] = src[..., k]
            k += 1
    assert k == src.shape[-1]
    return out


def gather_nd(x, index, batch_dims=0):
    """tf.gather_nd."""
    k = index.shape[-1]
    out_shape = index.shape[:-1] + x.shape[batch_dims + k:]
    out = np.empty(out_shape, x.dtype)
    for pos in np.ndindex(*index.shape[:-1]):
        coords = tuple(_norm(c, x.shape[batch_dims + j]) for j, c in enumerate(index[pos]))
        out[pos] = x[pos[:batch_dims] + coords]
    return out


def scatter_nd(x, index, src, reduce="assign"):
    """tf.tensor_scatter_nd_update (assign) / tensor_scatter_nd_add (sum), batch_dims 0."""
    out = x.copy()
    for pos in np.ndindex(*index.shape[:-1]):
        coords = tuple(_norm(c, x.shape[j]) for j, c in enumerate(index[pos]))
        if reduce == "assign":
            out[coords] = src[pos]
        else:
            out[coords] = out[coords] + src[pos]
    return out


def masked_scatter(x, mask, src):
    shape = np.broadcast_shapes(x.shape, mask.shape)
    out = np.broadcast_to(x, shape).copy()
    flat_mask = np.broadcast_to(mask, shape).reshape(-1)
    flat_out = out.reshape(-1)
    flat_src = src.reshape(-1)
    k = 0
    for i in range(flat_out.size):
        if flat_mask[i]:
            flat_out[i] = flat_src[k]
            k += 1
    return out
