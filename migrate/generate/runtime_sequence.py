"""Runtime helpers of MXNet's sequence and attention ops for generated modules (``SequenceMask``,
``SequenceReverse``, ``SequenceLast``, ``softmax`` with a length, the interleaved attention matmuls).

Copied into generated files like those in ``runtime`` (each uses only ``torch``, ``F`` and ``math``).
MXNet's interleaved layout: a projection of shape (T, N, 3 * H * D) holds, per head, the query, key and value
rows next to each other ((T, N, H, 3, D)); the encoder-decoder variant holds keys and values so ((T, N, H, 2, D)).
Attention scores are (N * H, T_query, T_key), batch-major; the query-key product is scaled by 1 / sqrt(D).
"""
import math

import torch
import torch.nn.functional as F  # noqa: F401

__all__ = ["SEQUENCE_HELPERS"]


def _mx_steps_mask(length, steps, axis, ndim):
    """A boolean mask, True at positions < length along ``axis`` (0: (T, N, ...), 1: (N, T, ...)), for ``ndim``."""
    position = torch.arange(steps, device=length.device)
    keep = position[:, None] < length.reshape(1, -1) if axis == 0 else position[None, :] < length.reshape(-1, 1)
    return keep.reshape(keep.shape + (1,) * (ndim - 2))


def _mx_sequence_mask(x, length, axis, value):
    """MXNet's SequenceMask: positions at or past each sequence's length (along ``axis`` 0 or 1) become ``value``."""
    if length is None:
        return x
    keep = _mx_steps_mask(length, x.shape[axis], axis, x.dim())
    return torch.where(keep, x, torch.full_like(x, value))


def _mx_sequence_reverse(x, length):
    """MXNet's SequenceReverse on (T, N, ...): each sequence's first ``length`` steps reversed, padding in place."""
    steps = x.shape[0]
    position = torch.arange(steps, device=x.device)[:, None]
    length = torch.full((x.shape[1],), steps, device=x.device) if length is None else length.long().reshape(1, -1)
    source = torch.where(position < length, length - 1 - position, position)
    source = source.reshape(source.shape + (1,) * (x.dim() - 2)).expand(x.shape)
    return torch.gather(x, 0, source)


def _mx_sequence_last(x, length, axis):
    """MXNet's SequenceLast: each sequence's step ``length - 1`` along ``axis`` (0 or 1); all steps: the last."""
    steps = x.shape[axis]
    batch = x.shape[1 - axis]
    index = (torch.full((batch,), steps, device=x.device) if length is None else length.long()) - 1
    index = index.clamp(0, steps - 1).reshape((1, -1) if axis == 0 else (-1, 1))
    index = index.reshape(index.shape + (1,) * (x.dim() - 2)).expand((1,) + x.shape[1:] if axis == 0 else
                                                                       (x.shape[0], 1) + x.shape[2:])
    return torch.gather(x, axis, index).squeeze(axis)


def _mx_masked_softmax(x, length, axis, temperature):
    """MXNet's softmax with ``use_length``: softmax over the first ``length`` entries along ``axis``, 0 after them
    (``length`` has ``x``'s shape without ``axis``)."""
    axis = axis % x.dim()
    position = torch.arange(x.shape[axis], device=x.device).reshape([-1] + [1] * (x.dim() - 1 - axis))
    keep = position < length.long().unsqueeze(axis)
    if temperature is not None and temperature != 1.0:
        x = x / temperature
    masked = x.masked_fill(~keep, torch.finfo(x.dtype).min)
    return torch.softmax(masked, axis).masked_fill(~keep, 0.0)


def _mx_heads(x, heads, parts, part):
    """Part ``part`` of an interleaved projection (T, N, H * parts * D) as (N * H, T, D)."""
    steps, batch = x.shape[:2]
    x = x.reshape(steps, batch, heads, parts, -1)[:, :, :, part]
    return x.permute(1, 2, 0, 3).reshape(batch * heads, steps, -1)


def _mx_merge_heads(x, heads):
    """(N * H, T, D) back to MXNet's (T, N, H * D)."""
    batch_heads, steps, depth = x.shape
    return x.reshape(batch_heads // heads, heads, steps, depth).permute(2, 0, 1, 3).reshape(steps, -1, heads * depth)


def _mx_selfatt_qk(qkv, heads):
    """MXNet's contrib.interleaved_matmul_selfatt_qk: scaled query-key scores (N * H, T, T)."""
    q, k = _mx_heads(qkv, heads, 3, 0), _mx_heads(qkv, heads, 3, 1)
    return torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(q.shape[-1]))


def _mx_selfatt_valatt(qkv, attention, heads):
    """MXNet's contrib.interleaved_matmul_selfatt_valatt: attention-weighted values as (T, N, H * D)."""
    return _mx_merge_heads(torch.matmul(attention, _mx_heads(qkv, heads, 3, 2)), heads)


def _mx_encdec_qk(queries, keys_values, heads):
    """MXNet's contrib.interleaved_matmul_encdec_qk: queries (Tq, N, H * D), interleaved keys/values (Tk, N,
    2 * H * D) -> scaled scores (N * H, Tq, Tk)."""
    q, k = _mx_heads(queries, heads, 1, 0), _mx_heads(keys_values, heads, 2, 0)
    return torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(q.shape[-1]))


def _mx_encdec_valatt(keys_values, attention, heads):
    """MXNet's contrib.interleaved_matmul_encdec_valatt: attention-weighted values as (Tq, N, H * D)."""
    return _mx_merge_heads(torch.matmul(attention, _mx_heads(keys_values, heads, 2, 1)), heads)


SEQUENCE_HELPERS = [_mx_steps_mask, _mx_sequence_mask, _mx_sequence_reverse, _mx_sequence_last, _mx_masked_softmax,
                    _mx_heads, _mx_merge_heads, _mx_selfatt_qk, _mx_selfatt_valatt, _mx_encdec_qk,
                    _mx_encdec_valatt]
