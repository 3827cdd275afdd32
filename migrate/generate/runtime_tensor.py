"""Runtime helpers of MXNet's tensor ops (indexing, ordering, creation, shape) for generated modules.

Copied into generated files like those in ``runtime`` (each uses only ``torch``, ``F`` and ``math``). MXNet returns
indices as float32 unless an op's ``dtype`` says otherwise, and casts float indices to integers by truncation;
these helpers do the same.
"""
import math  # noqa: F401 (the generated file imports it for the helpers)

import torch
import torch.nn.functional as F  # noqa: F401

__all__ = ["TENSOR_HELPERS"]


def _mx_mod(a, b):
    """MXNet's mod: the remainder takes the divisor's sign (Python's %), and x mod 0 is 0."""
    b = torch.as_tensor(b, dtype=a.dtype, device=a.device) if not torch.is_tensor(b) else b
    r = torch.fmod(a, b)
    r = torch.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
    return torch.where(b == 0, torch.zeros_like(r), r)


def _mx_div(a, b):
    """MXNet's division: integer arrays divide with truncation (as C's ``/``), floats as usual."""
    if not a.is_floating_point() and not b.is_floating_point():
        return torch.div(a, b, rounding_mode="trunc")
    return a / b


def _mx_axis_indices(index, size, mode):
    """Float or integer indices made valid for an axis of ``size``: clipped to [0, size - 1] or wrapped."""
    index = index.long() if index.is_floating_point() else index.to(torch.int64)
    return torch.remainder(index, size) if mode == "wrap" else index.clamp(0, size - 1)


def _mx_take(a, indices, axis, mode):
    """MXNet's take: ``a`` indexed along ``axis`` by every element of ``indices`` (clip or wrap)."""
    axis = axis % a.dim()
    flat = _mx_axis_indices(indices.reshape(-1), a.shape[axis], mode)
    out = torch.index_select(a, axis, flat)
    return out.reshape(a.shape[:axis] + indices.shape + a.shape[axis + 1:])


def _mx_pick(data, index, axis, keepdims, mode):
    """MXNet's pick: along ``axis``, the element at ``index`` (shape of ``data`` without that axis)."""
    axis = axis % data.dim()
    index = _mx_axis_indices(index, data.shape[axis], mode)
    if index.dim() < data.dim():
        index = index.unsqueeze(axis)
    out = torch.gather(data, axis, index.expand(data.shape[:axis] + (1,) + data.shape[axis + 1:]))
    return out if keepdims else out.squeeze(axis)


def _mx_gather_nd(data, indices):
    """MXNet's gather_nd: ``indices`` (M, ...) picks ``data[i0, ..., iM-1]`` (negative indices count from the end)."""
    m = indices.shape[0]
    index = indices.long() if indices.is_floating_point() else indices.to(torch.int64)
    index = [torch.remainder(index[j], data.shape[j]) for j in range(m)]
    return data[tuple(index)]


def _mx_one_hot(indices, depth, on_value, off_value, dtype):
    """MXNet's one_hot: ``depth`` values per index, ``on_value`` at the index; an index out of range is all off."""
    index = indices.long() if indices.is_floating_point() else indices.to(torch.int64)
    hot = index.unsqueeze(-1) == torch.arange(depth, device=indices.device)
    on = torch.tensor(on_value, dtype=dtype, device=indices.device)
    return torch.where(hot, on, torch.tensor(off_value, dtype=dtype, device=indices.device))


def _mx_topk(x, axis, k, ret_typ, is_ascend, dtype):
    """MXNet's topk: the ``k`` largest (smallest if ``is_ascend``) along ``axis`` (None: flattened); returns the
    indices (as ``dtype``), the values, both, or a 0/1 mask of the input's shape and dtype."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    k = x.shape[axis] if k < 1 else k
    values, indices = torch.topk(x, k, dim=axis, largest=not is_ascend, sorted=True)
    if ret_typ == "value":
        return values
    if ret_typ == "mask":
        return torch.zeros_like(x).scatter(axis, indices, 1.0).detach()
    if ret_typ == "both":
        return values, indices.to(dtype)
    return indices.to(dtype)


def _mx_sorted_indices(key, dim, descending):
    """Indices that sort ``key`` along ``dim``, equal keys in their original order (torch's stable sort; an ONNX
    export writes TopK, whose ties keep index order by definition, as torch's exporter refuses ``stable``)."""
    if torch.onnx.is_in_onnx_export():
        return torch.sort(key, dim=dim, descending=descending).indices
    return torch.sort(key, dim=dim, descending=descending, stable=True).indices


def _mx_sort(x, axis, is_ascend):
    """MXNet's sort along ``axis`` (None: flattened)."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    return torch.gather(x, axis, _mx_sorted_indices(x, axis, not is_ascend))


def _mx_argsort(x, axis, is_ascend, dtype):
    """MXNet's argsort along ``axis`` (None: flattened), indices as ``dtype``."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    return _mx_sorted_indices(x, axis, not is_ascend).to(dtype)


def _mx_argmax(x, axis, keepdims, smallest=False):
    """MXNet's argmax/argmin: indices of the first largest (smallest) value, in the input's dtype; axis None
    flattens (one element, or all axes kept as 1 with ``keepdims``)."""
    fn = torch.argmin if smallest else torch.argmax
    if axis is None:
        out = fn(x.reshape(-1)).reshape([1] * x.dim() if keepdims else [1])
    else:
        out = fn(x, dim=axis, keepdim=keepdims)
    return out.to(x.dtype)


def _mx_norm(x, ord, axis, keepdims):
    """MXNet's norm: L1 or L2 over ``axis`` (None: all values; the result keeps one element)."""
    dims = tuple(range(x.dim())) if axis is None else axis
    out = torch.linalg.vector_norm(x, ord, dim=dims, keepdim=keepdims)
    return out.reshape(1) if axis is None and not keepdims else out


def _mx_slice_like(x, like, axes):
    """MXNet's slice_like: ``x`` cut to the size of ``like`` along ``axes`` (all axes when empty), from the start."""
    axes = range(like.dim()) if not axes else [a % x.dim() for a in axes]
    index = [slice(None)] * x.dim()
    for a in axes:
        index[a] = slice(0, like.shape[a])
    return x[tuple(index)]


def _mx_reshape_like(lhs, rhs, lhs_begin, lhs_end, rhs_begin, rhs_end):
    """MXNet's reshape_like: dims ``lhs_begin:lhs_end`` of ``lhs`` replaced by dims ``rhs_begin:rhs_end`` of
    ``rhs`` (None: the start or the end)."""
    lb, le = slice(lhs_begin, lhs_end).indices(lhs.dim())[:2]
    rb, re = slice(rhs_begin, rhs_end).indices(rhs.dim())[:2]
    return lhs.reshape(lhs.shape[:lb] + rhs.shape[rb:re] + lhs.shape[le:])


def _mx_arange_like(x, start, step, repeat, axis):
    """MXNet's contrib.arange_like: start, start + step, ... (each ``repeat`` times) shaped like ``x`` (axis None)
    or as long as ``x``'s ``axis``."""
    size = x.numel() if axis is None else x.shape[axis]
    count = -(-size // repeat)
    out = torch.arange(count, dtype=x.dtype, device=x.device) * step + start
    out = out.repeat_interleave(repeat)[:size] if repeat > 1 else out
    return out.reshape(x.shape) if axis is None else out


def _mx_broadcast_axis(x, axis, size):
    """MXNet's broadcast_axis: each axis in ``axis`` (of length 1) repeated to ``size``."""
    shape = list(x.shape)
    for a, s in zip(axis, size):
        shape[a % x.dim()] = s
    return x.expand(shape)


def _mx_broadcast_like(lhs, rhs, lhs_axes, rhs_axes):
    """MXNet's broadcast_like with axes: each ``lhs_axes`` axis of ``lhs`` (length 1) takes the length of the
    matching ``rhs_axes`` axis of ``rhs``."""
    shape = list(lhs.shape)
    for a, b in zip(lhs_axes, rhs_axes):
        shape[a % lhs.dim()] = rhs.shape[b]
    return lhs.expand(shape)


def _mx_where(condition, x, y):
    """MXNet's where: ``x`` where ``condition`` is non-zero, else ``y``; a 1-D condition selects whole rows."""
    if condition.dim() == 1 and x.dim() > 1:
        condition = condition.reshape((-1,) + (1,) * (x.dim() - 1))
    return torch.where(condition != 0, x, y)


def _mx_pad(x, mode, pad_width, constant_value):
    """MXNet's Pad: ``pad_width`` (before, after) per axis, axes 0 and 1 unpadded; modes constant, edge, reflect."""
    pads = [p for axis in reversed(range(2, x.dim())) for p in pad_width[2 * axis:2 * axis + 2]]
    if mode == "constant":
        return F.pad(x, pads, "constant", constant_value)
    return F.pad(x, pads, "replicate" if mode == "edge" else "reflect")


TENSOR_HELPERS = [_mx_mod, _mx_div, _mx_axis_indices, _mx_take, _mx_pick, _mx_gather_nd, _mx_one_hot, _mx_topk,
                  _mx_sorted_indices, _mx_sort, _mx_argsort, _mx_argmax, _mx_norm, _mx_slice_like, _mx_reshape_like,
                  _mx_arange_like, _mx_broadcast_axis, _mx_broadcast_like, _mx_where, _mx_pad]
