"""MXNet's products and its ``linalg`` family: ``dot``, ``batch_dot``, ``diag`` and the ``_linalg_*`` ops ``gemm``,
``gemm2``, ``potrf``, ``potri``, ``trsm``, ``trmm``, ``syrk``, ``sumlogdiag``, ``extractdiag``, ``makediag``,
``extracttrian``, ``maketrian``, ``inverse``, ``det``, ``slogdet``, ``gelqf`` and ``syevd``.

The ``_linalg_*`` ops work on the last two axes and batch over the leading ones, as MXNet's do, with torch's own
LAPACK-backed ops: a triangular operand is read from its lower triangle (``lower=False``: its upper one) and the
other triangle gets no gradient, as in MXNet; ``transpose`` applies op(A) = A^T, ``rightside`` multiplies or solves
from the right, ``alpha`` scales the result. An upper triangle is stored as MXNet stores it: ``extracttrian`` lists
the lower triangle row by row and the upper one column by column (the lower triangle of A^T).
"""
from __future__ import annotations

import math

import torch

from migrate.generate.registry import OpNode, register

__all__ = ["mx_dot", "mx_gemm2", "mx_gemm",
           "mx_trsm", "mx_trmm", "mx_extracttrian", "mx_maketrian", "mx_gelqf", "mx_syevd"]


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


@register("_linalg_gemm")
def _linalg_gemm(node: OpNode) -> str:
    return node.call(mx_gemm, *node.inputs[:3], bool(node.attr("transpose_a", False)),
                     bool(node.attr("transpose_b", False)), float(node.attr("alpha", 1.0)),
                     float(node.attr("beta", 1.0)), node.attr("axis", -2))


def mx_gemm(a, b, c, transpose_a, transpose_b, alpha, beta, axis):
    """MXNet's linalg.gemm: ``alpha * op(a) @ op(b) + beta * c``, laid out as ``mx_gemm2``'s result."""
    return mx_gemm2(a, b, transpose_a, transpose_b, alpha, axis) + (c if beta == 1.0 else c * beta)


def _triangle(node: OpNode) -> tuple:
    """``(transpose, rightside, lower, alpha)`` of trsm/trmm."""
    return (bool(node.attr("transpose", False)), bool(node.attr("rightside", False)), bool(node.attr("lower", True)),
            float(node.attr("alpha", 1.0)))


@register("_linalg_potrf")
def _linalg_potrf(node: OpNode) -> str:
    return f"torch.linalg.cholesky({node.inputs[0]}, upper={not node.attr('lower', True)})"


@register("_linalg_potri")
def _linalg_potri(node: OpNode) -> str:
    """The inverse of A = L L^T from its Cholesky factor L (only L's triangle read and given a gradient)."""
    lower = bool(node.attr("lower", True))
    a = f"{node.inputs[0]}.{'tril' if lower else 'triu'}()"
    return f"torch.cholesky_inverse({a}, upper={not lower})"


@register("_linalg_trsm")
def _linalg_trsm(node: OpNode) -> str:
    return node.call(mx_trsm, *node.inputs[:2], *_triangle(node))


def mx_trsm(a, b, transpose, rightside, lower, alpha):
    """MXNet's linalg.trsm: X with op(a) X = alpha b (X op(a) = alpha b where ``rightside``), ``a`` triangular."""
    if transpose:
        a, lower = a.transpose(-1, -2), not lower
    return torch.linalg.solve_triangular(a, b if alpha == 1.0 else b * alpha, upper=not lower, left=not rightside)


@register("_linalg_trmm")
def _linalg_trmm(node: OpNode) -> str:
    return node.call(mx_trmm, *node.inputs[:2], *_triangle(node))


def mx_trmm(a, b, transpose, rightside, lower, alpha):
    """MXNet's linalg.trmm: alpha op(a) b (alpha b op(a) where ``rightside``), ``a`` read as triangular."""
    a = a.tril() if lower else a.triu()
    a = a.transpose(-1, -2) if transpose else a
    out = torch.matmul(b, a) if rightside else torch.matmul(a, b)
    return out if alpha == 1.0 else out * alpha


@register("_linalg_syrk")
def _linalg_syrk(node: OpNode) -> str:
    a, alpha = node.inputs[0], float(node.attr("alpha", 1.0))
    out = (f"torch.matmul({a}.transpose(-1, -2), {a})" if node.attr("transpose", False)
           else f"torch.matmul({a}, {a}.transpose(-1, -2))")
    return out if alpha == 1.0 else f"{out} * {alpha}"


@register("_linalg_sumlogdiag")
def _linalg_sumlogdiag(node: OpNode) -> str:
    return f"{node.inputs[0]}.diagonal(0, -2, -1).log().sum(-1)"


@register("_linalg_extractdiag")
def _linalg_extractdiag(node: OpNode) -> str:
    return f"{node.inputs[0]}.diagonal({int(node.attr('offset', 0))}, -2, -1)"


@register("_linalg_makediag")
def _linalg_makediag(node: OpNode) -> str:
    return f"torch.diag_embed({node.inputs[0]}, {int(node.attr('offset', 0))})"


def _trian(node: OpNode) -> tuple:
    """``(offset, lower)``: an offset other than 0 picks the triangle by its sign."""
    offset = int(node.attr("offset", 0))
    return offset, offset < 0 or (offset == 0 and bool(node.attr("lower", True)))


@register("_linalg_extracttrian")
def _linalg_extracttrian(node: OpNode) -> str:
    return node.call(mx_extracttrian, node.inputs[0], *_trian(node))


def mx_extracttrian(a, offset, lower):
    """MXNet's linalg.extracttrian: the triangle at ``offset`` of each matrix as a vector (lower: row by row; upper:
    column by column)."""
    n = a.shape[-1]
    rows, cols = torch.tril_indices(n, n, offset if lower else -offset, device=a.device)
    return a[..., rows, cols] if lower else a[..., cols, rows]


@register("_linalg_maketrian")
def _linalg_maketrian(node: OpNode) -> str:
    return node.call(mx_maketrian, node.inputs[0], *_trian(node))


def mx_maketrian(v, offset, lower):
    """MXNet's linalg.maketrian: square matrices holding each vector of ``v`` in the triangle at ``offset``, as
    ``mx_extracttrian`` reads it (a vector of n (n + 1) / 2 values gives n + |offset| rows), zeros elsewhere."""
    n = int(round((math.sqrt(8 * v.shape[-1] + 1) - 1) / 2))
    size = n + abs(offset)
    rows, cols = torch.tril_indices(size, size, offset if lower else -offset, device=v.device)
    out = v.new_zeros(v.shape[:-1] + (size, size))
    out[..., rows, cols] = v
    return out if lower else out.transpose(-1, -2)


_TORCH_LINALG = {"_linalg_inverse": "inv", "_linalg_det": "det", "_linalg_slogdet": "slogdet"}
"""The ops torch.linalg computes as MXNet does (slogdet: sign and log |det|, two outputs)."""


@register(*_TORCH_LINALG)
def _linalg_torch(node: OpNode) -> str:
    return f"torch.linalg.{_TORCH_LINALG[node.op]}({node.inputs[0]})"


@register("_linalg_gelqf")
def _linalg_gelqf(node: OpNode) -> str:
    return node.call(mx_gelqf, node.inputs[0])


def mx_gelqf(a):
    """MXNet's linalg.gelqf: (Q, L) with a = L Q, Q's rows orthonormal, L lower triangular: the QR factorization of
    a^T, transposed (LAPACK's gelqf reflects a's rows as its geqrf reflects the columns of a^T: the same signs)."""
    q, r = torch.linalg.qr(a.transpose(-1, -2))
    return q.transpose(-1, -2), r.transpose(-1, -2)


@register("_linalg_syevd")
def _linalg_syevd(node: OpNode) -> str:
    return node.call(mx_syevd, node.inputs[0])


def mx_syevd(a):
    """MXNet's linalg.syevd: (U, L) with a = U^T diag(L) U, the eigenvalues L ascending and the eigenvectors the rows
    of U, each signed as MXNet signs them: its entry of largest magnitude positive."""
    values, vectors = torch.linalg.eigh(a)
    u = vectors.transpose(-1, -2)
    return u * torch.sign(u.gather(-1, u.abs().argmax(-1, keepdim=True))), values


@register("diag")
def _diag(node: OpNode) -> str:
    """MXNet's diag: a 1-D input becomes a matrix with it on diagonal ``k``; a larger one gives its diagonal ``k``
    between ``axis1`` and ``axis2`` (as the last axis)."""
    x, k = node.inputs[0], int(node.attr("k", 0))
    if node.in_shapes and node.in_shapes[0] is not None and len(node.in_shapes[0]) == 1:
        return f"torch.diag({x}, {k})"
    return f"{x}.diagonal({k}, {int(node.attr('axis1', 0))}, {int(node.attr('axis2', 1))})"
