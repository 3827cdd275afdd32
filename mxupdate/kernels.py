"""MXNet 1.9.1's optimizer kernels, compiled with numba: one pass over memory per launch, operation by operation.

Imported on first use (``import mxupdate`` does not import numba). Each kernel reproduces one MXNet operator of
``src/operator/optimizer_op-inl.h`` (or ``contrib/multi_lamb.cc``, ``contrib/multi_sum_sq.cc``), or the NDArray
operations of one of MXNet's python optimizers (``mxnet/optimizer/optimizer.py``), in its order and in the data's
precision (float32 in float32, float64 in float64; no fastmath, so LLVM neither reassociates nor contracts
``a * b + c`` into an FMA, and every result is IEEE-rounded as MXNet's binary rounds it):

- ``sgd``: ``MultiSGDKernel`` without momentum: ``mom = 0 * 0 - lr * wd * w - lr * rescale * g; w = w + mom``;
- ``sgd_single``: ``SGDKernel`` (``sgd_update``): ``w = (1 - lr * wd) * w - (lr * rescale) * g``;
- ``sgd_mom``: ``SGDMomKernel`` = ``MultiSGDKernel`` with momentum: ``m = mu * m - lr * wd * w - lr * rescale * g;
  w = w + m``;
- ``nag_mom``: ``NAGMomKernel``: ``m = mu * m; w = w - m + (mu + 1) * (m - lr * (rescale * g + wd * w));
  m = m - lr * (rescale * g + wd * w_new)`` (MXNet writes w in place first, so the state update reads the new w);
- ``adam``: ``AdamUpdateKernel``: ``x = g * rescale + w * wd; m = b1 * m + (1 - b1) * x;
  v = b2 * v + (1 - b2) * x * x; w = w - lr * m / (sqrt(v) + eps)``;
- ``rmsprop``/``rmspropalex``: ``RMSPropUpdateKernel``/``RMSPropAlexUpdateKernel`` (plain and centered);
- ``ftrl``: ``FtrlUpdateKernel``; ``signum``/``signsgd``: ``SignumKernel``/``SignSGDKernel``;
- ``lamb``: ``multi_lamb_update`` (moments, the float32 direction, ``multi_sum_sq``'s float sums of the weights and
  directions, ``w -= lr * ratio * direction``), 4 tensors at a time; ``lamb_apply``: its step 2 alone (for ratios
  the caller computes); ``sum_sq``: ``multi_sum_sq``'s CPU loop (one float accumulator per tensor, element order).

Where clipping is on, ``clip`` replaces the scaled gradient by MXNet's ``clip::Map``: NaN passes. Constants arrive as
an array of the data's dtype (values already rounded to float32 as MXNet's float parameters are; differences such as
``1 - b1`` and ``mu + 1`` computed in the data's dtype, as the kernels do). The python optimizers' kernels
(``adagrad``, ``adadelta``, ``adamax``, ``nadam``) take the python doubles MXNet hands its scalar operators (as
dmlc's double parser reads them, ``1 - b1`` computed in python) cast to the data's dtype, and ``nd.clip``'s bounds.

Every update kernel walks a table of segments (``mxupdate.tables``): row ``s`` of ``addresses`` holds the addresses
of segment ``s`` in the weight, the gradient and each state array (in that order; the arrays are separate buffers),
``lengths[s]`` its element count, ``lrs[s]``/``wds[s]`` its lr and wd. The caller keeps the arrays alive and their
addresses valid for the call. A kernel releases the GIL: ``mxupdate.threads`` runs one call per thread on disjoint
shares. ``cache=True`` keeps the machine code next to this file (or, where that directory is read-only, in numba's
per-user cache directory).
"""
import llvmlite.binding
import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

#: LLVM's loop vectorizer leaves a loop scalar when proving its arrays apart takes more than
#: ``-runtime-memory-check-threshold`` (8) runtime checks: a loop reading and writing five arrays (FTML's weight,
#: gradient, d, v and z) needs more, and ran 4x slower scalar. A higher threshold (set for the process's LLVM, numba's
#: compiler; it changes which loops vectorize, never a result) lets such loops vectorize.
llvmlite.binding.set_option("mxupdate", "-runtime-memory-check-threshold=64")
_JIT = {"nogil": True, "error_model": "numpy", "boundscheck": False}
#: Elements per block of the kernels that work block by block (rmspropalex, lamb): a block's arrays stay in cache
#: between its loops.
BLOCK = 4096


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


@_jit
def rmsprop(addresses, lengths, lrs, wds, consts, use_clip):
    """``RMSPropUpdateKernel``; rows (weight, grad, n); consts = (rescale, clip, gamma1, 1 - gamma1, eps,
    clip_weights (< 0: off)): ``g = clip(rescale * grad + wd * w); n = (1 - g1) * (g * g) + g1 * n;
    w = w - lr * (g / sqrt(n + eps))``, then ``clip(w, clip_weights)``."""
    rescale, bound, g1, one_g1, eps, clip_w = consts[0], consts[1], consts[2], consts[3], consts[4], consts[5]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        ws, gs, ns = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs), _at(addresses[s, 2], n, lrs)
        for i in range(n):
            w = ws[i]
            grad = rescale * gs[i] + wd * w
            if use_clip:
                grad = _clip(grad, bound)
            square = one_g1 * (grad * grad) + g1 * ns[i]
            ns[i] = square
            w = w - lr * (grad / np.sqrt(square + eps))
            if clip_w >= 0:
                w = _clip(w, clip_w)
            ws[i] = w


@_jit
def rmspropalex(addresses, lengths, lrs, wds, consts, use_clip):
    """``RMSPropAlexUpdateKernel`` (centered); rows (weight, grad, n, g, delta); consts = (rescale, clip, gamma1,
    gamma2, 1 - gamma1, eps, clip_weights): ``n = (1 - g1) * gr * gr + g1 * n; g = (1 - g1) * gr + g1 * g;
    delta = g2 * delta - lr * gr / sqrt(n - g * g + eps); w = w + delta``. Block by block through a buffer of the
    block's gradients and deltas, in simple loops that vectorize (five arrays in one loop do not)."""
    rescale, bound, g1, g2, one_g1, eps, clip_w = consts[0], consts[1], consts[2], consts[3], consts[4], consts[5], \
        consts[6]
    size, values = lrs.itemsize, np.empty(BLOCK, dtype=lrs.dtype)
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        for start in range(0, n, BLOCK):
            m = min(n - start, BLOCK)
            ws, gs = _at(addresses[s, 0] + start * size, m, lrs), _at(addresses[s, 1] + start * size, m, lrs)
            ns, means = _at(addresses[s, 2] + start * size, m, lrs), _at(addresses[s, 3] + start * size, m, lrs)
            deltas = _at(addresses[s, 4] + start * size, m, lrs)
            for i in range(m):
                values[i] = rescale * gs[i] + wd * ws[i]
            if use_clip:
                for i in range(m):
                    values[i] = _clip(values[i], bound)
            for i in range(m):
                grad = values[i]
                square = one_g1 * grad * grad + g1 * ns[i]
                mean = one_g1 * grad + g1 * means[i]
                ns[i] = square
                means[i] = mean
                values[i] = g2 * deltas[i] - (lr * grad / np.sqrt(square - mean * mean + eps))
            for i in range(m):
                deltas[i] = values[i]
                ws[i] = ws[i] + values[i]
            if clip_w >= 0:
                for i in range(m):
                    ws[i] = _clip(ws[i], clip_w)


@_jit
def ftrl(addresses, lengths, lrs, wds, consts, use_clip):
    """``FtrlUpdateKernel``; rows (weight, grad, z, n); consts = (rescale, clip, lamda1, beta, zero):
    ``z += g - (sqrt(n + g * g) - sqrt(n)) * w / lr; n += g * g``; ``w = (sign(z) * lamda1 - z) /
    ((beta + sqrt(n)) / lr + wd)`` where ``|z| > lamda1``, else that times 0."""
    rescale, bound, lamda1, beta, zero = consts[0], consts[1], consts[2], consts[3], consts[4]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        ws, gs = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs)
        zs, ns = _at(addresses[s, 2], n, lrs), _at(addresses[s, 3], n, lrs)
        for i in range(n):
            grad = gs[i] * rescale
            if use_clip:
                grad = _clip(grad, bound)
            old = ns[i]
            z = zs[i] + (grad - (np.sqrt(old + grad * grad) - np.sqrt(old)) * ws[i] / lr)
            square = old + grad * grad
            zs[i] = z
            ns[i] = square
            sign_l1 = lamda1 if z > zero else (-lamda1 if z < zero else zero)
            ratio = (sign_l1 - z) / ((beta + np.sqrt(square)) / lr + wd)
            ws[i] = ratio if abs(z) > lamda1 else ratio * zero


@numba.njit(inline="always")
def _sign(x, one, zero):
    """``(x > 0) - (x < 0)`` in x's dtype (NaN: 0)."""
    return one if x > zero else (-one if x < zero else zero)


@_jit
def signum(addresses, lengths, lrs, wds, consts, use_clip):
    """``SignumKernel``; rows (weight, grad, mom); consts = (rescale, clip, momentum, 1 - momentum, wd_lh, one,
    zero): ``m = mu * m - (1 - mu) * wd * w - (1 - mu) * rescale * g``; ``w = (1 - lr * wd_lh) * w + lr * sign(m)``."""
    rescale, bound, mu, one_mu, wd_lh, one, zero = consts[0], consts[1], consts[2], consts[3], consts[4], \
        consts[5], consts[6]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        keep = one - lr * wd_lh
        ws, gs, ms = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs), _at(addresses[s, 2], n, lrs)
        if use_clip:
            for i in range(n):
                mom = mu * ms[i] - one_mu * wd * ws[i] - one_mu * _clip(rescale * gs[i], bound)
                ms[i] = mom
                ws[i] = keep * ws[i] + lr * _sign(mom, one, zero)
        else:
            for i in range(n):
                mom = mu * ms[i] - one_mu * wd * ws[i] - one_mu * rescale * gs[i]
                ms[i] = mom
                ws[i] = keep * ws[i] + lr * _sign(mom, one, zero)


@_jit
def signsgd(addresses, lengths, lrs, wds, consts, use_clip):
    """``SignSGDKernel`` (Signum without momentum; clip and rescale play no part); rows (weight, grad);
    consts = (one, zero): ``w = (1 - lr * wd) * w - lr * sign(g)``."""
    one, zero = consts[0], consts[1]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        keep = one - lr * wd
        ws, gs = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs)
        for i in range(n):
            ws[i] = keep * ws[i] - lr * _sign(gs[i], one, zero)


@_jit
def ftml(addresses, lengths, lrs, wds, extras, consts, use_clip):
    """``FTMLKernel`` (``ftml_update``); rows (weight, grad, d, v, z); ``lrs[s]`` = ``(1 - b1^t) / lr`` and
    ``extras[s, 0]`` = ``1 - b2^t`` in the data's dtype (the same for every element: computed once by the caller);
    consts = (rescale, clip, b1, b2, eps, 1 - b1, 1 - b2): ``g = clip(rescale * grad + wd * w);
    v = b2 * v + (1 - b2) * (g * g); d_t = ((1 - b1^t) / lr) * (sqrt(v / (1 - b2^t)) + eps);
    z = b1 * z + (1 - b1) * g - (d_t - b1 * d) * w; d = d_t; w = -z / d_t``."""
    rescale, bound, b1, b2, eps, one_b1, one_b2 = consts[0], consts[1], consts[2], consts[3], consts[4], consts[5], \
        consts[6]
    for s in range(lengths.size):
        scale, wd, correction, n = lrs[s], wds[s], extras[s, 0], lengths[s]
        ws, gs, ds = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs), _at(addresses[s, 2], n, lrs)
        vs, zs = _at(addresses[s, 3], n, lrs), _at(addresses[s, 4], n, lrs)
        for i in range(n):
            grad = rescale * gs[i] + wd * ws[i]
            if use_clip:
                grad = _clip(grad, bound)
            v = b2 * vs[i] + one_b2 * (grad * grad)
            d_t = scale * (np.sqrt(v / correction) + eps)
            z = b1 * zs[i] + one_b1 * grad - (d_t - b1 * ds[i]) * ws[i]
            vs[i] = v
            zs[i] = z
            ds[i] = d_t
            ws[i] = -z / d_t


@numba.njit(inline="always")
def _clip_op(x, lower, upper):
    """MXNet's ``clip`` operator (``nd.clip(x, a_min, a_max)``, what its python optimizers call): ``upper`` above it,
    ``lower`` below it, anything else (NaN too) unchanged."""
    if x > upper:
        return upper
    if x < lower:
        return lower
    return x


@numba.njit(inline="always")
def _scaled(grad, rescale, lower, upper, use_clip):
    """``clip(grad * rescale, lower, upper)`` (the clip when ``use_clip``), each operation rounded."""
    grad = grad * rescale
    return _clip_op(grad, lower, upper) if use_clip else grad


@_jit
def adagrad(addresses, lengths, lrs, wds, consts, use_clip):
    """MXNet's python ``AdaGrad.update`` (dense), one NDArray operation after another, each rounded to the data's
    dtype; rows (weight, grad, history); consts = (rescale, clip lower, clip upper, eps): ``g = clip(grad * rescale);
    h = h + g * g; w = w + (g / sqrt(h + eps) + w * wd) * -lr``."""
    rescale, lower, upper, eps = consts[0], consts[1], consts[2], consts[3]
    for s in range(lengths.size):
        rate, wd, n = -lrs[s], wds[s], lengths[s]
        ws, gs, hs = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs), _at(addresses[s, 2], n, lrs)
        for i in range(n):
            grad = _scaled(gs[i], rescale, lower, upper, use_clip)
            history = hs[i] + grad * grad
            hs[i] = history
            ws[i] = ws[i] + (grad / np.sqrt(history + eps) + ws[i] * wd) * rate


@_jit
def adadelta(addresses, lengths, lrs, wds, consts, use_clip):
    """MXNet's python ``AdaDelta.update`` (lr unused), one NDArray operation after another; rows (weight, grad,
    acc_g, acc_delta); consts = (rescale, clip lower, clip upper, rho, 1 - rho, eps): ``g = clip(grad * rescale);
    acc_g = acc_g * rho + (g * (1 - rho)) * g; delta = sqrt(acc_delta + eps) / sqrt(acc_g + eps) * g;
    acc_delta = acc_delta * rho + (delta * (1 - rho)) * delta; w = w - (delta + w * wd)``."""
    rescale, lower, upper, rho, one_rho, eps = consts[0], consts[1], consts[2], consts[3], consts[4], consts[5]
    for s in range(lengths.size):
        wd, n = wds[s], lengths[s]
        ws, gs = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs)
        acc_gs, acc_ds = _at(addresses[s, 2], n, lrs), _at(addresses[s, 3], n, lrs)
        for i in range(n):
            grad = _scaled(gs[i], rescale, lower, upper, use_clip)
            acc_g = acc_gs[i] * rho + grad * one_rho * grad
            delta = np.sqrt(acc_ds[i] + eps) / np.sqrt(acc_g + eps) * grad
            acc_gs[i] = acc_g
            acc_ds[i] = acc_ds[i] * rho + delta * one_rho * delta
            ws[i] = ws[i] - (delta + ws[i] * wd)


@numba.njit(inline="always")
def _decayed(grad, w, rescale, wd, lower, upper, use_clip):
    """``clip(grad * rescale + w * wd)`` as MXNet's python Adamax and Nadam compute it, each operation rounded."""
    grad = grad * rescale + w * wd
    return _clip_op(grad, lower, upper) if use_clip else grad


@_jit
def adamax(addresses, lengths, lrs, wds, consts, use_clip):
    """MXNet's python ``Adamax.update``, one NDArray operation after another; rows (weight, grad, mean, u);
    ``lrs[s]`` = ``lr / (1 - b1^t)``; consts = (rescale, clip lower, clip upper, b1, 1 - b1, b2):
    ``g = clip(grad * rescale + w * wd); m = m * b1 + g * (1 - b1); u = maximum(u * b2, |g|); w = w - m * lr / u``
    (``maximum`` returns its first argument where it is NaN, as MXNet's)."""
    rescale, lower, upper, b1, one_b1, b2 = consts[0], consts[1], consts[2], consts[3], consts[4], consts[5]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        ws, gs = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs)
        ms, us = _at(addresses[s, 2], n, lrs), _at(addresses[s, 3], n, lrs)
        for i in range(n):
            grad = _decayed(gs[i], ws[i], rescale, wd, lower, upper, use_clip)
            mean = ms[i] * b1 + grad * one_b1
            decayed, size = us[i] * b2, abs(grad)
            u = decayed if decayed > size or decayed != decayed else size
            ms[i] = mean
            us[i] = u
            ws[i] = ws[i] - mean * lr / u


@_jit
def nadam(addresses, lengths, lrs, wds, extras, consts, use_clip):
    """MXNet's python ``Nadam.update``, one NDArray operation after another; rows (weight, grad, mean, var);
    ``extras[s]`` = (1 - m_schedule, 1 - m_schedule_next, 1 - b2^t, 1 - momentum_t, momentum_t_1) of the tensor's
    update (MXNet's python doubles, in the data's dtype); consts = (rescale, clip lower, clip upper, b1, 1 - b1, b2,
    1 - b2, eps): ``g = clip(grad * rescale + w * wd); m = m * b1 + g * (1 - b1); v = v * b2 + (g * (1 - b2)) * g;
    m_bar = (g / (1 - m_schedule)) * (1 - momentum_t) + (m / (1 - m_schedule_next)) * momentum_t_1;
    w = w - m_bar * lr / (sqrt(v / (1 - b2^t)) + eps)``."""
    rescale, lower, upper, b1, one_b1, b2, one_b2, eps = consts[0], consts[1], consts[2], consts[3], consts[4], \
        consts[5], consts[6], consts[7]
    for s in range(lengths.size):
        lr, wd, n = lrs[s], wds[s], lengths[s]
        schedule, schedule_next, correction, grad_part, mean_part = extras[s, 0], extras[s, 1], extras[s, 2], \
            extras[s, 3], extras[s, 4]
        ws, gs = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, lrs)
        ms, vs = _at(addresses[s, 2], n, lrs), _at(addresses[s, 3], n, lrs)
        for i in range(n):
            grad = _decayed(gs[i], ws[i], rescale, wd, lower, upper, use_clip)
            mean = ms[i] * b1 + grad * one_b1
            var = vs[i] * b2 + grad * one_b2 * grad
            ms[i] = mean
            vs[i] = var
            bar = grad / schedule * grad_part + mean / schedule_next * mean_part
            ws[i] = ws[i] - bar * lr / (np.sqrt(var / correction) + eps)


@_jit
def lamb(addresses, lengths, lanes, wds, lrs, corrections, consts, use_clip, bias_correction, apply, sums, like32):
    """``multi_lamb_update`` (``MultiLAMB_step1_kernel``, ``multi_sum_sq``, ``MultiLAMB_step2_kernel``) on the
    tensors of ``lanes``, 4 at a time; row k of ``addresses`` holds tensor k's (weight, grad, mean, var, direction),
    the direction a float32 buffer (MXNet's ``temp_g``); ``lengths[k]`` its size (the filler index of ``lanes``: an
    empty tensor); ``wds[k]``, ``lrs[k]`` its wd and lr (float32 values, in the data's dtype), ``corrections[k]`` =
    (1 - b1^t, 1 - b2^t) in the data's dtype; consts = (rescale, clip, b1, b2, 1 - b1, 1 - b2, eps, lower_bound,
    upper_bound) (a bound < 0: off).

    Step 1, block by block (``BLOCK`` elements of the 4 tensors at a time, in cache): ``g = clip(grad * rescale);
    m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g * g; d = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
    + wd * w`` (without bias correction ``m / (sqrt(v) + eps) + wd * w``), stored as float32. MXNet's ``sqrt`` of a
    float is C's double ``sqrt``: the quotient and the sum are double (``wd * w`` in the data's dtype). The block's w
    and d then go into each tensor's C ``float`` sums of squares (``multi_sum_sq``: element order,
    ``float(sum + x * x)``), 8 sums side by side; ``sums[k]`` receives them.
    Step 2 when ``apply``: ``r1 = sqrt(w sum)`` (bounded), ``r2 = sqrt(d sum)``, ``r = r1 / r2`` (1 when one is 0)
    in float, ``w = w - (lr * r) * d`` (while a small tensor is still in cache); else the caller finishes
    (``lamb_apply``).
    """
    ratio = np.empty(1, dtype=wds.dtype)
    padded_w, padded_d = np.zeros((4, BLOCK), dtype=wds.dtype), np.zeros((4, BLOCK), dtype=np.float32)
    for row in range(lanes.shape[0]):
        k0, k1, k2, k3 = lanes[row, 0], lanes[row, 1], lanes[row, 2], lanes[row, 3]
        longest = max(max(lengths[k0], lengths[k1]), max(lengths[k2], lengths[k3]))
        w0 = w1 = w2 = w3 = d0 = d1 = d2 = d3 = np.float32(0.0)
        for start in range(0, longest, BLOCK):
            span = min(longest - start, BLOCK)
            step = (lengths, wds, corrections, consts, use_clip, bias_correction, start, span, like32)
            ws0, ds0 = _lamb_block(addresses[k0], k0, padded_w[0], padded_d[0], step)
            ws1, ds1 = _lamb_block(addresses[k1], k1, padded_w[1], padded_d[1], step)
            ws2, ds2 = _lamb_block(addresses[k2], k2, padded_w[2], padded_d[2], step)
            ws3, ds3 = _lamb_block(addresses[k3], k3, padded_w[3], padded_d[3], step)
            for i in range(span):  # 8 independent chains hide the latency of the dependent adds
                w0, d0 = _add_square(w0, ws0[i]), _add_square(d0, ds0[i])
                w1, d1 = _add_square(w1, ws1[i]), _add_square(d1, ds1[i])
                w2, d2 = _add_square(w2, ws2[i]), _add_square(d2, ds2[i])
                w3, d3 = _add_square(w3, ws3[i]), _add_square(d3, ds3[i])
        sums[k0, 0], sums[k0, 1], sums[k1, 0], sums[k1, 1] = w0, d0, w1, d1
        sums[k2, 0], sums[k2, 1], sums[k3, 0], sums[k3, 1] = w2, d2, w3, d3
        if apply:
            for lane in range(4):
                k = lanes[row, lane]
                ratio[0] = _trust_ratio(sums[k, 0], sums[k, 1], consts[7], consts[8])  # float, in the data's dtype
                rate = lrs[k] * ratio[0]
                ws, ds = _at(addresses[k, 0], lengths[k], wds), _at(addresses[k, 4], lengths[k], like32)
                for i in range(lengths[k]):
                    ws[i] = ws[i] - rate * ds[i]


@numba.njit(inline="always")
def _lamb_block(row, k, padded_w, padded_d, step):
    """Step 1 on the elements [start, start + span) of tensor k (addresses ``row``; fewer where it ends earlier);
    ``step`` = (lengths, wds, corrections, consts, use_clip, bias_correction, start, span, like32). Returns the
    (w, d) its sums then read: the tensor's own where it fills the span, else ``padded_w``/``padded_d`` holding its
    elements and zeros (adding 0 * 0 leaves a sum of squares unchanged)."""
    lengths, wds, corrections, consts, use_clip, bias_correction, start, span, like32 = step
    m, size = min(max(lengths[k] - start, 0), span), wds.itemsize
    ws, ds = _at(row[0] + start * size, m, wds), _at(row[4] + start * 4, m, like32)
    if m > 0:
        gs = _at(row[1] + start * size, m, wds)
        ms, vs = _at(row[2] + start * size, m, wds), _at(row[3] + start * size, m, wds)
        _lamb_step(ws, gs, ms, vs, ds, wds[k], corrections[k, 0], corrections[k, 1], consts, use_clip, bias_correction)
    if m == span:
        return ws, ds
    for i in range(m):
        padded_w[i] = ws[i]
        padded_d[i] = ds[i]
    for i in range(m, span):
        padded_w[i] = 0
        padded_d[i] = 0
    return padded_w, padded_d


@numba.njit(inline="always")
def _lamb_step(ws, gs, ms, vs, ds, wd, bc1, bc2, consts, use_clip, bias_correction):
    """``MultiLAMB_step1_kernel`` on one block: ``g = clip(grad * rescale)``, the moments, then the direction into
    the float32 ``ds`` (MXNet's ``sqrt`` of a float is C's double ``sqrt``: the quotient and the sum in double)."""
    rescale, bound, b1, b2, one_b1, one_b2 = consts[0], consts[1], consts[2], consts[3], consts[4], consts[5]
    epsilon = np.float64(consts[6])
    for i in range(ws.size):
        grad = gs[i] * rescale
        if use_clip:
            grad = _clip(grad, bound)
        mean = b1 * ms[i] + one_b1 * grad
        var = b2 * vs[i] + one_b2 * grad * grad
        ms[i] = mean
        vs[i] = var
        if bias_correction:
            mean, var = mean / bc1, var / bc2
        ds[i] = np.float32(np.float64(mean) / (np.sqrt(np.float64(var)) + epsilon) + np.float64(wd * ws[i]))


@numba.njit(inline="always")
def _trust_ratio(w_sum, d_sum, lower, upper):
    """``MultiLAMB_step2_kernel``'s ratio in float: ``r1 = sqrt(w_sum)`` bounded by lower/upper (>= 0: on),
    ``r2 = sqrt(d_sum)``, ``r1 / r2``, or 1 when one of them is 0."""
    r1, r2 = np.sqrt(np.float32(w_sum)), np.sqrt(np.float32(d_sum))
    if lower >= 0:
        r1 = max(r1, np.float32(lower))
    if upper >= 0:
        r1 = min(r1, np.float32(upper))
    if r1 == 0 or r2 == 0:
        return np.float32(1.0)
    return r1 / r2


@_jit
def lamb_apply(addresses, lengths, lrs, like32):
    """``multi_lamb_update``'s step 2 (``MultiLAMB_step2_kernel``) with each tensor's ``lr * r1/r2`` computed by the
    caller in the data's dtype; rows (weight, float32 direction): ``w = w - lr * d``."""
    for s in range(lengths.size):
        lr, n = lrs[s], lengths[s]
        ws, ds = _at(addresses[s, 0], n, lrs), _at(addresses[s, 1], n, like32)
        for i in range(n):
            ws[i] = ws[i] - lr * ds[i]


@numba.njit(inline="always")
def _add_square(total, x):
    """``float(total + x*x)``: ``x*x`` in x's dtype, the sum in double, stored to float."""
    return np.float32(np.float64(total) + np.float64(x * x))


@_jit
def sum_sq(addresses, lengths, lanes, out, like):
    """``multi_sum_sq``'s CPU loop (``CalcSumSq``): each tensor summed alone, element by element in order, into a C
    float. ``addresses``/``lengths`` (one per tensor, the last an empty filler); each row of ``lanes`` holds 4
    tensor indices summed side by side (independent chains hide the latency of the dependent adds); ``out[k]``
    receives tensor k's sum."""
    for row in range(lanes.shape[0]):
        k0, k1, k2, k3 = lanes[row, 0], lanes[row, 1], lanes[row, 2], lanes[row, 3]
        a0, a1 = _at(addresses[k0], lengths[k0], like), _at(addresses[k1], lengths[k1], like)
        a2, a3 = _at(addresses[k2], lengths[k2], like), _at(addresses[k3], lengths[k3], like)
        s0 = s1 = s2 = s3 = np.float32(0.0)
        for j in range(max(max(a0.size, a1.size), max(a2.size, a3.size))):
            if j < a0.size:
                s0 = _add_square(s0, a0[j])
            if j < a1.size:
                s1 = _add_square(s1, a1[j])
            if j < a2.size:
                s2 = _add_square(s2, a2[j])
            if j < a3.size:
                s3 = _add_square(s3, a3[j])
        out[k0], out[k1], out[k2], out[k3] = s0, s1, s2, s3
