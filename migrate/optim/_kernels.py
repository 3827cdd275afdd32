"""Compiled CPU loops (numba, imported on first use) that replay MXNet 1.9.1's C++ kernels operation by operation.

Six of MXNet's loops live here:

- ``sum_sq`` / ``sum_sqs``: MXNet's CPU ``multi_sum_sq`` (``src/operator/contrib/multi_sum_sq.cc``, ``CalcSumSq``),
  which LAMB's ``multi_lamb_update`` calls for the trust ratio's norms. Each tensor is summed by ONE thread,
  element by element in order, into a C ``float``: ``sum = float(sum + x*x)`` with ``x*x`` in the tensor's dtype.
  MXNet's OpenMP loop runs over tensors only, so the result does not depend on MXNet's thread count. torch's
  pairwise/vectorized sums differ from it by ~1e-7 relative, which held LAMB in float64 to 2e-9 of MXNet after 100
  steps. ``sum_sqs`` keeps each tensor's order but sums 4 tensors side by side per thread (independent chains hide
  the latency of the dependent adds: 119 ms -> 35 ms for resnet50's 25.6M float64 weights on 2 threads).
- ``sgd_update``: MXNet's ``MultiSGDKernel`` (``multi_sgd_update``, ``multi_sgd_mom_update``, their mp forms).
- ``nag_update``: MXNet's ``NAGMomKernel``/``MP_NAGMomKernel`` (``nag_mom_update``) in one pass, in its order.
- ``adam_update``: MXNet's ``AdamUpdateKernel`` (``adam_update``) in one pass, in its order.
- ``rmsprop_update``: MXNet's ``RMSPropUpdateKernel`` and, centered, ``RMSPropAlexUpdateKernel`` in one pass each.
- ``ftrl_update``: MXNet's ``FtrlUpdateKernel`` (``src/operator/optimizer_op-inl.h``) in one pass, the arithmetic in
  its order, in place on the flat arrays (zero-copy ``numpy()`` views of CPU tensors).

numba's threading layer is process-wide and chosen at the first parallel launch: unless the user chose one
(``NUMBA_THREADING_LAYER``), it is set to ``"forksafe"`` (TBB where installed, else numba's ``workqueue``; GNU
OpenMP is not fork-safe, and DataLoader workers fork). ``workqueue`` is not thread-safe, so every launch holds a
lock. No fastmath: the order of operations is the point.
"""
import functools
import importlib.util
import threading

import numpy as np

_LOCK = threading.RLock()
_KERNELS = {}
#: Tensors with fewer elements run the serial loop: a parallel launch costs more than it saves on them.
PARALLEL_MIN = 1 << 17


def _compiled():
    """The compiled kernels, keyed by name; numba is imported and the kernels jitted on the first call."""
    if not _KERNELS:
        with _LOCK:
            if not _KERNELS:
                _KERNELS.update(_build())
    return _KERNELS


def _build():
    """Jit the loops (sum_sq, sum_sqs, ftrl, ftrl_parallel); numba's threading layer set as documented above."""
    import numba

    if numba.config.THREADING_LAYER == "default":
        numba.config.THREADING_LAYER = "forksafe"
    options = {"nogil": True, "cache": True, "error_model": "numpy"}  # numpy errors: x/0 is inf or nan as in C
    return dict(_build_sum_sq(numba, options), **_build_ftrl(numba, options), **_build_nag(numba, options),
                **_build_sgd(numba, options), **_build_adam(numba, options), **_build_rmsprop(numba, options))


def _build_sum_sq(numba, options):
    """multi_sum_sq's loop: ``sum_sq`` for one array, ``sum_sqs`` for many (4 tensors interleaved per thread)."""

    def add_square(total, x, square_in_float):
        """``float(total + x*x)``, ``x*x`` first rounded to float when ``square_in_float``."""
        square = x * x
        if square_in_float:
            return np.float32(np.float64(total) + np.float64(np.float32(square)))
        return np.float32(np.float64(total) + np.float64(square))

    step = numba.njit(inline="always", **options)(add_square)

    def sum_sq(values, square_in_float):
        total = np.float32(0.0)
        for j in range(values.size):
            total = step(total, values[j], square_in_float)
        return total

    def sum_sqs(arrays, lanes, square_in_float, out):
        # lanes[b, k] holds 4 indices into arrays summed side by side (independent chains hide the add latency);
        # each row b is one thread's share. Every tensor is still summed alone, in element order.
        for b in numba.prange(lanes.shape[0]):
            for k in range(lanes.shape[1]):
                a0, a1, a2, a3 = (arrays[lanes[b, k, 0]], arrays[lanes[b, k, 1]], arrays[lanes[b, k, 2]],
                                  arrays[lanes[b, k, 3]])
                s0 = s1 = s2 = s3 = np.float32(0.0)
                for j in range(max(max(a0.size, a1.size), max(a2.size, a3.size))):
                    if j < a0.size:
                        s0 = step(s0, a0[j], square_in_float)
                    if j < a1.size:
                        s1 = step(s1, a1[j], square_in_float)
                    if j < a2.size:
                        s2 = step(s2, a2[j], square_in_float)
                    if j < a3.size:
                        s3 = step(s3, a3[j], square_in_float)
                out[lanes[b, k, 0]], out[lanes[b, k, 1]], out[lanes[b, k, 2]], out[lanes[b, k, 3]] = s0, s1, s2, s3

    return {"sum_sq": numba.njit(**options)(sum_sq), "sum_sqs": numba.njit(parallel=True, **options)(sum_sqs)}


def _build_ftrl(numba, options):
    """FtrlUpdateKernel's loop, serial and parallel (two functions: numba's cache keys ignore ``parallel=``)."""

    def ftrl_element(i, weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient, zero):
        """MXNet's FtrlUpdateKernel::Map at ``i``; scalars already in the arrays' dtype (MXNet's DType)."""
        g = grad[i] * rescale_grad
        if clip_gradient >= zero:
            if g > clip_gradient:
                g = clip_gradient
            elif g < -clip_gradient:
                g = -clip_gradient
        n_old = n[i]
        z_new = z[i] + (g - (np.sqrt(n_old + g * g) - np.sqrt(n_old)) * weight[i] / lr)
        n_new = n_old + g * g
        z[i] = z_new
        n[i] = n_new
        sign_l1 = lamda1 if z_new > zero else (-lamda1 if z_new < zero else zero)
        ratio = (sign_l1 - z_new) / ((beta + np.sqrt(n_new)) / lr + wd)
        weight[i] = ratio if abs(z_new) > lamda1 else ratio * zero

    element = numba.njit(inline="always", **options)(ftrl_element)

    def ftrl(weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient, zero):
        for i in range(weight.size):
            element(i, weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient, zero)

    def ftrl_parallel(weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient, zero):
        for i in numba.prange(weight.size):
            element(i, weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient, zero)

    return {"ftrl": numba.njit(**options)(ftrl), "ftrl_parallel": numba.njit(parallel=True, **options)(ftrl_parallel)}


def available(*tensors):
    """Whether the compiled loops can run in place on ``tensors``: numba importable, all CPU, contiguous, float32 or
    float64, one dtype."""
    if not _numba_found():
        return False
    dtype = tensors[0].dtype
    return str(dtype) in ("torch.float32", "torch.float64") and all(
        t.device.type == "cpu" and t.dtype == dtype and t.is_contiguous() for t in tensors)


@functools.lru_cache(maxsize=None)
def _numba_found():
    """Whether numba can be imported (a dependency; without it the torch paths run)."""
    return importlib.util.find_spec("numba") is not None


def flat(tensor):
    """Zero-copy flat numpy view of a contiguous CPU tensor (writes go to the tensor)."""
    return tensor.detach().view(-1).numpy()


def run_in_place(update, tensors, *scalars) -> bool:
    """``update(*flat views of tensors, *scalars)`` (a None tensor passes as None) where the compiled loops can run
    on the tensors (``available``); False, nothing done, where they cannot (the caller's torch path runs then).

    Examples:
        >>> run_in_place(adam_update, (weight, grad, mean, var), lr, wd, 0.9, 0.999, 1e-8, 1.0, -1.0)  # doctest: +SKIP
        True
    """
    if not available(*(t for t in tensors if t is not None)):
        return False
    update(*(flat(t) if t is not None else None for t in tensors), *scalars)
    return True


def _threads():
    """Set numba's threads for a parallel launch to torch's intra-op thread count (within numba's pool); return it."""
    import numba
    import torch

    threads = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(threads)
    return threads


def sum_sq(values, square_in_float=False):
    """MXNet's CPU multi_sum_sq of one flat array: ``sum = float(sum + x*x)`` element by element, in order.

    Args:
        values: A contiguous 1-D float32 or float64 numpy array.
        square_in_float: Round each ``x*x`` to float32 before adding (MXNet's sums over its float32 buffers, here
            for float32 values held in a float64 array).

    Returns:
        The sum as a numpy float32, bit for bit MXNet's.
    """
    return _compiled()["sum_sq"](values, square_in_float)


def sum_sqs(arrays, square_in_float=False):
    """``sum_sq`` of each of ``arrays`` (one dtype), in parallel over tensors, 4 interleaved per thread.

    Args:
        arrays: Contiguous 1-D numpy arrays of one dtype (float32 or float64).
        square_in_float: As for ``sum_sq``.

    Returns:
        A float32 numpy array of the sums, bit for bit MXNet's multi_sum_sq.
    """
    from numba.typed import List

    padded = List(arrays)
    padded.append(np.empty(0, dtype=arrays[0].dtype))  # index len(arrays): the empty filler of short lanes
    out = np.zeros(len(padded), dtype=np.float32)
    kernel = _compiled()["sum_sqs"]
    with _LOCK:
        kernel(padded, _lanes([a.size for a in arrays], _threads()), square_in_float, out)
    return out[:-1]


def _lanes(sizes, threads, width=4):
    """Tensor indices as (threads, groups, width): largest first, groups of ``width``, each to the least-loaded thread.

    ``len(sizes)`` (an empty array) fills the gaps.
    """
    filler = len(sizes)
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    groups = [order[i:i + width] + [filler] * max(0, i + width - len(order)) for i in range(0, len(order), width)]
    shares, loads = [[] for _ in range(threads)], [0] * threads
    for group in groups:
        lightest = loads.index(min(loads))
        shares[lightest].append(group)
        loads[lightest] += sizes[group[0]]
    depth = max(len(share) for share in shares)
    return np.array([share + [[filler] * width] * (depth - len(share)) for share in shares], dtype=np.int64)


def _build_nag(numba, options):
    """MXNet's NAGMomKernel / MP_NAGMomKernel (``nag_mom_update``), serial and parallel."""
    def nag_element(i, weight, grad, mom, lr, wd, momentum, momentum_1, rescale_grad, clip_gradient, zero):
        """One element, in the kernel's order (``momentum_1`` is ``mu + 1``):
        ``m1 = mu*m; w = w - m1 + (mu+1)*(m1 - lr*(g + wd*w));
        m = m1 - lr*(g + wd*w_new)`` with ``g = clip(rescale_grad*grad)``."""
        g = rescale_grad * grad[i]
        if clip_gradient >= zero:
            if g > clip_gradient:
                g = clip_gradient
            elif g < -clip_gradient:
                g = -clip_gradient
        m1 = momentum * mom[i]
        w = weight[i]
        w = w - m1 + momentum_1 * (m1 - lr * (g + wd * w))
        weight[i] = w
        mom[i] = m1 - lr * (g + wd * w)

    element = numba.njit(inline="always", **options)(nag_element)

    def nag(weight, grad, mom, lr, wd, momentum, momentum_1, rescale_grad, clip_gradient, zero):
        for i in range(weight.size):
            element(i, weight, grad, mom, lr, wd, momentum, momentum_1, rescale_grad, clip_gradient, zero)

    def nag_parallel(weight, grad, mom, lr, wd, momentum, momentum_1, rescale_grad, clip_gradient, zero):
        for i in numba.prange(weight.size):
            element(i, weight, grad, mom, lr, wd, momentum, momentum_1, rescale_grad, clip_gradient, zero)

    return {"nag": numba.njit(**options)(nag), "nag_parallel": numba.njit(parallel=True, **options)(nag_parallel)}


def _build_sgd(numba, options):
    """MXNet's MultiSGDKernel (``multi_sgd_update``, ``multi_sgd_mom_update`` and their ``mp`` forms), serial and
    parallel."""
    def sgd_element(i, weight, grad, mom, has_momentum, lr, wd, momentum, rescale_grad, clip_gradient, zero):
        """One element, in the kernel's order: ``m = mu*m - lr*wd*w - lr*clip(rescale*g)`` (without clipping
        ``- (lr*rescale)*g``); ``w = w + m``."""
        w = weight[i]
        m = mom[i] if has_momentum else zero
        if clip_gradient >= zero:
            g = rescale_grad * grad[i]
            if g > clip_gradient:
                g = clip_gradient
            elif g < -clip_gradient:
                g = -clip_gradient
            m = momentum * m - lr * wd * w - lr * g
        else:
            m = momentum * m - lr * wd * w - lr * rescale_grad * grad[i]
        if has_momentum:
            mom[i] = m
        weight[i] = w + m

    element = numba.njit(inline="always", **options)(sgd_element)

    def sgd(weight, grad, mom, has_momentum, lr, wd, momentum, rescale_grad, clip_gradient, zero):
        for i in range(weight.size):
            element(i, weight, grad, mom, has_momentum, lr, wd, momentum, rescale_grad, clip_gradient, zero)

    def sgd_parallel(weight, grad, mom, has_momentum, lr, wd, momentum, rescale_grad, clip_gradient, zero):
        for i in numba.prange(weight.size):
            element(i, weight, grad, mom, has_momentum, lr, wd, momentum, rescale_grad, clip_gradient, zero)

    return {"sgd": numba.njit(**options)(sgd), "sgd_parallel": numba.njit(parallel=True, **options)(sgd_parallel)}


def _build_adam(numba, options):
    """MXNet's AdamUpdateKernel (``adam_update``), serial and parallel."""
    def adam_element(i, weight, grad, mean, var, lr, wd, beta1, beta2, one_minus_beta1, one_minus_beta2, epsilon,
                     rescale_grad, clip_gradient, zero):
        """One element, in the kernel's order: ``g = clip(grad*rescale + w*wd)``; ``m = b1*m + (1-b1)*g``;
        ``v = b2*v + (1-b2)*g*g``; ``w = w - lr*m / (sqrt(v) + eps)``."""
        w = weight[i]
        g = grad[i] * rescale_grad + w * wd
        if clip_gradient >= zero:
            if g > clip_gradient:
                g = clip_gradient
            elif g < -clip_gradient:
                g = -clip_gradient
        m = beta1 * mean[i] + one_minus_beta1 * g
        v = beta2 * var[i] + one_minus_beta2 * g * g
        mean[i] = m
        var[i] = v
        weight[i] = w - lr * m / (np.sqrt(v) + epsilon)

    element = numba.njit(inline="always", **options)(adam_element)

    def adam(weight, grad, mean, var, lr, wd, beta1, beta2, one_minus_beta1, one_minus_beta2, epsilon,
             rescale_grad, clip_gradient, zero):  # numba calls no closure with *args: every argument is spelled out
        for i in range(weight.size):
            element(i, weight, grad, mean, var, lr, wd, beta1, beta2, one_minus_beta1, one_minus_beta2, epsilon,
                    rescale_grad, clip_gradient, zero)

    def adam_parallel(weight, grad, mean, var, lr, wd, beta1, beta2, one_minus_beta1, one_minus_beta2, epsilon,
                      rescale_grad, clip_gradient, zero):
        for i in numba.prange(weight.size):
            element(i, weight, grad, mean, var, lr, wd, beta1, beta2, one_minus_beta1, one_minus_beta2, epsilon,
                    rescale_grad, clip_gradient, zero)

    return {"adam": numba.njit(**options)(adam), "adam_parallel": numba.njit(parallel=True, **options)(adam_parallel)}


def _launch(name, size, *args):
    """Run kernel ``name`` on ``args``: its serial loop below PARALLEL_MIN elements, else its parallel loop (on torch's
    thread count, under the launch lock)."""
    kernels = _compiled()
    if size < PARALLEL_MIN:
        kernels[name](*args)
        return
    with _LOCK:
        _threads()
        kernels[name + "_parallel"](*args)


def _build_rmsprop(numba, options):
    """MXNet's RMSPropUpdateKernel (``rmsprop_update``) and RMSPropAlexUpdateKernel (``rmspropalex_update``, the
    centered form), serial and parallel; ``n``, ``g`` and ``delta`` are the three state arrays (``g``/``delta``
    unused by the plain form)."""
    def element(i, weight, grad, n, g, delta, centered, lr, wd, gamma1, gamma2, one_minus_gamma1, epsilon,
                rescale_grad, clip_gradient, clip_weights, zero):
        """One element in the kernels' order: ``gr = clip(rescale*grad + wd*w)``; plain: ``n = (1-g1)*(gr*gr) +
        g1*n; w = w - lr*(gr / sqrt(n + eps))``; centered: ``n = (1-g1)*gr*gr + g1*n; g = (1-g1)*gr + g1*g;
        delta = g2*delta - lr*gr / sqrt(n - g*g + eps); w = w + delta``; then ``clip(w, clip_weights)``."""
        w = weight[i]
        gr = rescale_grad * grad[i] + wd * w
        if clip_gradient >= zero:
            if gr > clip_gradient:
                gr = clip_gradient
            elif gr < -clip_gradient:
                gr = -clip_gradient
        if centered:
            nn = one_minus_gamma1 * gr * gr + gamma1 * n[i]
            gg = one_minus_gamma1 * gr + gamma1 * g[i]
            d = gamma2 * delta[i] - (lr * gr / np.sqrt(nn - gg * gg + epsilon))
            n[i] = nn
            g[i] = gg
            delta[i] = d
            w = w + d
        else:
            nn = one_minus_gamma1 * (gr * gr) + gamma1 * n[i]
            n[i] = nn
            w = w - lr * (gr / np.sqrt(nn + epsilon))
        if clip_weights >= zero:
            if w > clip_weights:
                w = clip_weights
            elif w < -clip_weights:
                w = -clip_weights
        weight[i] = w

    one = numba.njit(inline="always", **options)(element)

    def rmsprop(weight, grad, n, g, delta, centered, lr, wd, gamma1, gamma2, one_minus_gamma1, epsilon,
                rescale_grad, clip_gradient, clip_weights, zero):  # every argument spelled out (no *args closure)
        for i in range(weight.size):
            one(i, weight, grad, n, g, delta, centered, lr, wd, gamma1, gamma2, one_minus_gamma1, epsilon,
                rescale_grad, clip_gradient, clip_weights, zero)

    def rmsprop_parallel(weight, grad, n, g, delta, centered, lr, wd, gamma1, gamma2, one_minus_gamma1, epsilon,
                         rescale_grad, clip_gradient, clip_weights, zero):
        for i in numba.prange(weight.size):
            one(i, weight, grad, n, g, delta, centered, lr, wd, gamma1, gamma2, one_minus_gamma1, epsilon,
                rescale_grad, clip_gradient, clip_weights, zero)

    return {"rmsprop": numba.njit(**options)(rmsprop),
            "rmsprop_parallel": numba.njit(parallel=True, **options)(rmsprop_parallel)}


def rmsprop_update(weight, grad, n, g, delta, lr, wd, gamma1, gamma2, epsilon, rescale_grad, clip_gradient,
                   clip_weights):
    """MXNet's rmsprop_update (``g`` and ``delta`` None) or rmspropalex_update (centered), in place on contiguous 1-D
    numpy arrays of one dtype (float32 or float64).

    Args:
        weight, grad, n, g, delta: The flat arrays; the weight and the states are updated.
        lr, wd, gamma1, gamma2, epsilon, rescale_grad: As MXNet parsed them (float32 values).
        clip_gradient, clip_weights: Bounds, or negative numbers for none (MXNet clips when a bound is >= 0).
    """
    kind = weight.dtype.type
    lr, wd, gamma1, gamma2, epsilon, rescale_grad, clip_gradient, clip_weights, zero = (
        kind(np.float32(v)) for v in (lr, wd, gamma1, gamma2, epsilon, rescale_grad, clip_gradient, clip_weights, 0))
    centered = g is not None
    g, delta = (g, delta) if centered else (n, n)  # unused by the plain form
    scalars = (centered, lr, wd, gamma1, gamma2, kind(1) - gamma1, epsilon, rescale_grad, clip_gradient,
               clip_weights, zero)
    _launch("rmsprop", weight.size, weight, grad, n, g, delta, *scalars)


def adam_update(weight, grad, mean, var, lr, wd, beta1, beta2, epsilon, rescale_grad, clip_gradient):
    """MXNet's adam_update (also on a float32 master under multi_precision), in place on contiguous 1-D numpy arrays
    of one dtype (float32 or float64).

    Args:
        weight, grad, mean, var: The flat arrays; ``weight``, ``mean`` and ``var`` are updated.
        lr: The step's lr with the bias correction folded in, and wd, beta1, beta2, epsilon, rescale_grad: as MXNet
            parsed them (float32 values).
        clip_gradient: The bound, or a negative number for no clipping (MXNet clips when it is >= 0).
    """
    kind = weight.dtype.type
    lr, wd, beta1, beta2, epsilon, rescale_grad, clip_gradient, zero = (
        kind(np.float32(v)) for v in (lr, wd, beta1, beta2, epsilon, rescale_grad, clip_gradient, 0.0))
    scalars = (lr, wd, beta1, beta2, kind(1) - beta1, kind(1) - beta2, epsilon, rescale_grad, clip_gradient, zero)
    _launch("adam", weight.size, weight, grad, mean, var, *scalars)


def sgd_update(weight, grad, mom, lr, wd, momentum, rescale_grad, clip_gradient):
    """MXNet's multi_sgd(_mom)_update (or its mp form on a float32 master), in place on contiguous 1-D numpy arrays of
    one dtype (float32 or float64).

    Args:
        weight, grad: The flat arrays; ``weight`` is updated.
        mom: The flat momentum (updated), or None (multi_sgd_update: no momentum).
        lr, wd: The lrs/wds entries (float32 values), momentum, rescale_grad: as MXNet parsed them.
        clip_gradient: The bound, or a negative number for no clipping (MXNet clips when it is >= 0).
    """
    kind = weight.dtype.type
    scalars = [kind(np.float32(v)) for v in (lr, wd, momentum, rescale_grad, clip_gradient, 0.0)]
    has_momentum = mom is not None
    mom = mom if has_momentum else np.zeros(1, dtype=weight.dtype)
    _launch("sgd", weight.size, weight, grad, mom, has_momentum, *scalars)


def nag_update(weight, grad, mom, lr, wd, momentum, rescale_grad, clip_gradient):
    """MXNet's nag_mom_update (or mp_nag_mom_update on a float32 master), in place on contiguous 1-D numpy arrays of
    one dtype (float32 or float64).

    Args:
        weight, grad, mom: The flat arrays; ``weight`` and ``mom`` are updated.
        lr, wd, momentum, rescale_grad: Hyperparameters as MXNet parsed them (float32 values).
        clip_gradient: The bound, or a negative number for no clipping (MXNet clips when it is >= 0).
    """
    kind = weight.dtype.type
    scalars = [kind(np.float32(v)) for v in (lr, wd, momentum, rescale_grad, clip_gradient, 0.0)]
    scalars.insert(3, scalars[2] + kind(1))  # momentum + 1 in the arrays' dtype (numba would promote a bare 1)
    _launch("nag", weight.size, weight, grad, mom, *scalars)


def ftrl_update(weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient):
    """MXNet's FtrlUpdateKernel, in place on contiguous 1-D numpy arrays of one dtype (float32 or float64).

    Args:
        weight, grad, z, n: The flat arrays; ``weight``, ``z`` and ``n`` are updated.
        lr, wd, lamda1, beta, rescale_grad: Hyperparameters, rounded to float32 here (MXNet's are C floats).
        clip_gradient: The bound, or a negative number for no clipping (MXNet clips when it is >= 0).
    """
    kind = weight.dtype.type
    scalars = [kind(np.float32(v)) for v in (lr, wd, lamda1, beta, rescale_grad, clip_gradient, 0.0)]
    _launch("ftrl", weight.size, weight, grad, z, n, *scalars)
