"""MXNet's products: ``dot``, ``batch_dot`` and ``_linalg_gemm2``."""
from __future__ import annotations

import torch

from migrate.generate.registry import OpNode, register

__all__ = ["mx_dot", "mx_gemm2"]


@register("batch_dot")
def _batch_dot(node: OpNode) -> str:
    a, b = node.inputs[:2]
    a = f"{a}.transpose(-1, -2)" if node.attr("transpose_a", False) else a
    b = f"{b}.transpose(-1, -2)" if node.attr("transpose_b", False) else b
    return f"torch.matmul({a}, {b})"


@register("dot")
def _dot(node: OpNode) -> str:
    return node.call(mx_dot, *node.inputs[:2], node.attr("transpose_a", False), node.attr("transpose_b", False))


def mx_dot(a, b, transpose_a, transpose_b):
    """MXNet's dot: contracts the last axis of ``a`` with the first of ``b`` (transposes reverse all axes)."""
    if transpose_a:
        a = a.permute(*reversed(range(a.dim())))
    if transpose_b:
        b = b.permute(*reversed(range(b.dim())))
    return torch.tensordot(a, b, dims=1)


@register("_linalg_gemm2")
def _linalg_gemm2(node: OpNode) -> str:
    return node.call(mx_gemm2, *node.inputs[:2], bool(node.attr("transpose_a", False)),
                     bool(node.attr("transpose_b", False)), float(node.attr("alpha", 1.0)), node.attr("axis", -2))


def mx_gemm2(a, b, transpose_a, transpose_b, alpha, axis):
    """MXNet's linalg.gemm2: ``alpha * op(a) @ op(b)`` over the leading axes, the matrices' rows on ``axis`` and
    their columns on the last axis (a non-default ``axis`` is swapped with the second-last, and back)."""
    swap = axis % a.dim() != a.dim() - 2
    if swap:
        a, b = a.transpose(axis, -2), b.transpose(axis, -2)
    out = torch.matmul(a.transpose(-1, -2) if transpose_a else a, b.transpose(-1, -2) if transpose_b else b)
    out = out if alpha == 1.0 else out * alpha
    return out.transpose(axis, -2) if swap else out
