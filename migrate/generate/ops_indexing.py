"""Translators of MXNet's indexing, ordering and reduction ops: ``take``, ``batch_take``, ``pick``, ``gather_nd``,
``one_hot``, ``topk``, ``sort``, ``argsort``, ``argmax``/``argmin``, ``norm``, ``min``, ``prod``.

Indices come back as MXNet gives them (float32 unless the op's ``dtype`` says otherwise); float index inputs are
truncated to integers and clipped or wrapped as the op's ``mode`` says. Each translator is a pure function of the
node and imports no MXNet.
"""
from __future__ import annotations

from migrate.generate.registry import OpNode, register

__all__ = []


def _mode(node: OpNode) -> str:
    mode = node.attr("mode", "clip")
    if mode not in ("clip", "wrap"):
        raise node.unsupported(f"mode {mode!r} (clip and wrap are translated; 'raise' checks indices at run time)")
    return repr(mode)


@register("take")
def _take(node: OpNode) -> str:
    return node.call("_mx_take", *node.inputs[:2], node.attr("axis", 0), _mode(node))


@register("batch_take")
def _batch_take(node: OpNode) -> str:
    a, indices = node.inputs[:2]
    return node.call("_mx_pick", a, indices, 1, False, repr("clip"))


@register("pick")
def _pick(node: OpNode) -> str:
    axis = node.attr("axis", -1)
    if axis is None:
        raise node.unsupported("axis=None")
    return node.call("_mx_pick", *node.inputs[:2], axis, bool(node.attr("keepdims", False)), _mode(node))


@register("gather_nd")
def _gather_nd(node: OpNode) -> str:
    return node.call("_mx_gather_nd", *node.inputs[:2])


@register("one_hot")
def _one_hot(node: OpNode) -> str:
    return node.call("_mx_one_hot", node.inputs[0], node.attr("depth"), float(node.attr("on_value", 1.0)),
                     float(node.attr("off_value", 0.0)), f"torch.{node.attr('dtype', 'float32')}")


@register("topk")
def _topk(node: OpNode) -> str:
    ret_typ = node.attr("ret_typ", "indices")
    if ret_typ not in ("indices", "value", "both", "mask"):
        raise node.unsupported(f"ret_typ {ret_typ!r}")
    return node.call("_mx_topk", node.inputs[0], node.attr("axis", -1), node.attr("k", 1), repr(ret_typ),
                     bool(node.attr("is_ascend", False)), f"torch.{node.attr('dtype', 'float32')}")


@register("sort")
def _sort(node: OpNode) -> str:
    return node.call("_mx_sort", node.inputs[0], node.attr("axis", -1), bool(node.attr("is_ascend", True)))


@register("argsort")
def _argsort(node: OpNode) -> str:
    return node.call("_mx_argsort", node.inputs[0], node.attr("axis", -1), bool(node.attr("is_ascend", True)),
                     f"torch.{node.attr('dtype', 'float32')}")


@register("argmax", "argmin")
def _argmax(node: OpNode) -> str:
    return node.call("_mx_argmax", node.inputs[0], node.attr("axis"), bool(node.attr("keepdims", False)),
                     node.op == "argmin")


@register("argmax_channel")
def _argmax_channel(node: OpNode) -> str:
    return node.call("_mx_argmax", node.inputs[0], -1, False)


@register("norm")
def _norm(node: OpNode) -> str:
    order = node.attr("ord", 2)
    if order not in (1, 2):
        raise node.unsupported(f"ord={order} (MXNet supports 1 and 2)")
    if node.attr("out_dtype") not in (None, "None"):
        raise node.unsupported(f"out_dtype={node.attr('out_dtype')}")
    axis = node.attr("axis")
    return node.call("_mx_norm", node.inputs[0], order, None if axis in (None, ()) else node.tuple_attr("axis"),
                     bool(node.attr("keepdims", False)))


def _reduce(node: OpNode, fn: str) -> str:
    axis, keep, x = node.attr("axis"), bool(node.attr("keepdims", False)), node.inputs[0]
    if node.attr("exclude", False):
        raise node.unsupported("exclude=True")
    if axis in (None, ()):
        return f"{x}.{fn}(tuple(range({x}.dim())), keepdim=True)" if keep else f"{x}.{fn}().reshape(1)"
    return f"{x}.{fn}({node.tuple_attr('axis')}, keepdim={keep})"


@register("min")
def _min(node: OpNode) -> str:
    return _reduce(node, "amin")


@register("prod")
def _prod(node: OpNode) -> str:
    axis = node.attr("axis")
    x = node.inputs[0]
    if node.attr("exclude", False):
        raise node.unsupported("exclude=True")
    if axis in (None, ()):
        return f"{x}.reshape(-1).prod(0, keepdim=True)" + (f".reshape([1] * {x}.dim())" if node.attr("keepdims")
                                                             else "")
    out = x
    for a in node.tuple_attr("axis"):  # keepdim: the axes stay where they are
        out = f"{out}.prod({a}, keepdim=True)"
    return out if node.attr("keepdims", False) else f"{out}.squeeze({node.tuple_attr('axis')})"


@register("nansum")
def _nansum(node: OpNode) -> str:
    return _reduce(node, "nansum")
