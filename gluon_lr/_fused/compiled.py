"""Back-end: the compiled numba kernels of ``mxupdate.kernels`` (MXNet's arithmetic, shared with migrate's exact
optimizers) for sgd, sgd-momentum, nag and adam on CPU: one launch per table, cut into shares for the threads of
``mxupdate.threads``."""
import warnings

import numpy as np
from mxnet import optimizer as mxopt

import mxupdate

from .base import clip_of, mx_float, param_float32_array
from .table import Table
from mxupdate.threads import MIN_SPLIT, SHARES_PER_THREAD, Shares, run_shares, thread_count


def _sgd_consts(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, zero) for ``mxupdate.kernels.sgd``."""
    f = mx_float(dtype)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), f(0)]


def _sgd_single_consts(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, one) for ``mxupdate.kernels.sgd_single``."""
    f = mx_float(dtype)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), f(1)]


def _mom_consts(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, momentum, momentum + 1) for ``mxupdate.kernels.sgd_mom``/``nag_mom`` (the sum in the data's
    dtype)."""
    f = mx_float(dtype)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), f(optimizer.momentum), f(optimizer.momentum) + f(1)]


def _adam_consts_compiled(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, beta1, beta2, 1 - beta1, 1 - beta2, epsilon) for ``mxupdate.kernels.adam`` (differences in the
    data's dtype, as ``AdamUpdateKernel`` computes them)."""
    f = mx_float(dtype)
    beta1, beta2 = f(optimizer.beta1), f(optimizer.beta2)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), beta1, beta2, f(1) - beta1, f(1) - beta2,
            f(optimizer.epsilon)]


def _clip_value(optimizer) -> float:
    """clip_gradient as MXNet's kernels receive it: the bound, or -1 (off) when unset, 0 or negative."""
    clip = clip_of(optimizer)
    return -1.0 if clip is None else clip


def _tuple_floats(values: list, dtype: np.dtype) -> np.ndarray:
    """Values of an MXNet operator's ``Tuple<float>`` parameter (``lrs``/``wds`` of ``multi_sgd_*``) as they reach a
    kernel on ``dtype`` data: read by a C++ stream, correctly rounded to float32, then cast (unlike a scalar ``float``
    parameter, ``_scalar_floats``)."""
    return np.array(values, dtype=np.float32).astype(dtype, copy=False)


def _scalar_floats(values: list, dtype: np.dtype) -> np.ndarray:
    """Values of an MXNet operator's scalar ``float`` parameter (``lr``/``wd`` of ``nag_mom_update``,
    ``adam_update``) as they reach a kernel on ``dtype`` data: parsed by MXNet into float32
    (``base.param_float32``), then cast."""
    return param_float32_array(values).astype(dtype, copy=False)


#: (optimizer class, number of state slots) -> (name in ``mxupdate.kernels``, constants, how lr/wd reach the kernel).
#: Adam's lr is bias-corrected before. Stock SGD calls ``multi_sgd_update``/``multi_sgd_mom_update`` (lr and wd in tuples);
#: NAG and Adam call per-tensor operators (lr and wd scalar ``float`` parameters).
_COMPILED = {(mxopt.SGD, 0): ("sgd", _sgd_consts, _tuple_floats),
             (mxopt.SGD, 1): ("sgd_mom", _mom_consts, _tuple_floats),
             (mxopt.NAG, 0): ("sgd_single", _sgd_single_consts, _scalar_floats),
             (mxopt.NAG, 1): ("nag_mom", _mom_consts, _scalar_floats),
             (mxopt.Adam, 2): ("adam", _adam_consts_compiled, _scalar_floats)}


def load_kernels():
    """The ``mxupdate.kernels`` module (imports numba, loads or compiles the kernels), or None with a warning if numba
    is missing: the numpy and MXNet implementations then run."""
    try:
        kernels = mxupdate.load_kernels()
    except ImportError as error:
        warnings.warn(f"LrTrainer: the compiled update kernels need numba ({error}); the fast update path runs its "
                      f"slower numpy/MXNet kernels instead. Install numba==0.60.0 to get them.")
        return None
    return kernels


def load_array_calls():
    """The ``_array_calls`` module (MXNet's per-array calls in compiled loops), or None if numba is missing (the
    ctypes calls then run; ``load_kernels`` warns)."""
    try:
        from . import _array_calls
    except ImportError:
        return None
    return _array_calls


def compiled_applies(optimizer, ctx, dtype: np.dtype, slot_count: int) -> bool:
    """Whether a compiled kernel exists for this optimizer, context, dtype and number of state arrays (CPU, float32 or
    float64; not float16, whose update runs on a float32 master copy)."""
    return (type(optimizer), slot_count) in _COMPILED and ctx.device_type == "cpu" and dtype in (np.float32, np.float64)


def compiled_update(kernels, table: Table, optimizer, lrs: list, wds: list, calls) -> None:
    """Update every tensor of ``table`` (after ``compiled_applies`` and ``base.wait_all``) with one launch of the
    compiled kernel of ``kernels`` (the loaded ``mxupdate.kernels``) on ``thread_count()`` threads, the calling thread
    included, each taking the next of ``SHARES_PER_THREAD`` shares per thread as it finishes one. ``lrs``/``wds``:
    per tensor of the table, as the optimizer computed them; ``calls``: the ``base.ArrayCalls`` that asks MXNet for the
    addresses. The cut into shares is worked out at the table's first update and kept with it (``table.derived``)."""
    name, consts_of, floats = _COMPILED[(type(optimizer), table.slot_count)]
    kernel, dtype = getattr(kernels, name), table.dtype
    consts = np.array(consts_of(optimizer, dtype), dtype=dtype)
    use_clip = bool(consts[1] >= 0)
    threads = thread_count() if table.size >= MIN_SPLIT else 1
    cut = table.derived.get(("shares", threads))
    if cut is None:
        parts = threads * SHARES_PER_THREAD if threads > 1 else 1
        cut = table.derived[("shares", threads)] = Shares(table.lengths, 2 + table.slot_count, dtype, parts)
    addresses, _ = table.addresses(calls)
    cut.fill(addresses, floats(lrs, dtype), floats(wds, dtype))
    run_shares(kernel, [(*view, consts, use_clip) for view in cut.views], threads)
