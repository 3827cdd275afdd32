"""Translators of MXNet's detection contrib ops: ``_contrib_box_nms``, ``_contrib_box_iou``, ``_contrib_box_decode``,
``_contrib_box_encode``, ``_contrib_MultiBoxPrior``, ``_contrib_MultiBoxDetection`` and
``_contrib_bipartite_matching``.

NMS-like ops keep MXNet's padded fixed-shape outputs (-1 rows), so a generated detector has the same output
shapes as MXNet's for every input. Where MXNet gives an op no gradient (box_iou, box_decode, box_encode,
MultiBoxPrior, MultiBoxDetection, bipartite_matching), the translation gives none either; box_nms passes the
gradient of each kept row to its input row, as MXNet's backward does.

Greedy suppression runs on every box at once: "box j is kept when no kept box before it overlaps it" is iterated
from "every candidate kept"; after t rounds the first t boxes are settled, and the loop stops at the first round
that changes nothing, the greedy result (a few rounds in practice). That stop depends on the data: ``torch.compile``
breaks the graph there and ``torch.export`` cannot trace it (docs/migrate/generation.md).
"""
from __future__ import annotations

import math

import torch

from migrate.generate.ops.indexing import mx_sorted_indices
from migrate.generate.registry import OpNode, register

__all__ = ["mx_box_nms", "mx_box_convert", "mx_greedy_keep", "mx_box_iou", "mx_box_parts", "mx_intersection",
           "mx_box_decode", "mx_box_encode", "mx_multibox_prior", "mx_multibox_detection", "mx_multibox_rows",
           "mx_multibox_suppressed", "mx_bipartite_matching"]


def _format(node: OpNode, key: str, default: str) -> str:
    value = node.attr(key, default)
    if value not in ("corner", "center"):
        raise node.unsupported(f"{key} {value!r} (corner or center)")
    return repr(value)


@register("_contrib_box_nms", "_contrib_box_non_maximum_suppression")
def _box_nms(node: OpNode) -> str:
    return node.call(mx_box_nms, node.inputs[0], float(node.attr("overlap_thresh", 0.5)),
                     float(node.attr("valid_thresh", 0.0)), node.attr("topk", -1), node.attr("coord_start", 2),
                     node.attr("score_index", 1), node.attr("id_index", -1), float(node.attr("background_id", -1)),
                     bool(node.attr("force_suppress", False)), _format(node, "in_format", "corner"),
                     _format(node, "out_format", "corner"))


def mx_box_nms(data, overlap_thresh, valid_thresh, topk, coord_start, score_index, id_index, background_id,
                force_suppress, in_format, out_format):
    """MXNet's contrib.box_nms on data (..., N, W): boxes with score > valid_thresh (and id != background_id),
    the ``topk`` best per batch, greedy suppression at IoU > overlap_thresh (same class unless force_suppress);
    output of data's shape, kept rows first by descending score, the rest -1."""
    x = data.reshape((-1,) + data.shape[-2:])
    b, n, width = x.shape
    k = n if topk < 0 else min(n, topk)
    if k < 1:
        return data * 1.0
    score = x[..., score_index]
    valid = score > valid_thresh
    if id_index >= 0:
        valid = valid & (x[..., id_index] != background_id)
    order = mx_sorted_indices(torch.where(valid, score, torch.full_like(score, -math.inf)), 1, True)[:, :k]
    candidate = valid.gather(1, order)
    boxes = x.gather(1, order[..., None].expand(b, k, width)).detach()
    parts_a = mx_box_parts(boxes[..., None, coord_start:coord_start + 4], in_format)
    parts_b = mx_box_parts(boxes[..., None, :, coord_start:coord_start + 4], in_format)
    inter = mx_intersection(parts_a, parts_b)
    suppresses = inter / (parts_a[4] + parts_b[4] - inter) > overlap_thresh
    if id_index >= 0 and not force_suppress:
        ids = boxes[..., id_index].long()  # MXNet compares the ids as ints
        suppresses = suppresses & (ids[..., :, None] == ids[..., None, :])
    keep = mx_greedy_keep(candidate, suppresses)
    rank = mx_sorted_indices(keep.to(torch.int8), 1, True)
    chosen = order.gather(1, rank)
    rows = x.gather(1, chosen[..., None].expand(b, k, width))
    rows = torch.where(keep.gather(1, rank)[..., None], rows, torch.full_like(rows, -1.0))
    if in_format != out_format:
        rows = mx_box_convert(rows, coord_start, out_format == "center")
    out = torch.cat([rows, torch.full((b, n - k, width), -1.0, dtype=x.dtype, device=x.device)], 1)
    return out.reshape(data.shape)


def mx_box_convert(rows, coord_start, to_center):
    """MXNet's box_nms output conversion between corner and center encodings, applied to rows whose first
    coordinate is >= 0 (as MXNet does); the gradient passes through unchanged (MXNet's backward copies it)."""
    box = rows[..., coord_start:coord_start + 4]
    a0, a1, a2, a3 = box.unbind(-1)
    if to_center:
        new = torch.stack([(a0 + a2) / 2, (a1 + a3) / 2, a2 - a0, a3 - a1], -1)
    else:
        new = torch.stack([a0 - a2 / 2, a1 - a3 / 2, a0 + a2 / 2, a1 + a3 / 2], -1)
    new = torch.where((a0 >= 0)[..., None], new, box)
    box = box + (new - box).detach()
    return torch.cat([rows[..., :coord_start], box, rows[..., coord_start + 4:]], -1)


def mx_greedy_keep(candidate, suppresses):
    """Greedy NMS: ``candidate`` (B, K) in score order, ``suppresses`` (B, K, K) [i, j]: box i removes box j."""
    later = torch.triu(torch.ones(suppresses.shape[-2:], dtype=torch.bool, device=suppresses.device), 1)
    suppresses = suppresses & later
    keep, exporting = candidate, torch.onnx.is_in_onnx_export()
    for _ in range(candidate.shape[-1] + 1):  # an export traces every round: the stop below depends on the data
        new = candidate & ~(keep[..., :, None] & suppresses).any(-2)
        if not exporting and torch.equal(new, keep):
            break
        keep = new
    return keep


@register("_contrib_box_iou")
def _box_iou(node: OpNode) -> str:
    return node.call(mx_box_iou, *node.inputs[:2], _format(node, "format", "corner"))


def mx_box_iou(lhs, rhs, fmt):
    """MXNet's contrib.box_iou: IoU of every lhs box with every rhs box, shape lhs.shape[:-1] + rhs.shape[:-1]
    (no gradient, as in MXNet)."""
    lhs, rhs = lhs.detach(), rhs.detach()
    a = mx_box_parts(lhs.reshape(-1, 1, 4), fmt)
    b = mx_box_parts(rhs.reshape(1, -1, 4), fmt)
    inter = mx_intersection(a, b)
    iou = torch.where(inter <= 0, torch.zeros_like(inter), inter / (a[4] + b[4] - inter))
    return iou.reshape(lhs.shape[:-1] + rhs.shape[:-1])


def mx_box_parts(boxes, fmt):
    """(left, top, right, bottom, area) of boxes (..., 4) as MXNet's bounding-box ops compute them ('corner':
    x1, y1, x2, y2; 'center': x, y, w, h); a box with negative width or height has area 0."""
    a0, a1, a2, a3 = boxes.unbind(-1)
    if fmt == "corner":
        width, height = a2 - a0, a3 - a1
        edges = (a0, a1, a2, a3)
    else:
        width, height = a2, a3
        edges = (a0 - a2 / 2, a1 - a3 / 2, a0 + a2 / 2, a1 + a3 / 2)
    area = torch.where((width < 0) | (height < 0), torch.zeros_like(width), width * height)
    return edges + (area,)


def mx_intersection(a, b):
    """Intersection areas of box parts ``a`` (.., Na, 1) and ``b`` (.., 1, Nb) (each side clipped at 0)."""
    w = (torch.minimum(a[2], b[2]) - torch.maximum(a[0], b[0])).clamp(min=0)
    h = (torch.minimum(a[3], b[3]) - torch.maximum(a[1], b[1])).clamp(min=0)
    return w * h


@register("_contrib_box_decode")
def _box_decode(node: OpNode) -> str:
    stds = tuple(float(node.attr(f"std{i}", 1.0)) for i in range(4))
    return node.call(mx_box_decode, *node.inputs[:2], stds, float(node.attr("clip", -1.0)),
                     _format(node, "format", "center"))


def mx_box_decode(data, anchors, stds, clip, fmt):
    """MXNet's contrib.box_decode: (B, N, 4) offsets over anchors (1, N, 4) ('corner' or 'center' anchors) to
    corner boxes; the width/height offsets are clipped at ``clip`` when it is > 0. No gradient, as in MXNet."""
    data, anchors = data.detach(), anchors.detach().reshape(-1, data.shape[1], 4)[:1]
    a0, a1, a2, a3 = anchors.unbind(-1)
    if fmt == "corner":
        aw, ah = a2 - a0, a3 - a1
        ax, ay = a0 + aw * 0.5, a1 + ah * 0.5
    else:
        ax, ay, aw, ah = a0, a1, a2, a3
    ox = data[..., 0] * stds[0] * aw + ax
    oy = data[..., 1] * stds[1] * ah + ay
    dw, dh = data[..., 2] * stds[2], data[..., 3] * stds[3]
    if clip > 0:
        dw, dh = dw.clamp(max=clip), dh.clamp(max=clip)
    ow, oh = torch.exp(dw) * aw * 0.5, torch.exp(dh) * ah * 0.5
    return torch.stack([ox - ow, oy - oh, ox + ow, oy + oh], -1)


@register("_contrib_box_encode")
def _box_encode(node: OpNode) -> str:
    return node.call(mx_box_encode, *node.inputs[:6])


def mx_box_encode(samples, matches, anchors, refs, means, stds):
    """MXNet's contrib.box_encode: (targets, masks) of anchors (B, N, 4) against their matched refs (B, M, 4)
    for samples > 0.5 (zeros elsewhere). No gradient, as in MXNet."""
    samples, matches, anchors, refs = (t.detach() for t in (samples, matches, anchors, refs))
    means, stds = means.detach(), stds.detach()
    ref = refs.gather(1, matches.long().clamp(0, refs.shape[1] - 1)[..., None].expand(anchors.shape))
    rw, rh = ref[..., 2] - ref[..., 0], ref[..., 3] - ref[..., 1]
    aw, ah = anchors[..., 2] - anchors[..., 0], anchors[..., 3] - anchors[..., 1]
    rx, ry = ref[..., 0] + rw * 0.5, ref[..., 1] + rh * 0.5
    ax, ay = anchors[..., 0] + aw * 0.5, anchors[..., 1] + ah * 0.5
    raw = torch.stack([(rx - ax) / aw, (ry - ay) / ah, torch.log(rw / aw), torch.log(rh / ah)], -1)
    valid = (samples > 0.5)[..., None].expand(anchors.shape)
    targets = torch.where(valid, (raw - means) / stds, torch.zeros_like(raw))
    return targets, valid.to(anchors.dtype)


@register("_contrib_MultiBoxPrior")
def _multibox_prior(node: OpNode) -> str:
    sizes = tuple(float(s) for s in node.tuple_attr("sizes", (1.0,)))
    ratios = tuple(float(r) for r in node.tuple_attr("ratios", (1.0,)))
    steps = tuple(float(s) for s in node.tuple_attr("steps", (-1.0, -1.0)))
    offsets = tuple(float(o) for o in node.tuple_attr("offsets", (0.5, 0.5)))
    return node.call(mx_multibox_prior, node.inputs[0], sizes, ratios, bool(node.attr("clip", False)), steps,
                     offsets)


def mx_multibox_prior(data, sizes, ratios, clip, steps, offsets):
    """MXNet's contrib.MultiBoxPrior: (1, H * W * A, 4) corner anchors per feature-map cell, A = sizes with the
    first ratio, then ratios[1:] with the first size (computed in float32 in MXNet's order)."""
    def f32(v):
        return torch.tensor(v, dtype=torch.float32)
    h, w = data.shape[2], data.shape[3]
    step_y, step_x = (f32(steps[0]), f32(steps[1])) if steps[0] > 0 and steps[1] > 0 else (1 / f32(h), 1 / f32(w))
    r0 = torch.sqrt(f32(ratios[0])) if ratios else f32(1.0)
    pairs = [(f32(s) * h / w * r0 / 2, f32(s) / r0 / 2) for s in sizes]
    pairs += [(f32(sizes[0]) * h / w * torch.sqrt(f32(r)) / 2, f32(sizes[0]) / torch.sqrt(f32(r)) / 2)
              for r in ratios[1:]]
    half_w, half_h = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    cy = (torch.arange(h, dtype=torch.float32) + f32(offsets[0])) * step_y
    cx = (torch.arange(w, dtype=torch.float32) + f32(offsets[1])) * step_x
    cy, cx = cy[:, None, None].expand(h, w, len(pairs)), cx[None, :, None].expand(h, w, len(pairs))
    anchors = torch.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], -1).reshape(1, -1, 4)
    anchors = anchors.clamp(0, 1) if clip else anchors
    return anchors.to(dtype=data.dtype, device=data.device)


@register("_contrib_MultiBoxDetection")
def _multibox_detection(node: OpNode) -> str:
    if node.attr("background_id", 0) != 0:
        raise node.unsupported(f"background_id={node.attr('background_id')} (MXNet's kernel assumes class 0)")
    variances = tuple(float(v) for v in node.tuple_attr("variances", (0.1, 0.1, 0.2, 0.2)))
    return node.call(mx_multibox_detection, *node.inputs[:3], bool(node.attr("clip", True)),
                     float(node.attr("threshold", 0.01)), float(node.attr("nms_threshold", 0.5)),
                     bool(node.attr("force_suppress", False)), variances, node.attr("nms_topk", -1))


def mx_multibox_detection(cls_prob, loc_pred, anchor, clip, threshold, nms_threshold, force_suppress, variances,
                           nms_topk):
    """MXNet's contrib.MultiBoxDetection: rows [class id, score, x1, y1, x2, y2] per anchor (B, A, 6). Valid
    rows (best non-background score >= threshold) first in anchor order, sorted by score when NMS runs; the best
    ``nms_topk`` go through greedy NMS (IoU >= nms_threshold, same class unless force_suppress); a suppressed or
    cut row keeps its values with id -1; the rest of the rows are -1. No gradient, as in MXNet."""
    rows = mx_multibox_rows(cls_prob.detach(), loc_pred.detach(), anchor.detach(), clip, threshold, variances)
    b, a = rows.shape[:2]
    valid = rows[..., 0] >= 0
    order = mx_sorted_indices(valid.to(torch.int8), 1, True)
    rows, valid = rows.gather(1, order[..., None].expand(b, a, 6)), valid.gather(1, order)
    rows = torch.where(valid[..., None], rows, torch.full_like(rows, -1.0))
    if nms_threshold <= 0 or nms_threshold > 1:
        return rows
    count = valid.sum(1, keepdim=True)
    by_score = mx_sorted_indices(torch.where(valid, rows[..., 1], torch.full_like(rows[..., 1], -math.inf)), 1,
                                  True)
    ranked = rows.gather(1, by_score[..., None].expand(b, a, 6))
    position = torch.arange(a, device=rows.device)[None, :]
    nkeep = count.clamp(max=nms_topk) if nms_topk > 0 else count
    cut = torch.cat([torch.full_like(rows[..., :1], -1.0), rows[..., 1:]], -1)  # id -1, values kept
    rows = torch.where((position < nkeep)[..., None], ranked, torch.where((position < count)[..., None], cut, rows))
    dropped = mx_multibox_suppressed(rows, position < nkeep, nms_threshold, force_suppress)
    return torch.cat([torch.where(dropped, torch.full_like(rows[..., 0], -1.0), rows[..., 0])[..., None],
                      rows[..., 1:]], -1)


def mx_multibox_rows(cls_prob, loc_pred, anchor, clip, threshold, variances):
    """MultiBoxDetection's rows [class id, score, x1, y1, x2, y2] per anchor, in anchor order: the best
    non-background class (id -1 below ``threshold``) and the anchor moved by its offsets (MXNet's float order)."""
    b, _, a = cls_prob.shape
    best = cls_prob[:, 1:].argmax(1, keepdim=True)
    score = cls_prob[:, 1:].gather(1, best)[:, 0]
    cls_id = torch.where(score < threshold, torch.zeros_like(score), best[:, 0].to(score.dtype) + 1) - 1
    loc = loc_pred.reshape(b, a, 4)
    al, at, ar, ab = anchor.reshape(-1, a, 4)[:1].unbind(-1)
    aw, ah, ax, ay = ar - al, ab - at, (al + ar) / 2, (at + ab) / 2
    ox, oy = loc[..., 0] * variances[0] * aw + ax, loc[..., 1] * variances[1] * ah + ay
    ow, oh = torch.exp(loc[..., 2] * variances[2]) * aw / 2, torch.exp(loc[..., 3] * variances[3]) * ah / 2
    boxes = torch.stack([ox - ow, oy - oh, ox + ow, oy + oh], -1)
    boxes = boxes.clamp(0, 1) if clip else boxes
    return torch.cat([cls_id[..., None], score[..., None], boxes], -1)


def mx_multibox_suppressed(rows, candidate, nms_threshold, force_suppress):
    """Which of ``rows`` (sorted by score) MultiBoxDetection's NMS removes: IoU >= nms_threshold with a kept
    earlier row (areas as given, IoU 0 where the union is <= 0), of the same class unless force_suppress."""
    box = rows[..., 2:6]
    area = (box[..., 2] - box[..., 0]) * (box[..., 3] - box[..., 1])
    w = (torch.minimum(box[..., :, None, 2], box[..., None, :, 2]) -
         torch.maximum(box[..., :, None, 0], box[..., None, :, 0])).clamp(min=0)
    h = (torch.minimum(box[..., :, None, 3], box[..., None, :, 3]) -
         torch.maximum(box[..., :, None, 1], box[..., None, :, 1])).clamp(min=0)
    union = area[..., :, None] + area[..., None, :] - w * h
    suppresses = torch.where(union <= 0, torch.zeros_like(union), w * h / union) >= nms_threshold
    if not force_suppress:
        suppresses = suppresses & (rows[..., :, None, 0] == rows[..., None, :, 0])
    return candidate & ~mx_greedy_keep(candidate, suppresses)


@register("_contrib_bipartite_matching")
def _bipartite_matching(node: OpNode) -> str:
    return node.call(mx_bipartite_matching, node.inputs[0], bool(node.attr("is_ascend", False)),
                     float(node.attr("threshold")), node.attr("topk", -1))


def mx_bipartite_matching(data, is_ascend, threshold, topk):
    """MXNet's contrib.bipartite_matching on scores (..., N, M): greedy, best score first (ties: first in
    row-major order); stops at the first score past ``threshold``; ``topk`` > 0 stops after topk + 1 matches (as
    MXNet's loop does). Returns (row -> column, column -> row) markers, -1 where unmatched."""
    x = data.detach().reshape((-1,) + data.shape[-2:])
    b, n, m = x.shape
    flat = x.reshape(b, -1)
    order = mx_sorted_indices(flat, 1, not is_ascend)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(n * m, device=x.device).expand(b, -1))
    rows = torch.full((b, n), -1.0, dtype=x.dtype, device=x.device)
    cols = torch.full((b, m), -1.0, dtype=x.dtype, device=x.device)
    active = torch.ones(b, dtype=torch.bool, device=x.device)
    limit = min(n, m) if topk <= 0 else min(n, m, topk + 1)
    batch = torch.arange(b, device=x.device)
    for _ in range(limit):
        free = ((rows < 0)[:, :, None] & (cols < 0)[:, None, :]).reshape(b, -1)
        pick = torch.where(free, rank, torch.full_like(rank, n * m)).argmin(1)
        value = flat[batch, pick]
        good = value < threshold if is_ascend else value > threshold
        active = active & free[batch, pick] & good
        r, c = pick // m, pick % m
        rows[batch[active], r[active]] = c[active].to(x.dtype)
        cols[batch[active], c[active]] = r[active].to(x.dtype)
    return rows.reshape(data.shape[:-1]), cols.reshape(data.shape[:-2] + (m,))
