"""Translators of MXNet's sequence and attention ops: ``SequenceMask``, ``SequenceReverse``, ``SequenceLast``, the
interleaved attention matmuls GluonNLP's BERT/RoBERTa use (``_contrib_interleaved_matmul_selfatt_qk``/``valatt``,
``..._encdec_qk``/``valatt``); the masked softmax (``softmax`` with ``use_length``) lives with ``softmax`` in
``activations``.

MXNet's interleaved layout: a projection of shape (T, N, 3 * H * D) holds, per head, the query, key and value
rows next to each other ((T, N, H, 3, D)); the encoder-decoder variant holds keys and values so ((T, N, H, 2, D)).
Attention scores are (N * H, T_query, T_key), batch-major; the query-key product is scaled by 1 / sqrt(D).
"""
from __future__ import annotations

import math

import torch

from migrate.generate.registry import OpNode, register

__all__ = ["mx_sequence_mask", "mx_steps_mask", "mx_sequence_reverse", "mx_sequence_last", "mx_selfatt_qk",
           "mx_selfatt_valatt", "mx_encdec_qk", "mx_encdec_valatt", "mx_heads", "mx_merge_heads"]


def _length(node: OpNode):
    return node.optional_input(1) if node.attr("use_sequence_length", False) else None


def _axis(node: OpNode) -> int:
    axis = node.attr("axis", 0)
    if axis not in (0, 1):
        raise node.unsupported(f"axis={axis} (MXNet supports 0 and 1)")
    return axis


@register("SequenceMask")
def _sequence_mask(node: OpNode) -> str:
    length = _length(node)
    if length is None:
        return node.inputs[0]
    return node.call(mx_sequence_mask, node.inputs[0], length, _axis(node), float(node.attr("value", 0.0)))


def mx_sequence_mask(x, length, axis, value):
    """MXNet's SequenceMask: positions at or past each sequence's length (along ``axis`` 0 or 1) become ``value``."""
    if length is None:
        return x
    keep = mx_steps_mask(length, x.shape[axis], axis, x.dim())
    return torch.where(keep, x, torch.full_like(x, value))


def mx_steps_mask(length, steps, axis, ndim):
    """A boolean mask, True at positions < length along ``axis`` (0: (T, N, ...), 1: (N, T, ...)), for ``ndim``."""
    position = torch.arange(steps, device=length.device)
    keep = position[:, None] < length.reshape(1, -1) if axis == 0 else position[None, :] < length.reshape(-1, 1)
    return keep.reshape(keep.shape + (1,) * (ndim - 2))


@register("SequenceReverse")
def _sequence_reverse(node: OpNode) -> str:
    if node.attr("axis", 0) != 0:
        raise node.unsupported(f"axis={node.attr('axis')} (MXNet supports 0)")
    length = _length(node)
    if length is None:
        return f"torch.flip({node.inputs[0]}, (0,))"
    return node.call(mx_sequence_reverse, node.inputs[0], length)


def mx_sequence_reverse(x, length):
    """MXNet's SequenceReverse on (T, N, ...): each sequence's first ``length`` steps reversed, padding in place."""
    steps = x.shape[0]
    position = torch.arange(steps, device=x.device)[:, None]
    length = torch.full((x.shape[1],), steps, device=x.device) if length is None else length.long().reshape(1, -1)
    source = torch.where(position < length, length - 1 - position, position)
    source = source.reshape(source.shape + (1,) * (x.dim() - 2)).expand(x.shape)
    return torch.gather(x, 0, source)


@register("SequenceLast")
def _sequence_last(node: OpNode) -> str:
    return node.call(mx_sequence_last, node.inputs[0], _length(node), _axis(node))


def mx_sequence_last(x, length, axis):
    """MXNet's SequenceLast: each sequence's step ``length - 1`` along ``axis`` (0 or 1); all steps: the last."""
    steps = x.shape[axis]
    batch = x.shape[1 - axis]
    index = (torch.full((batch,), steps, device=x.device) if length is None else length.long()) - 1
    index = index.clamp(0, steps - 1).reshape((1, -1) if axis == 0 else (-1, 1))
    index = index.reshape(index.shape + (1,) * (x.dim() - 2)).expand((1,) + x.shape[1:] if axis == 0 else
                                                                       (x.shape[0], 1) + x.shape[2:])
    return torch.gather(x, axis, index).squeeze(axis)


@register("_contrib_interleaved_matmul_selfatt_qk")
def _selfatt_qk(node: OpNode) -> str:
    return node.call(mx_selfatt_qk, node.inputs[0], node.attr("heads"))


def mx_selfatt_qk(qkv, heads):
    """MXNet's contrib.interleaved_matmul_selfatt_qk: scaled query-key scores (N * H, T, T)."""
    q, k = mx_heads(qkv, heads, 3, 0), mx_heads(qkv, heads, 3, 1)
    return torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(q.shape[-1]))


@register("_contrib_interleaved_matmul_selfatt_valatt")
def _selfatt_valatt(node: OpNode) -> str:
    return node.call(mx_selfatt_valatt, *node.inputs[:2], node.attr("heads"))


def mx_selfatt_valatt(qkv, attention, heads):
    """MXNet's contrib.interleaved_matmul_selfatt_valatt: attention-weighted values as (T, N, H * D)."""
    return mx_merge_heads(torch.matmul(attention, mx_heads(qkv, heads, 3, 2)), heads)


@register("_contrib_interleaved_matmul_encdec_qk")
def _encdec_qk(node: OpNode) -> str:
    return node.call(mx_encdec_qk, *node.inputs[:2], node.attr("heads"))


def mx_encdec_qk(queries, keys_values, heads):
    """MXNet's contrib.interleaved_matmul_encdec_qk: queries (Tq, N, H * D), interleaved keys/values (Tk, N,
    2 * H * D) -> scaled scores (N * H, Tq, Tk)."""
    q, k = mx_heads(queries, heads, 1, 0), mx_heads(keys_values, heads, 2, 0)
    return torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(q.shape[-1]))


@register("_contrib_interleaved_matmul_encdec_valatt")
def _encdec_valatt(node: OpNode) -> str:
    return node.call(mx_encdec_valatt, *node.inputs[:2], node.attr("heads"))


def mx_encdec_valatt(keys_values, attention, heads):
    """MXNet's contrib.interleaved_matmul_encdec_valatt: attention-weighted values as (Tq, N, H * D)."""
    return mx_merge_heads(torch.matmul(attention, mx_heads(keys_values, heads, 2, 1)), heads)


def mx_heads(x, heads, parts, part):
    """Part ``part`` of an interleaved projection (T, N, H * parts * D) as (N * H, T, D)."""
    steps, batch = x.shape[:2]
    x = x.reshape(steps, batch, heads, parts, -1)[:, :, :, part]
    return x.permute(1, 2, 0, 3).reshape(batch * heads, steps, -1)


def mx_merge_heads(x, heads):
    """(N * H, T, D) back to MXNet's (T, N, H * D)."""
    batch_heads, steps, depth = x.shape
    return x.reshape(batch_heads // heads, heads, steps, depth).permute(2, 0, 1, 3).reshape(steps, -1, heads * depth)
