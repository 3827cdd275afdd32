"""Compiled CPU loops (numba, imported on first use) that replay MXNet 1.9.1's C++ kernels operation by operation.

Two loops live here:

- ``sum_sq``: MXNet's CPU ``multi_sum_sq`` (``src/operator/contrib/multi_sum_sq.cc``, ``CalcSumSq``), which LAMB's
  ``multi_lamb_update`` calls for the trust ratio's norms. Each tensor is summed by ONE thread, element by element
  in order, into a C ``float``: ``sum = float(sum + x*x)`` with ``x*x`` in the tensor's dtype. MXNet's OpenMP loop
  runs over tensors only, so the result does not depend on MXNet's thread count. torch's pairwise/vectorized sums
  differ from it by ~1e-7 relative, which is what held LAMB in float64 to 2e-9 of MXNet after 100 steps.
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

_LOCK = threading.Lock()
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
    """Jit the loops: sum_sq (serial), ftrl (serial and parallel); numba's threading layer set as documented."""
    import numba

    if numba.config.THREADING_LAYER == "default":
        numba.config.THREADING_LAYER = "forksafe"

    def sum_sq(values, square_in_float):
        """Sum of squares of ``values`` in a float accumulator, in order (``square_in_float``: x*x rounded first)."""
        total = np.float32(0.0)
        for j in range(values.size):
            square = values[j] * values[j]
            if square_in_float:
                total = np.float32(np.float64(total) + np.float64(np.float32(square)))
            else:
                total = np.float32(np.float64(total) + np.float64(square))
        return total

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

    options = {"nogil": True, "cache": True, "error_model": "numpy"}  # numpy errors: x/0 is inf or nan as in C
    element = numba.njit(inline="always", **options)(ftrl_element)

    def ftrl(weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient, zero):
        for i in range(weight.size):
            element(i, weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient, zero)

    def ftrl_parallel(weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient, zero):
        for i in numba.prange(weight.size):  # its own function: numba's cache keys ignore parallel=
            element(i, weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient, zero)

    return {"sum_sq": numba.njit(**options)(sum_sq), "ftrl": numba.njit(**options)(ftrl),
            "ftrl_parallel": numba.njit(parallel=True, **options)(ftrl_parallel)}


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


def _threads():
    """numba threads for a parallel launch: torch's intra-op thread count, within numba's pool."""
    import numba
    import torch

    return max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))


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


def ftrl_update(weight, grad, z, n, lr, wd, lamda1, beta, rescale_grad, clip_gradient):
    """MXNet's FtrlUpdateKernel, in place on contiguous 1-D numpy arrays of one dtype (float32 or float64).

    Args:
        weight, grad, z, n: The flat arrays; ``weight``, ``z`` and ``n`` are updated.
        lr, wd, lamda1, beta, rescale_grad: Hyperparameters, rounded to float32 here (MXNet's are C floats).
        clip_gradient: The bound, or a negative number for no clipping (MXNet clips when it is >= 0).
    """
    kind = weight.dtype.type
    scalars = [kind(np.float32(v)) for v in (lr, wd, lamda1, beta, rescale_grad, clip_gradient, 0.0)]
    kernels = _compiled()
    if weight.size < PARALLEL_MIN:
        kernels["ftrl"](weight, grad, z, n, *scalars)
        return
    import numba

    with _LOCK:
        numba.set_num_threads(_threads())
        kernels["ftrl_parallel"](weight, grad, z, n, *scalars)
