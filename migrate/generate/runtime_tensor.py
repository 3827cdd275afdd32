"""Runtime helpers of MXNet's tensor ops (indexing, ordering, creation, sampling, shape) for generated modules.

Copied into generated files like those in ``runtime`` (each uses only ``torch``, ``F`` and ``math``). MXNet returns
indices as float32 unless an op's ``dtype`` says otherwise, and casts float indices to integers by truncation;
these helpers do the same. topk, sort and argsort give equal values the order MXNet's CPU kernel gives them
(libstdc++'s std::sort or std::partial_sort, replayed for rows with ties).
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


def _mx_heap_adjust(a, keys, hole, length, value):
    """libstdc++'s ``__adjust_heap`` on the index list ``a`` (a max-heap by ``keys``): the hole at ``hole`` sinks
    to a leaf along the larger children, then ``value`` rises from there."""
    top, child = hole, hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if keys[a[child]] < keys[a[child - 1]]:
            child -= 1
        a[hole] = a[child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[hole] = a[child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and keys[a[parent]] < keys[value]:
        a[hole] = a[parent]
        hole, parent = parent, (parent - 1) // 2
    a[hole] = value


def _mx_partial_sort(a, keys, lo, mid, hi):
    """libstdc++'s ``std::partial_sort(a + lo, a + mid, a + hi)`` by ``keys``: a heap of a[lo:mid] takes each
    smaller later element, then is sorted by popping."""
    heap, n = a[lo:mid], mid - lo
    for parent in range((n - 2) // 2, -1, -1):
        _mx_heap_adjust(heap, keys, parent, n, heap[parent])
    for i in range(mid, hi):
        if n and keys[a[i]] < keys[heap[0]]:
            value, a[i] = a[i], heap[0]
            _mx_heap_adjust(heap, keys, 0, n, value)
    for last in range(n - 1, 0, -1):
        value, heap[last] = heap[last], heap[0]
        _mx_heap_adjust(heap, keys, 0, last, value)
    a[lo:mid] = heap


def _mx_median_to_first(a, keys, first, x, y, z):
    """libstdc++'s ``__move_median_to_first``: the median of a[x], a[y], a[z] by ``keys`` swapped into a[first]."""
    kx, ky, kz = keys[a[x]], keys[a[y]], keys[a[z]]
    if kx < ky:
        pick = y if ky < kz else z if kx < kz else x
    else:
        pick = x if kx < kz else z if ky < kz else y
    a[first], a[pick] = a[pick], a[first]


def _mx_introsort(a, keys):
    """libstdc++'s ``std::sort`` on the index list ``a`` by ``keys`` (ascending): quicksort with the median of
    three as pivot down to ranges of 16, heapsort past 2 log2(n) levels, then one insertion sort. Equal keys end
    up in this algorithm's order."""
    ranges = [(0, len(a), 2 * (len(a).bit_length() - 1))] if len(a) > 1 else []
    while ranges:
        lo, hi, depth = ranges.pop()
        while hi - lo > 16:
            if depth == 0:
                _mx_partial_sort(a, keys, lo, hi, hi)
                break
            depth -= 1
            _mx_median_to_first(a, keys, lo, lo + 1, lo + (hi - lo) // 2, hi - 1)
            pivot, i, j = keys[a[lo]], lo + 1, hi
            while True:
                while keys[a[i]] < pivot:
                    i += 1
                j -= 1
                while pivot < keys[a[j]]:
                    j -= 1
                if i >= j:
                    break
                a[i], a[j] = a[j], a[i]
                i += 1
            ranges.append((i, hi, depth))
            hi = i
    for i in range(1, len(a)):  # the final insertion sort (the first 16 guarded, the rest unguarded: the same)
        value, j = a[i], i
        while j > 0 and keys[value] < keys[a[j - 1]]:
            a[j] = a[j - 1]
            j -= 1
        a[j] = value


def _mx_cpu_order(rows, k, descending):
    """Per row of ``rows`` (M, N), the indices of its first ``k`` elements in the order MXNet's CPU topk, sort and
    argsort give them. MXNet calls std::sort (k * 8 > N) or std::partial_sort, which order equal values neither
    by index nor stably: a row whose first k + 1 values in order are all different has one answer, torch's sort's;
    a row with ties among them replays libstdc++'s algorithm on its values (a Python loop over the row, run for
    such rows only). Traced or exported, every row takes torch's order (ties then in index order)."""
    if torch.onnx.is_in_onnx_export() or torch.jit.is_tracing():
        return _mx_sorted_indices(rows, -1, descending)[:, :k]
    order = torch.sort(rows, dim=-1, descending=descending, stable=True)
    tied = (order.values[:, 1:k + 1] == order.values[:, :k][:, :rows.shape[1] - 1]).any(1)
    indices = order.indices[:, :k]
    if not bool(tied.any()):
        return indices
    indices = indices.clone()
    for r in tied.nonzero()[:, 0].tolist():
        keys = (-rows[r] if descending else rows[r]).tolist()
        a = list(range(len(keys)))
        if k * 8 > len(keys):
            _mx_introsort(a, keys)
        else:
            _mx_partial_sort(a, keys, 0, k, len(keys))
        indices[r] = torch.tensor(a[:k], dtype=indices.dtype, device=indices.device)
    return indices


def _mx_ordered(x, axis, k, is_ascend):
    """(values, indices) of the first ``k`` elements of ``x`` along ``axis`` (None: flattened; k < 1: all) in
    MXNet's CPU order; the values carry the gradient to the elements they came from."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = axis % x.dim()
    k = x.shape[axis] if k < 1 else k
    moved = x.movedim(axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    index = _mx_cpu_order(rows.detach(), k, not is_ascend).reshape(moved.shape[:-1] + (k,))
    return moved.gather(-1, index).movedim(-1, axis), index.movedim(-1, axis)


def _mx_topk(x, axis, k, ret_typ, is_ascend, dtype):
    """MXNet's topk: the ``k`` largest (smallest if ``is_ascend``) along ``axis`` (None: flattened), ties in
    MXNet's CPU order; returns the indices (as ``dtype``), the values, both, or a 0/1 mask of the input's shape
    and dtype."""
    values, indices = _mx_ordered(x, axis, k, is_ascend)
    if ret_typ == "value":
        return values
    if ret_typ == "mask":
        flat = x.reshape(-1) if axis is None else x
        mask = torch.zeros_like(flat).scatter(0 if axis is None else axis, indices, 1.0).detach()
        return mask.reshape(x.shape)
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
    return _mx_ordered(x, axis, 0, is_ascend)[0]


def _mx_argsort(x, axis, is_ascend, dtype):
    """MXNet's argsort along ``axis`` (None: flattened), indices as ``dtype``, ties in MXNet's CPU order."""
    return _mx_ordered(x, axis, 0, is_ascend)[1].to(dtype)


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


def _mx_sample_multinomial(data, shape, get_prob, dtype):
    """MXNet's sample_multinomial: per distribution (the last axis of ``data``, read unnormalized) ``shape`` draws
    (one where ``shape`` is empty), each the first class whose running sum of probabilities (float32) reaches a
    uniform float32 draw in [0, 1); a row summing short of the draw gives index K, as MXNet's kernel does. With
    ``get_prob`` also the log-probability of each draw (in ``data``'s dtype; its gradient is head / p at the drawn
    class, MXNet's backward). A 1-D ``data`` with an empty ``shape`` gives shape (1,)."""
    k = data.shape[-1]
    rows = data.reshape(-1, k)
    draws = math.prod(shape)
    cumulative = torch.cumsum(rows.detach().double(), 1).float()
    uniform = torch.rand(rows.shape[0], draws, dtype=torch.float32, device=data.device)
    index = torch.searchsorted(cumulative.contiguous(), uniform)
    out_shape = (tuple(shape) or (1,)) if data.dim() == 1 else tuple(data.shape[:-1]) + tuple(shape)
    sample = index.reshape(out_shape).to(dtype)
    if not get_prob:
        return sample
    return sample, torch.log(rows.gather(1, index.clamp(max=k - 1))).reshape(out_shape)


TENSOR_HELPERS = [_mx_mod, _mx_div, _mx_axis_indices, _mx_take, _mx_pick, _mx_gather_nd, _mx_one_hot,
                  _mx_heap_adjust, _mx_partial_sort, _mx_median_to_first, _mx_introsort, _mx_cpu_order, _mx_ordered,
                  _mx_topk, _mx_sorted_indices, _mx_sort, _mx_argsort, _mx_argmax, _mx_norm, _mx_slice_like,
                  _mx_reshape_like, _mx_arange_like, _mx_broadcast_axis, _mx_broadcast_like, _mx_where, _mx_pad,
                  _mx_sample_multinomial]
