"""Translators of MXNet's detection contrib ops: ``_contrib_box_nms``, ``_contrib_box_iou``, ``_contrib_box_decode``,
``_contrib_box_encode``, ``_contrib_MultiBoxPrior``, ``_contrib_MultiBoxDetection`` and
``_contrib_bipartite_matching``.

NMS-like ops keep MXNet's padded fixed-shape outputs (-1 rows), so a generated detector has the same output
shapes as MXNet's for every input. Where MXNet gives an op no gradient (box_iou, box_decode, box_encode,
MultiBoxPrior, MultiBoxDetection, bipartite_matching), the translation gives none either; box_nms passes the
gradient of each kept row to its input row, as MXNet's backward does. Each translator is a pure function of the
node and imports no MXNet; the arithmetic lives in ``runtime_detection``.
"""
from __future__ import annotations

from migrate.generate.registry import OpNode, register

__all__ = []


def _format(node: OpNode, key: str, default: str) -> str:
    value = node.attr(key, default)
    if value not in ("corner", "center"):
        raise node.unsupported(f"{key} {value!r} (corner or center)")
    return repr(value)


@register("_contrib_box_nms", "_contrib_box_non_maximum_suppression")
def _box_nms(node: OpNode) -> str:
    return node.call("_mx_box_nms", node.inputs[0], float(node.attr("overlap_thresh", 0.5)),
                     float(node.attr("valid_thresh", 0.0)), node.attr("topk", -1), node.attr("coord_start", 2),
                     node.attr("score_index", 1), node.attr("id_index", -1), float(node.attr("background_id", -1)),
                     bool(node.attr("force_suppress", False)), _format(node, "in_format", "corner"),
                     _format(node, "out_format", "corner"))


@register("_contrib_box_iou")
def _box_iou(node: OpNode) -> str:
    return node.call("_mx_box_iou", *node.inputs[:2], _format(node, "format", "corner"))


@register("_contrib_box_decode")
def _box_decode(node: OpNode) -> str:
    stds = tuple(float(node.attr(f"std{i}", 1.0)) for i in range(4))
    return node.call("_mx_box_decode", *node.inputs[:2], stds, float(node.attr("clip", -1.0)),
                     _format(node, "format", "center"))


@register("_contrib_box_encode")
def _box_encode(node: OpNode) -> str:
    return node.call("_mx_box_encode", *node.inputs[:6])


@register("_contrib_MultiBoxPrior")
def _multibox_prior(node: OpNode) -> str:
    sizes = tuple(float(s) for s in node.tuple_attr("sizes", (1.0,)))
    ratios = tuple(float(r) for r in node.tuple_attr("ratios", (1.0,)))
    steps = tuple(float(s) for s in node.tuple_attr("steps", (-1.0, -1.0)))
    offsets = tuple(float(o) for o in node.tuple_attr("offsets", (0.5, 0.5)))
    return node.call("_mx_multibox_prior", node.inputs[0], sizes, ratios, bool(node.attr("clip", False)), steps,
                     offsets)


@register("_contrib_MultiBoxDetection")
def _multibox_detection(node: OpNode) -> str:
    if node.attr("background_id", 0) != 0:
        raise node.unsupported(f"background_id={node.attr('background_id')} (MXNet's kernel assumes class 0)")
    variances = tuple(float(v) for v in node.tuple_attr("variances", (0.1, 0.1, 0.2, 0.2)))
    return node.call("_mx_multibox_detection", *node.inputs[:3], bool(node.attr("clip", True)),
                     float(node.attr("threshold", 0.01)), float(node.attr("nms_threshold", 0.5)),
                     bool(node.attr("force_suppress", False)), variances, node.attr("nms_topk", -1))


@register("_contrib_bipartite_matching")
def _bipartite_matching(node: OpNode) -> str:
    return node.call("_mx_bipartite_matching", node.inputs[0], bool(node.attr("is_ascend", False)),
                     float(node.attr("threshold")), node.attr("topk", -1))
