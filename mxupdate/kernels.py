"""MXNet 1.9.1's optimizer kernels, compiled with numba: one pass over memory per launch, operation by operation.

Imported on first use (``import mxupdate`` does not import numba). Each kernel reproduces one MXNet operator of
``src/operator/optimizer_op-inl.h`` (or ``contrib/multi_lamb.cc``, ``contrib/multi_sum_sq.cc``) in its order and in
the data's precision (float32 in float32, float64 in float64; no fastmath, so LLVM neither reassociates nor contracts
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
- ``lamb_direction``/``lamb_apply``: ``multi_lamb_update``'s step 1 (moments, the float32 direction) and step 2
  (``w -= lr * ratio * direction``); ``sum_sq``: ``multi_sum_sq``'s CPU loop (one float accumulator per tensor,
  element order).

Where clipping is on, ``clip`` replaces the scaled gradient by MXNet's ``clip::Map``: NaN passes. Constants arrive as
an array of the data's dtype (values already rounded to float32 as MXNet's float parameters are; differences such as
``1 - b1`` and ``mu + 1`` computed in the data's dtype, as the kernels do).

Every update kernel walks a table of segments (``mxupdate.tables``): row ``s`` of ``addresses`` holds the addresses
of segment ``s`` in the weight, the gradient and each state array (in that order; the arrays are separate buffers),
``lengths[s]`` its element count, ``lrs[s]``/``wds[s]`` its lr and wd. The caller keeps the arrays alive and their
addresses valid for the call. A kernel releases the GIL: ``mxupdate.threads`` runs one call per thread on disjoint
shares. ``cache=True`` keeps the machine code next to this file (or, where that directory is read-only, in numba's
per-user cache directory).
"""
import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

_JIT = {"nogil": True, "error_model": "numpy", "boundscheck": False}
#: Elements per block of the kernels that work block by block (rmspropalex, lamb_direction): a block's arrays stay in
#: cache between its loops. lamb_direction's sum of squares of a tensor is the float64 sum, in order, of its
#: blocks' sums, each block summed in 8 interleaved lanes (so neither the thread count nor the cut into shares
#: changes it).
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
def _block_sum_sq(values):
    """The float64 sum of squares of ``values`` (a block) in 8 interleaved lanes (lane k: elements k, k+8, ...),
    then the lanes in order."""
    l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = 0.0
    n, i = values.size, 0
    while i + 8 <= n:
        l0 += np.float64(values[i]) * np.float64(values[i])
        l1 += np.float64(values[i + 1]) * np.float64(values[i + 1])
        l2 += np.float64(values[i + 2]) * np.float64(values[i + 2])
        l3 += np.float64(values[i + 3]) * np.float64(values[i + 3])
        l4 += np.float64(values[i + 4]) * np.float64(values[i + 4])
        l5 += np.float64(values[i + 5]) * np.float64(values[i + 5])
        l6 += np.float64(values[i + 6]) * np.float64(values[i + 6])
        l7 += np.float64(values[i + 7]) * np.float64(values[i + 7])
        i += 8
    while i < n:
        l0 += np.float64(values[i]) * np.float64(values[i])
        i += 1
    return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))


@_jit
def lamb_direction(addresses, lengths, wds, corrections, consts, use_clip, bias_correction, exact, blocks, sums,
                   like32):
    """``multi_lamb_update``'s step 1 (``MultiLAMB_step1_kernel``); rows (weight, grad, mean, var, direction), the
    direction a float32 buffer (MXNet's ``temp_g``); consts = (rescale, clip, b1, b2, 1 - b1, 1 - b2, eps);
    ``corrections[s]`` = (1 - b1^t, 1 - b2^t) in the data's dtype:

    ``g = clip(grad * rescale); m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g * g;
    d = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * w`` (without bias correction ``m / (sqrt(v) + eps)
    + wd * w``), stored as float32. MXNet's ``sqrt`` of a float is C's double ``sqrt``: the quotient and the sum
    are double (``wd * w`` in the data's dtype) for float32 data too.

    ``exact`` False: the direction in the data's dtype as ``m * (sqrt(1 - b2^t)/(1 - b1^t)) / (sqrt(v) +
    eps*sqrt(1 - b2^t)) + wd * w`` (one division instead of three, double ones for float32 data: a few units in
    the last place of float32 from MXNet's, ~3x faster).

    Where ``blocks[s] >= 0`` the segment starts block ``blocks[s]`` of ``BLOCK`` elements (a segment covers whole
    blocks but for a tensor's last): ``sums[b]`` receives block b's float64 sums of squares of the weight and of
    the float32 direction (``_block_sum_sq``).
    """
    rescale, bound, b1, b2, one_b1, one_b2 = consts[0], consts[1], consts[2], consts[3], consts[4], consts[5]
    epsilon, size = np.float64(consts[6]), wds.itemsize
    for s in range(lengths.size):
        wd, n, bc1, bc2 = wds[s], lengths[s], corrections[s, 0], corrections[s, 1]
        for start in range(0, n, BLOCK):  # per block (its own arrays: loops from 0 vectorize), moments then direction
            m = min(n - start, BLOCK)
            ws, gs = _at(addresses[s, 0] + start * size, m, wds), _at(addresses[s, 1] + start * size, m, wds)
            ms, vs = _at(addresses[s, 2] + start * size, m, wds), _at(addresses[s, 3] + start * size, m, wds)
            ds = _at(addresses[s, 4] + start * 4, m, like32)
            _lamb_moments(gs, ms, vs, rescale, bound, b1, b2, one_b1, one_b2, use_clip)
            if not exact:  # in the data's dtype, the corrections folded into two constants (torch's fused Adam's form)
                scale = np.sqrt(bc2) / bc1 if bias_correction else bc1 / bc1
                shifted = consts[6] * np.sqrt(bc2) if bias_correction else consts[6]
                for i in range(m):
                    ds[i] = ms[i] * scale / (np.sqrt(vs[i]) + shifted) + wd * ws[i]
            elif bias_correction:  # C's sqrt of a float is the double sqrt: the quotient and the sum in double
                for i in range(m):
                    mean, var = ms[i] / bc1, vs[i] / bc2
                    ds[i] = np.float32(np.float64(mean) / (np.sqrt(np.float64(var)) + epsilon)
                                       + np.float64(wd * ws[i]))
            else:
                for i in range(m):
                    ds[i] = np.float32(np.float64(ms[i]) / (np.sqrt(np.float64(vs[i])) + epsilon)
                                       + np.float64(wd * ws[i]))
            if blocks[s] >= 0:
                b = blocks[s] + start // BLOCK
                sums[b, 0] = _block_sum_sq(ws)
                sums[b, 1] = _block_sum_sq(ds)


@numba.njit(inline="always")
def _lamb_moments(gs, ms, vs, rescale, bound, b1, b2, one_b1, one_b2, use_clip):
    """``m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g * g`` with ``g = clip(grad * rescale)``."""
    if use_clip:
        for i in range(gs.size):
            grad = _clip(gs[i] * rescale, bound)
            ms[i] = b1 * ms[i] + one_b1 * grad
            vs[i] = b2 * vs[i] + one_b2 * grad * grad
    else:
        for i in range(gs.size):
            grad = gs[i] * rescale
            ms[i] = b1 * ms[i] + one_b1 * grad
            vs[i] = b2 * vs[i] + one_b2 * grad * grad


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
