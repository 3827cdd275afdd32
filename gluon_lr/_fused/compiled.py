"""Back-end: compiled numba kernels (``_kernels``) for sgd, sgd-momentum, nag and adam on CPU, one share per core."""
import warnings

import numpy as np
from mxnet import optimizer as mxopt

from .base import UNSET, Group, clip_of, mx_float
from .threads import MIN_SPLIT, pool, shares, thread_count


def _sgd_consts(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, zero) for ``_kernels.sgd``."""
    f = mx_float(dtype)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), f(0)]


def _sgd_single_consts(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, one) for ``_kernels.sgd_single``."""
    f = mx_float(dtype)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), f(1)]


def _mom_consts(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, momentum, momentum + 1) for ``_kernels.sgd_mom``/``nag_mom`` (the sum in the data's dtype)."""
    f = mx_float(dtype)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), f(optimizer.momentum), f(optimizer.momentum) + f(1)]


def _adam_consts_compiled(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, beta1, beta2, 1 - beta1, 1 - beta2, epsilon) for ``_kernels.adam`` (differences in the data's
    dtype, as ``AdamUpdateKernel`` computes them)."""
    f = mx_float(dtype)
    beta1, beta2 = f(optimizer.beta1), f(optimizer.beta2)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), beta1, beta2, f(1) - beta1, f(1) - beta2,
            f(optimizer.epsilon)]


def _clip_value(optimizer) -> float:
    """clip_gradient as MXNet's kernels receive it: the bound, or -1 (off) when unset, 0 or negative."""
    clip = clip_of(optimizer)
    return -1.0 if clip is None else clip


#: (optimizer class, number of state slots) -> (name in ``_kernels``, constants). Adam's lr is bias-corrected before.
_COMPILED = {(mxopt.SGD, 0): ("sgd", _sgd_consts), (mxopt.SGD, 1): ("sgd_mom", _mom_consts),
             (mxopt.NAG, 0): ("sgd_single", _sgd_single_consts), (mxopt.NAG, 1): ("nag_mom", _mom_consts),
             (mxopt.Adam, 2): ("adam", _adam_consts_compiled)}


def _load_kernels():
    """The ``_kernels`` module (imports numba, loads or compiles the kernels), or None with a warning if numba is
    missing: the numpy and MXNet implementations then run."""
    try:
        from . import _kernels
    except ImportError as error:
        warnings.warn(f"LrTrainer: the compiled update kernels need numba ({error}); the fast update path runs its "
                      f"slower numpy/MXNet kernels instead. Install numba==0.60.0 to get them.")
        return None
    return _kernels


def compiled_kernel(optimizer, group: Group):
    """(kernel, constants) for this optimizer and group (CPU, float32 or float64, no float16 master copy), or None."""
    spec = _COMPILED.get((type(optimizer), len(group.slots)))
    if spec is None or group.ctx.device_type != "cpu" or group.dtype not in (np.float32, np.float64):
        return None
    if group.compiled is UNSET:
        group.compiled = _load_kernels()
    return None if group.compiled is None else (getattr(group.compiled, spec[0]), spec[1])


def compiled_update(compiled, group: Group, optimizer, runs: list) -> None:
    """One compiled pass over ``runs`` [(start, stop, lr, wd)], cut into one share per thread (``thread_count()``); the
    calling thread runs the first share."""
    kernel, consts_of = compiled
    dtype = np.dtype(group.dtype)
    consts = np.array(consts_of(optimizer, dtype), dtype=dtype)
    use_clip = bool(consts[1] >= 0)
    arrays = group.numpy()
    parts = thread_count() if sum(hi - lo for lo, hi, _, _ in runs) >= MIN_SPLIT else 1
    calls = [(*arrays, *share, consts, use_clip) for share in shares(runs, parts, dtype)]
    futures = [pool(len(calls) - 1).submit(kernel, *call) for call in calls[1:]]
    kernel(*calls[0])
    for future in futures:
        future.result()
