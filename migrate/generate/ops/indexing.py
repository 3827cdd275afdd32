"""MXNet's indexing and ordering ops: ``take``, ``batch_take``, ``pick``, ``gather_nd``, ``one_hot``, ``topk``,
``sort``, ``argsort``.

Indices come back as MXNet gives them (float32 unless the op's ``dtype`` says otherwise); float index inputs are
truncated to integers and clipped or wrapped as the op's ``mode`` says. topk, sort and argsort give equal values
the order MXNet's CPU kernel gives them (libstdc++'s std::sort or std::partial_sort, replayed for rows with ties).
"""
from __future__ import annotations

import torch

from migrate.generate.registry import OpNode, register

__all__ = ["mx_axis_indices", "mx_take", "mx_pick", "mx_gather_nd", "mx_one_hot", "mx_topk", "mx_sort", "mx_argsort",
           "mx_ordered", "mx_sorted_indices", "mx_cpu_order", "mx_introsort", "mx_median_to_first", "mx_partial_sort",
           "mx_heap_adjust"]


def _mode(node: OpNode) -> str:
    mode = node.attr("mode", "clip")
    if mode not in ("clip", "wrap"):
        raise node.unsupported(f"mode {mode!r} (clip and wrap are translated; 'raise' checks indices at run time)")
    return repr(mode)


@register("take")
def _take(node: OpNode) -> str:
    return node.call(mx_take, *node.inputs[:2], node.attr("axis", 0), _mode(node))


def mx_axis_indices(index, size, mode):
    """Float or integer indices made valid for an axis of ``size``: clipped to [0, size - 1] or wrapped."""
    index = index.long() if index.is_floating_point() else index.to(torch.int64)
    return torch.remainder(index, size) if mode == "wrap" else index.clamp(0, size - 1)


def mx_take(a, indices, axis, mode):
    """MXNet's take: ``a`` indexed along ``axis`` by every element of ``indices`` (clip or wrap)."""
    axis = axis % a.dim()
    flat = mx_axis_indices(indices.reshape(-1), a.shape[axis], mode)
    out = torch.index_select(a, axis, flat)
    return out.reshape(a.shape[:axis] + indices.shape + a.shape[axis + 1:])


@register("batch_take")
def _batch_take(node: OpNode) -> str:
    a, indices = node.inputs[:2]
    return node.call(mx_pick, a, indices, 1, False, repr("clip"))


@register("pick")
def _pick(node: OpNode) -> str:
    axis = node.attr("axis", -1)
    if axis is None:
        raise node.unsupported("axis=None")
    return node.call(mx_pick, *node.inputs[:2], axis, bool(node.attr("keepdims", False)), _mode(node))


def mx_pick(data, index, axis, keepdims, mode):
    """MXNet's pick: along ``axis``, the element at ``index`` (shape of ``data`` without that axis)."""
    axis = axis % data.dim()
    index = mx_axis_indices(index, data.shape[axis], mode)
    if index.dim() < data.dim():
        index = index.unsqueeze(axis)
    out = torch.gather(data, axis, index.expand(data.shape[:axis] + (1,) + data.shape[axis + 1:]))
    return out if keepdims else out.squeeze(axis)


@register("gather_nd")
def _gather_nd(node: OpNode) -> str:
    return node.call(mx_gather_nd, *node.inputs[:2])


def mx_gather_nd(data, indices):
    """MXNet's gather_nd: ``indices`` (M, ...) picks ``data[i0, ..., iM-1]`` (negative indices count from the end)."""
    m = indices.shape[0]
    index = indices.long() if indices.is_floating_point() else indices.to(torch.int64)
    index = [torch.remainder(index[j], data.shape[j]) for j in range(m)]
    return data[tuple(index)]


@register("one_hot")
def _one_hot(node: OpNode) -> str:
    return node.call(mx_one_hot, node.inputs[0], node.attr("depth"), float(node.attr("on_value", 1.0)),
                     float(node.attr("off_value", 0.0)), f"torch.{node.attr('dtype', 'float32')}")


def mx_one_hot(indices, depth, on_value, off_value, dtype):
    """MXNet's one_hot: ``depth`` values per index, ``on_value`` at the index; an index out of range is all off."""
    index = indices.long() if indices.is_floating_point() else indices.to(torch.int64)
    hot = index.unsqueeze(-1) == torch.arange(depth, device=indices.device)
    on = torch.tensor(on_value, dtype=dtype, device=indices.device)
    return torch.where(hot, on, torch.tensor(off_value, dtype=dtype, device=indices.device))


@register("topk")
def _topk(node: OpNode) -> str:
    ret_typ = node.attr("ret_typ", "indices")
    if ret_typ not in ("indices", "value", "both", "mask"):
        raise node.unsupported(f"ret_typ {ret_typ!r}")
    return node.call(mx_topk, node.inputs[0], node.attr("axis", -1), node.attr("k", 1), repr(ret_typ),
                     bool(node.attr("is_ascend", False)), f"torch.{node.attr('dtype', 'float32')}")


def mx_topk(x, axis, k, ret_typ, is_ascend, dtype):
    """MXNet's topk: the ``k`` largest (smallest if ``is_ascend``) along ``axis`` (None: flattened), ties in
    MXNet's CPU order; returns the indices (as ``dtype``), the values, both, or a 0/1 mask of the input's shape
    and dtype."""
    values, indices = mx_ordered(x, axis, k, is_ascend)
    if ret_typ == "value":
        return values
    if ret_typ == "mask":
        flat = x.reshape(-1) if axis is None else x
        mask = torch.zeros_like(flat).scatter(0 if axis is None else axis, indices, 1.0).detach()
        return mask.reshape(x.shape)
    if ret_typ == "both":
        return values, indices.to(dtype)
    return indices.to(dtype)


@register("sort")
def _sort(node: OpNode) -> str:
    return node.call(mx_sort, node.inputs[0], node.attr("axis", -1), bool(node.attr("is_ascend", True)))


def mx_sort(x, axis, is_ascend):
    """MXNet's sort along ``axis`` (None: flattened)."""
    return mx_ordered(x, axis, 0, is_ascend)[0]


@register("argsort")
def _argsort(node: OpNode) -> str:
    return node.call(mx_argsort, node.inputs[0], node.attr("axis", -1), bool(node.attr("is_ascend", True)),
                     f"torch.{node.attr('dtype', 'float32')}")


def mx_argsort(x, axis, is_ascend, dtype):
    """MXNet's argsort along ``axis`` (None: flattened), indices as ``dtype``, ties in MXNet's CPU order."""
    return mx_ordered(x, axis, 0, is_ascend)[1].to(dtype)


def mx_ordered(x, axis, k, is_ascend):
    """(values, indices) of the first ``k`` elements of ``x`` along ``axis`` (None: flattened; k < 1: all) in
    MXNet's CPU order; the values carry the gradient to the elements they came from."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = axis % x.dim()
    k = x.shape[axis] if k < 1 else k
    moved = x.movedim(axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    index = mx_cpu_order(rows.detach(), k, not is_ascend).reshape(moved.shape[:-1] + (k,))
    return moved.gather(-1, index).movedim(-1, axis), index.movedim(-1, axis)


def mx_sorted_indices(key, dim, descending):
    """Indices that sort ``key`` along ``dim``, equal keys in their original order (torch's stable sort; an ONNX
    export writes TopK, whose ties keep index order by definition, as torch's exporter refuses ``stable``)."""
    if torch.onnx.is_in_onnx_export():
        return torch.sort(key, dim=dim, descending=descending).indices
    return torch.sort(key, dim=dim, descending=descending, stable=True).indices


def mx_cpu_order(rows, k, descending):
    """Per row of ``rows`` (M, N), the indices of its first ``k`` elements in the order MXNet's CPU topk, sort and
    argsort give them. MXNet calls std::sort (k * 8 > N) or std::partial_sort, which order equal values neither
    by index nor stably: a row whose first k + 1 values in order are all different has one answer, torch's sort's;
    a row with ties among them replays libstdc++'s algorithm on its values (a Python loop over the row, run for
    such rows only). Traced or exported, every row takes torch's order (ties then in index order)."""
    if torch.onnx.is_in_onnx_export() or torch.jit.is_tracing():
        return mx_sorted_indices(rows, -1, descending)[:, :k]
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
            mx_introsort(a, keys)
        else:
            mx_partial_sort(a, keys, 0, k, len(keys))
        indices[r] = torch.tensor(a[:k], dtype=indices.dtype, device=indices.device)
    return indices


def mx_introsort(a, keys):
    """libstdc++'s ``std::sort`` on the index list ``a`` by ``keys`` (ascending): quicksort with the median of
    three as pivot down to ranges of 16, heapsort past 2 log2(n) levels, then one insertion sort. Equal keys end
    up in this algorithm's order."""
    ranges = [(0, len(a), 2 * (len(a).bit_length() - 1))] if len(a) > 1 else []
    while ranges:
        lo, hi, depth = ranges.pop()
        while hi - lo > 16:
            if depth == 0:
                mx_partial_sort(a, keys, lo, hi, hi)
                break
            depth -= 1
            mx_median_to_first(a, keys, lo, lo + 1, lo + (hi - lo) // 2, hi - 1)
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


def mx_median_to_first(a, keys, first, x, y, z):
    """libstdc++'s ``__move_median_to_first``: the median of a[x], a[y], a[z] by ``keys`` swapped into a[first]."""
    kx, ky, kz = keys[a[x]], keys[a[y]], keys[a[z]]
    if kx < ky:
        pick = y if ky < kz else z if kx < kz else x
    else:
        pick = x if kx < kz else z if ky < kz else y
    a[first], a[pick] = a[pick], a[first]


def mx_partial_sort(a, keys, lo, mid, hi):
    """libstdc++'s ``std::partial_sort(a + lo, a + mid, a + hi)`` by ``keys``: a heap of a[lo:mid] takes each
    smaller later element, then is sorted by popping."""
    heap, n = a[lo:mid], mid - lo
    for parent in range((n - 2) // 2, -1, -1):
        mx_heap_adjust(heap, keys, parent, n, heap[parent])
    for i in range(mid, hi):
        if n and keys[a[i]] < keys[heap[0]]:
            value, a[i] = a[i], heap[0]
            mx_heap_adjust(heap, keys, 0, n, value)
    for last in range(n - 1, 0, -1):
        value, heap[last] = heap[last], heap[0]
        mx_heap_adjust(heap, keys, 0, last, value)
    a[lo:mid] = heap


def mx_heap_adjust(a, keys, hole, length, value):
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
