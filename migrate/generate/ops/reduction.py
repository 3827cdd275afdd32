"""MXNet's reductions: ``sum``/``sum_axis``, ``mean``, ``max``, ``min``, ``prod``, ``nansum``, ``nanprod`` (each
with ``exclude=True``: the axes ``axis`` does not name), ``norm``, ``argmax``/``argmin``/``argmax_channel`` (indices in
the input's dtype, as MXNet gives them).
"""
from __future__ import annotations

import torch

from migrate.generate.registry import OpNode, register

__all__ = ["mx_norm", "mx_argmax"]


def _reduced_axes(node: OpNode):
    """The axes the node reduces: None for all of them (the result keeps one element unless ``keepdims``), else a
    tuple (empty where ``exclude=True`` names every axis: nothing is reduced). ``exclude=True`` reduces the axes
    ``axis`` does not name; with an empty ``axis`` it reduces all, as MXNet does."""
    if node.attr("axis") in (None, ()):
        return None
    axes = node.tuple_attr("axis")
    if not node.attr("exclude", False):
        return axes
    if not (node.in_shapes and node.in_shapes[0]):
        raise node.unsupported("exclude=True on an input of unknown rank")
    ndim = len(node.in_shapes[0])
    named = {a % ndim for a in axes}
    return tuple(a for a in range(ndim) if a not in named)


def _reduce(node: OpNode, fn: str) -> str:
    axes, keep, x = _reduced_axes(node), bool(node.attr("keepdims", False)), node.inputs[0]
    if axes is None:
        return f"{x}.{fn}(tuple(range({x}.dim())), keepdim=True)" if keep else f"{x}.{fn}().reshape(1)"
    if not axes:
        return x
    return f"{x}.{fn}({axes}, keepdim={keep})"


@register("mean")
def _mean(node: OpNode) -> str:
    return _reduce(node, "mean")


@register("sum", "sum_axis")
def _sum(node: OpNode) -> str:
    return _reduce(node, "sum")


@register("max")
def _max(node: OpNode) -> str:
    return _reduce(node, "amax")


@register("min")
def _min(node: OpNode) -> str:
    return _reduce(node, "amin")


@register("prod", "nanprod")
def _prod(node: OpNode) -> str:
    """torch's prod takes one axis: the product runs axis by axis (nanprod reads NaN as 1)."""
    axes, x = _reduced_axes(node), node.inputs[0]
    if node.op == "nanprod":
        x = f"torch.where(torch.isnan({x}), torch.ones_like({x}), {x})"
    if axes is None:
        return f"{x}.reshape(-1).prod(0, keepdim=True)" + (f".reshape([1] * {node.inputs[0]}.dim())"
                                                             if node.attr("keepdims") else "")
    out = x
    for a in axes:  # keepdim: the axes stay where they are
        out = f"{out}.prod({a}, keepdim=True)"
    return out if node.attr("keepdims", False) or not axes else f"{out}.squeeze({axes})"


@register("nansum")
def _nansum(node: OpNode) -> str:
    return _reduce(node, "nansum")


@register("norm")
def _norm(node: OpNode) -> str:
    order = node.attr("ord", 2)
    if order not in (1, 2):
        raise node.unsupported(f"ord={order} (MXNet supports 1 and 2)")
    if node.attr("out_dtype") not in (None, "None"):
        raise node.unsupported(f"out_dtype={node.attr('out_dtype')}")
    axis = node.attr("axis")
    return node.call(mx_norm, node.inputs[0], order, None if axis in (None, ()) else node.tuple_attr("axis"),
                     bool(node.attr("keepdims", False)))


def mx_norm(x, ord, axis, keepdims):
    """MXNet's norm: L1 or L2 over ``axis`` (None: all values; the result keeps one element)."""
    dims = tuple(range(x.dim())) if axis is None else axis
    out = torch.linalg.vector_norm(x, ord, dim=dims, keepdim=keepdims)
    return out.reshape(1) if axis is None and not keepdims else out


@register("argmax", "argmin")
def _argmax(node: OpNode) -> str:
    return node.call(mx_argmax, node.inputs[0], node.attr("axis"), bool(node.attr("keepdims", False)),
                     node.op == "argmin")


@register("argmax_channel")
def _argmax_channel(node: OpNode) -> str:
    return node.call(mx_argmax, node.inputs[0], -1, False)


def mx_argmax(x, axis, keepdims, smallest=False):
    """MXNet's argmax/argmin: indices of the first largest (smallest) value, in the input's dtype; axis None
    flattens (one element, or all axes kept as 1 with ``keepdims``)."""
    fn = torch.argmin if smallest else torch.argmax
    if axis is None:
        out = fn(x.reshape(-1)).reshape([1] * x.dim() if keepdims else [1])
    else:
        out = fn(x, dim=axis, keepdim=keepdims)
    return out.to(x.dtype)
