"""Compiled CPU kernels of the fast update path: one pass over memory per launch, MXNet 1.9.1's arithmetic.

Imported lazily by ``gluon_lr._fused`` (the first time a CPU table is updated), so ``import gluon_lr`` does not
import numba. Each kernel reproduces one MXNet operator of ``src/operator/optimizer_op-inl.h`` operation by operation,
in its order and in the data's precision (float32 in float32, float64 in float64; no fastmath, so LLVM neither
reassociates nor contracts ``a * b + c`` into an FMA, and every result is IEEE-rounded as MXNet's binary rounds it):

- ``sgd``: ``MultiSGDKernel`` without momentum (stock ``SGD`` always aggregates dense updates:
  ``multi_sgd_update``): ``mom = 0 * 0 - lr * wd * w - lr * rescale * g; w = w + mom``;
- ``sgd_single``: ``SGDKernel`` (``sgd_update``, what ``NAG`` without momentum runs):
  ``w = (1 - lr * wd) * w - (lr * rescale) * g``;
- ``sgd_mom``: ``SGDMomKernel`` = ``MultiSGDKernel`` with momentum: ``m = mu * m - lr * wd * w - lr * rescale * g;
  w = w + m``;
- ``nag_mom``: ``NAGMomKernel``: ``m = mu * m; w = w - m + (mu + 1) * (m - lr * (rescale * g + wd * w));
  m = m - lr * (rescale * g + wd * w_new)`` (MXNet writes w in place first, so the state update reads the new w);
- ``adam``: ``AdamUpdateKernel``: ``x = g * rescale + w * wd; m = b1 * m + (1 - b1) * x;
  v = b2 * v + (1 - b2) * x * x; w = w - lr * m / (sqrt(v) + eps)``.

Where clipping is on, ``clip`` replaces ``rescale * g`` (``x`` for adam) by MXNet's ``clip::Map``: NaN passes.
Constants arrive as an array of the data's dtype (values already rounded to float32 as MXNet's float parameters are;
``1 - b1`` and ``mu + 1`` computed in the data's dtype, as the kernels do).

Every kernel walks a table of segments: row ``s`` of ``addresses`` holds the addresses of segment ``s`` in the
weight, the gradient and each state array (in that order; every array is a separate MXNet NDArray, so no two rows
need share a buffer), ``lengths[s]`` its element count, ``lrs[s]``/``wds[s]`` its lr and wd. The caller makes the
addresses valid for the call (``gluon_lr._fused.table.Table.addresses``). A kernel releases the GIL, so ``_fused``
runs one call per core on disjoint segments (no numba threading layer is involved: nothing to clash with MXNet's
OpenMP runtime or with ``fork``). ``cache=True`` keeps the machine code next to this file (or, where that directory
is read-only, in numba's per-user cache directory).
"""
import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

_JIT = {"nogil": True, "error_model": "numpy", "boundscheck": False}


def _jit(function):
    """``numba.njit`` with the on-disk cache, or without it where numba finds no writable cache directory (then every
    process compiles the kernels it calls, about a second each)."""
    try:
        return numba.njit(cache=True, **_JIT)(function)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available for file ..."
        return numba.njit(**_JIT)(function)


@intrinsic
def _pointer_to(typingctx, address, like):
    """A pointer to elements of ``like``'s dtype at the integer ``address`` (LLVM ``inttoptr``)."""
    signature = types.CPointer(like.dtype)(address, like)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))
    return signature, codegen


@numba.njit(inline="always")
def _at(address, size, like):
    """The ``size`` elements at ``address`` as a 1-D array of ``like``'s dtype (no copy)."""
    return numba.carray(_pointer_to(address, like), size)


@numba.njit(inline="always")
def _clip(x, bound):
    """``mshadow_op::clip::Map``: bound above, -bound below, anything else (NaN too) unchanged."""
    if x > bound:
        return bound
    if x < -bound:
        return -bound
    return x


@_jit
def sgd(addresses, lengths, lrs, wds, consts, use_clip):
    """``MultiSGDKernel`` without momentum; rows (weight, grad); consts = (rescale, clip, zero)."""
    rescale, bound, zero = consts[0], consts[1], consts[2]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        lr_wd, lr_rescale = lr * wd, lr * rescale
        ws, gs = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs)
        if use_clip:
            for i in range(n):
                ws[i] = ws[i] + (zero * zero - lr_wd * ws[i] - lr * _clip(rescale * gs[i], bound))
        else:
            for i in range(n):
                ws[i] = ws[i] + (zero * zero - lr_wd * ws[i] - lr_rescale * gs[i])


@_jit
def sgd_single(addresses, lengths, lrs, wds, consts, use_clip):
    """``SGDKernel`` (``sgd_update``); rows (weight, grad); consts = (rescale, clip, one)."""
    rescale, bound, one = consts[0], consts[1], consts[2]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        keep, lr_rescale = one - lr * wd, lr * rescale
        ws, gs = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs)
        if use_clip:
            for i in range(n):
                ws[i] = keep * ws[i] - lr * _clip(rescale * gs[i], bound)
        else:
            for i in range(n):
                ws[i] = keep * ws[i] - lr_rescale * gs[i]


@_jit
def sgd_mom(addresses, lengths, lrs, wds, consts, use_clip):
    """``SGDMomKernel`` / ``MultiSGDKernel`` with momentum; rows (weight, grad, mom); consts = (rescale, clip, mu)."""
    rescale, bound, mu = consts[0], consts[1], consts[2]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        lr_wd, lr_rescale = lr * wd, lr * rescale
        ws, gs, ms = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs), _at(addresses[s, 2], n, lrs)
        if use_clip:
            for i in range(n):
                mom = mu * ms[i] - lr_wd * ws[i] - lr * _clip(rescale * gs[i], bound)
                ms[i] = mom
                ws[i] = ws[i] + mom
        else:
            for i in range(n):
                mom = mu * ms[i] - lr_wd * ws[i] - lr_rescale * gs[i]
                ms[i] = mom
                ws[i] = ws[i] + mom


@_jit
def nag_mom(addresses, lengths, lrs, wds, consts, use_clip):
    """``NAGMomKernel``; rows (weight, grad, mom); consts = (rescale, clip, momentum, momentum + 1)."""
    rescale, bound, mu, mu_1 = consts[0], consts[1], consts[2], consts[3]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        ws, gs, ms = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs), _at(addresses[s, 2], n, lrs)
        if use_clip:
            for i in range(n):
                grad = _clip(rescale * gs[i], bound)
                mom = mu * ms[i]
                new = ws[i] - mom + mu_1 * (mom - lr * (grad + wd * ws[i]))
                ws[i] = new
                ms[i] = mom - lr * (grad + wd * new)
        else:
            for i in range(n):
                grad = rescale * gs[i]
                mom = mu * ms[i]
                new = ws[i] - mom + mu_1 * (mom - lr * (grad + wd * ws[i]))
                ws[i] = new
                ms[i] = mom - lr * (grad + wd * new)


@_jit
def adam(addresses, lengths, lrs, wds, consts, use_clip):
    """``AdamUpdateKernel`` (lr bias-corrected by the caller); rows (weight, grad, mean, var);
    consts = (rescale, clip, b1, b2, 1 - b1, 1 - b2, eps)."""
    rescale, bound, b1, b2, one_b1, one_b2, eps = consts[0], consts[1], consts[2], consts[3], consts[4], consts[5], \
        consts[6]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        ws, gs = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs)
        ms, vs = _at(addresses[s, 2], n, lrs), _at(addresses[s, 3], n, lrs)
        if use_clip:
            for i in range(n):
                x = _clip(gs[i] * rescale + ws[i] * wd, bound)
                mean = b1 * ms[i] + one_b1 * x
                var = b2 * vs[i] + one_b2 * x * x
                ms[i] = mean
                vs[i] = var
                ws[i] = ws[i] - lr * mean / (np.sqrt(var) + eps)
        else:
            for i in range(n):
                x = gs[i] * rescale + ws[i] * wd
                mean = b1 * ms[i] + one_b1 * x
                var = b2 * vs[i] + one_b2 * x * x
                ms[i] = mean
                vs[i] = var
                ws[i] = ws[i] - lr * mean / (np.sqrt(var) + eps)
