"""The fast update path of LrTrainer: flat contiguous buffers, one kernel call per run of equal (lr, wd).

For each context, the parameters that qualify are packed into flat 1-D buffers, one per (dtype, state layout):
weights, gradients and every optimizer-state slot. Each Parameter's ``data()``/``grad()`` and each
``updater.states[index]`` then ARE views (slice + reshape) into those buffers, so everything that reads or writes them
in place (autograd, kvstore push/pull, ``set_data``, ``load_parameters``, freezing's snapshot/restore) keeps working.
Inside a buffer the parameters are ordered by (lr_mult, wd_mult, index); a step computes every parameter's lr and wd
exactly as the optimizer does (update counts, schedule, Adam's bias correction) and calls one kernel per run of
consecutive parameters with equal values, so multipliers may change at any time.

Packing happens when the trainer is built (if the parameters are initialized and the kvstore will not update them),
else at the first update; later only for parameters whose ``grad_req`` leaves ``'null'`` through ``trainer.unfreeze``
(``FusedUpdate.regrad``). Packed arrays are never replaced again, because a ``hybridize(static_alloc=True,
static_shape=True)`` graph keeps writing the gradient arrays it bound (``FusedUpdate`` says when it rebinds): a
parameter frozen with ``grad_req='null'`` stays in its buffer, dormant, and gets its views back on unfreeze; arrays
replaced behind the trainer's back (``grad_req`` set directly, ``initialize(force_reinit=True)``) send that parameter
to the stock Updater. ``load_states`` only copies the loaded states into the views. A static_alloc graph built BEFORE
packing keeps writing the old gradient arrays: that is detected on the next update, the original arrays are given
back, a warning says so, and the stock loop runs from then on.

Kernels, with the same arithmetic as the stock loop (tests check each against the stock trainer: max diff 0.0):

- sgd (momentum or not), nag, adam, float32 and float64 on CPU: compiled kernels (``gluon_lr._kernels``, numba,
  imported at the first CPU update), ONE pass over memory per flat group, each share of the runs on its own thread
  (``_threads()``: OMP_NUM_THREADS or the cores), with the operations, order and rounding of MXNet's
  ``MultiSGDKernel``/``SGDMomKernel``, ``SGDKernel``, ``NAGMomKernel`` and ``AdamUpdateKernel``. On resnet50_v1
  shapes (25.6M float32 parameters, 2 cores, ``bench/bench_step.py``) a step takes 0.20x the stock trainer's time for
  sgd-momentum and 0.16x for adam, 1.14x and 1.0x (paired per rep: 1.17x, 1.12x) the memory-bandwidth floor, as
  torch's fused optimizers do. The first step of a process also imports numba and loads the machine code from its
  cache (about 0.7 s in all), or compiles it, about a second per kernel and dtype, where no cache exists yet.
- the same on other devices, or without numba (a warning says so): MXNet's per-tensor operator (``sgd_mom_update``,
  ``adam_update``, ...; plain sgd: ``multi_sgd_update``, as stock aggregates it) on each flat run; for float32
  sgd-momentum and adam on CPU also a numpy implementation in cache-sized chunks (many passes over memory, but
  MXNet's CPU ``adam_update`` is compute-bound): each flat group times both on its first steps and keeps the
  faster. Stock Gluon's 4-tensor ``multi_sgd_mom_update`` is much slower on CPU than either.
- rmsprop (plain and centered): MXNet's per-tensor operator on each flat run; adagrad: the stock optimizer's own
  NDArray expressions on each flat run.
- float16 with ``multi_precision=True``: the ``mp_*`` operators for sgd/nag; the stock cast-update-cast recipe for
  adam/rmsprop/adagrad; the float32 master weights live in a flat buffer too.

Falls back to the stock loop (``gluon.Trainer._update``) for the whole step when: the kvstore updates the weights
(``update_on_kvstore=True``); an AMP loss scaler is attached; numpy-array mode is on; the optimizer is not exactly
one of ``SGD, NAG, Adam, RMSProp, AdaGrad`` (a subclass may change ``update``); an lr scheduler meets parameters
with unequal update counts; or after the static_alloc case above. Falls back per parameter (the stock Updater updates
it, in the same step) for: sparse storage, dtypes other than float32 and float64 (float16 only with
``multi_precision=True``), uninitialized parameters, arrays replaced behind the trainer's back, states of another
structure loaded by ``load_states``; ``grad_req='null'`` parameters are not updated.
"""
import ctypes
import math
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import mxnet as mx
import numpy as np
from mxnet import autograd, nd
from mxnet import optimizer as mxopt
from mxnet.base import _LIB, check_call

#: Elements per numpy chunk: six float32 arrays of this length stay in a 2 MiB L2 cache.
_CHUNK = 1 << 15
#: Stock Gluon's message for a stale gradient (kept word for word, the error type too).
_STALE = ("Gradient of Parameter `%s` on context %s has not been updated by backward since last `step`. This could "
          "mean a bug in your model that made it only use a subset of the Parameters (Blocks) for this iteration. "
          "If you are intentionally only using a subset, call step with ignore_stale_grad=True to suppress this "
          "warning and skip updating of Parameters with stale gradient")
_POOL = {}
#: ``_Group.compiled`` before the first update looked the compiled kernels up.
_UNSET = object()
#: Flat runs shorter than this (elements, in all) run on the calling thread only.
_MIN_SPLIT = 1 << 16


# ----------------------------------------------------------------------------------------------- state structures
def _leaves(state) -> list:
    """The NDArrays of an optimizer state (None, an NDArray, or nested tuples/lists of them), depth first."""
    if isinstance(state, nd.NDArray):
        return [state]
    if isinstance(state, (tuple, list)):
        return [leaf for item in state for leaf in _leaves(item)]
    return []


def _signature(state):
    """A hashable description of a state's structure and leaf dtypes/storage; None for unsupported states."""
    if state is None:
        return "none"
    if isinstance(state, nd.NDArray):
        return ("array", np.dtype(state.dtype).name) if state.stype == "default" else None
    if isinstance(state, (tuple, list)):
        inner = tuple(_signature(item) for item in state)
        return None if None in inner else (type(state).__name__, inner)
    return None


def _rebuild(state, leaves: list):
    """``state`` with its NDArray leaves replaced, in order, by ``leaves`` (consumed from the front)."""
    if isinstance(state, nd.NDArray):
        return leaves.pop(0)
    if isinstance(state, (tuple, list)):
        return type(state)(_rebuild(item, leaves) for item in state)
    return state


def _numpy_view(array: nd.NDArray) -> np.ndarray:
    """A writable numpy view of a dense CPU NDArray's memory (no copy); the caller keeps ``array`` alive."""
    array.wait_to_read()
    ctype = np.ctypeslib.as_ctypes_type(np.dtype(array.dtype))
    return np.ctypeslib.as_array((ctype * array.size).from_address(_data_pointer(array)))


def _data_pointer(array: nd.NDArray) -> int:
    """The address of a dense NDArray's first element (views of one buffer differ by their offsets)."""
    pointer = ctypes.c_void_p()
    check_call(_LIB.MXNDArrayGetData(array.handle, ctypes.byref(pointer)))
    return pointer.value


def _wait_to_write(arrays) -> None:
    """Block until MXNet has finished every pending read and write of ``arrays`` (before numpy writes them)."""
    for array in arrays:
        check_call(_LIB.MXNDArrayWaitToWrite(array.handle))


# ------------------------------------------------------------------------------------------------- flat groups
class _Member:
    """One parameter inside a flat group: where it lives and the view objects installed on it."""

    __slots__ = ("index", "param", "offset", "size", "weight", "grad", "state", "old")

    def __init__(self, index, param, offset, size):
        self.index, self.param, self.offset, self.size = index, param, offset, size
        self.weight = self.grad = self.state = self.old = None


class _Group:
    """Flat buffers on one context for parameters sharing (dtype, state structure)."""

    def __init__(self, ctx, dtype, members, template):
        self.ctx, self.dtype, self.members, self.template = ctx, dtype, members, template
        self.total = sum(m.size for m in members)
        self.weight = nd.zeros((self.total,), ctx=ctx, dtype=dtype)
        self.grad = nd.zeros((self.total,), ctx=ctx, dtype=dtype)
        self.slots = [nd.zeros((self.total,), ctx=ctx, dtype=leaf.dtype) for leaf in _leaves(template)]
        self.choice = _Choice()
        self.compiled = _UNSET
        self._numpy = None

    def view(self, flat: nd.NDArray, member: _Member) -> nd.NDArray:
        """The view of ``member`` in ``flat``, shaped like the parameter."""
        return flat[member.offset:member.offset + member.size].reshape(member.param.shape)

    def numpy(self) -> list:
        """Numpy views of [weight, grad, *slots] (CPU only), made once."""
        if self._numpy is None:
            self._numpy = [_numpy_view(flat) for flat in [self.weight, self.grad] + self.slots]
        return self._numpy


def _qualifies(param, k: int, optimizer) -> bool:
    """Whether ``param``'s copy on context ``k`` can live in a flat buffer (else the stock Updater updates it)."""
    if param.grad_req == "null" or param._data is None or param._grad is None or param._deferred_init:
        return False
    data, grad = param._data[k], param._grad[k]
    if data.stype != "default" or grad.stype != "default":
        return False
    dtype = np.dtype(data.dtype)
    return dtype in (np.float32, np.float64) or (dtype == np.float16 and bool(optimizer.multi_precision))


def _pack(ctx, k: int, entries: list, updater) -> _Group:
    """Build one group: copy weights, gradients and states in, then install the views on params and updater."""
    entries = sorted(entries, key=lambda e: (e[1].lr_mult, e[1].wd_mult, e[0]))
    members, offset = [], 0
    for index, param in entries:
        members.append(_Member(index, param, offset, param._data[k].size))
        offset += param._data[k].size
    group = _Group(ctx, param._data[k].dtype, members, updater.states[entries[0][0]])
    fresh = [m.param._data[k]._fresh_grad for m in members]
    for m in members:
        old_data, old_grad = m.param._data[k], m.param._grad[k]
        group.weight[m.offset:m.offset + m.size] = old_data.reshape((-1,))
        group.grad[m.offset:m.offset + m.size] = old_grad.reshape((-1,))
        m.weight, m.grad = group.view(group.weight, m), group.view(group.grad, m)
        m.old = (old_data, old_grad, old_grad.asnumpy())
        m.param._data[k], m.param._grad[k] = m.weight, m.grad
        leaves = _leaves(updater.states[m.index])
        views = [group.view(slot, m) for slot in group.slots]
        for view, leaf in zip(views, leaves):
            leaf.copyto(view)
        m.state = _rebuild(updater.states[m.index], views)
        updater.states[m.index] = m.state
        updater.states_synced[m.index] = True
    autograd.mark_variables([m.weight for m in members], [m.grad for m in members],
                            [m.param.grad_req for m in members])
    for m, flag in zip(members, fresh):
        m.weight._fresh_grad = flag
    return group


def _reinstall(k: int, m: _Member) -> None:
    """Give ``m``'s Parameter its views on context ``k`` back, with the values of the arrays it holds now.

    For a ``grad_req`` that just left ``'null'``: MXNet then made a new gradient array and marked the detached data
    with it (the detached data is the view's memory unless it was replaced while frozen). A Parameter whose data no
    longer fits the view is left to the stock Updater (``FusedUpdate._live`` is False for it).
    """
    param = m.param
    data, grad = param._data[k], param._grad[k]
    if data is m.weight and grad is m.grad:
        return
    fits = data.shape == m.weight.shape and data.dtype == m.weight.dtype
    if not fits or data.stype != "default" or grad.stype != "default":
        return
    fresh = data._fresh_grad
    if _data_pointer(data) != _data_pointer(m.weight):
        data.copyto(m.weight)
    grad.copyto(m.grad)
    param._data[k], param._grad[k], m.old = m.weight, m.grad, None
    autograd.mark_variables([m.weight], [m.grad], [param.grad_req])
    m.weight._fresh_grad = fresh


def _kvstore_may_update(trainer) -> bool:
    """Before the kvstore exists: whether it may update the weights (packing would then only cost memory).

    Gluon's choice, mirrored from the settings: an explicit ``update_on_kvstore``; else no kvstore (None, or a non-dist
    name with one context) never updates, and any other kvstore may (Gluon's default is to update there).
    """
    config = trainer._kvstore_params
    if config["update_on_kvstore"] is not None:
        return bool(config["update_on_kvstore"])
    kvstore = config["kvstore"]
    return not (kvstore is None or (isinstance(kvstore, str) and "dist" not in kvstore and len(trainer._contexts) == 1))


def _pool(threads: int) -> ThreadPoolExecutor:
    """A shared thread pool for the numpy and compiled kernels, one per process (a forked child has none of its
    parent's threads, so it makes its own)."""
    key = (os.getpid(), threads)
    if key not in _POOL:
        _POOL[key] = ThreadPoolExecutor(threads, thread_name_prefix="gluon_lr_fused")
    return _POOL[key]


def _threads() -> int:
    """Threads for numpy kernels: OMP_NUM_THREADS (what MXNet uses) or the number of cores."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "") or os.cpu_count() or 1))
    except ValueError:
        return max(1, os.cpu_count() or 1)


# ------------------------------------------------------------------------------------------------------ kernels
def _common(optimizer) -> dict:
    """rescale_grad and clip_gradient as the stock optimizer passes them (clip only when truthy)."""
    kwargs = {"rescale_grad": optimizer.rescale_grad}
    if optimizer.clip_gradient:
        kwargs["clip_gradient"] = optimizer.clip_gradient
    return kwargs


def _master(kernel):
    """Wrap a float32 kernel in the stock multi-precision recipe: update the float32 master copy, cast back."""
    def run(optimizer, weight, grad, slots, lr, wd, mp):
        if not mp:
            return kernel(optimizer, weight, grad, slots, lr, wd)
        master = slots[0]
        kernel(optimizer, master, grad.astype(np.float32), slots[1:], lr, wd)
        nd.cast(master, dtype=weight.dtype, out=weight)
    run.__doc__ = kernel.__doc__
    return run


def _momentum_update(momentum_op, mp_momentum_op, optimizer, weight, grad, slots, lr, wd, mp):
    """The SGD family on one run: ``momentum_op`` (``mp_momentum_op`` for float16 master weights), or plain
    ``sgd_update``/``mp_sgd_update`` without momentum. ``lazy_update`` is passed where the optimizer has it."""
    kwargs = _common(optimizer)
    if optimizer.momentum > 0:
        kwargs["momentum"] = optimizer.momentum
    if mp:
        op = mp_momentum_op if len(slots) == 2 else nd.mp_sgd_update
    else:
        op = momentum_op if slots else nd.sgd_update
        if hasattr(optimizer, "lazy_update"):
            kwargs["lazy_update"] = optimizer.lazy_update
    op(weight, grad, *slots, out=weight, lr=lr, wd=wd, **kwargs)


def _sgd(optimizer, weight, grad, slots, lr, wd, mp):
    """SGD with or without momentum: ``sgd_mom_update``/``sgd_update`` (``mp_*`` for float16 master weights).

    Without momentum, stock SGD aggregates (``aggregate_num > 1``) into ``multi_sgd_update``, whose kernel rounds
    differently from ``sgd_update``'s; the same operator runs here then, on the whole flat run.
    """
    if not mp and not slots and optimizer.aggregate_num > 1:
        nd.multi_sgd_update(weight, grad, out=weight, lrs=(lr,), wds=(wd,), num_weights=1, **_common(optimizer))
        return
    _momentum_update(nd.sgd_mom_update, nd.mp_sgd_mom_update, optimizer, weight, grad, slots, lr, wd, mp)


def _nag(optimizer, weight, grad, slots, lr, wd, mp):
    """Nesterov momentum: ``nag_mom_update``/``sgd_update`` (``mp_*`` for float16 master weights)."""
    _momentum_update(nd.nag_mom_update, nd.mp_nag_mom_update, optimizer, weight, grad, slots, lr, wd, mp)


@_master
def _adam(optimizer, weight, grad, slots, lr, wd):
    """Adam: ``adam_update`` (lr already bias-corrected)."""
    nd.adam_update(weight, grad, slots[0], slots[1], out=weight, lazy_update=optimizer.lazy_update, lr=lr, wd=wd,
                   beta1=optimizer.beta1, beta2=optimizer.beta2, epsilon=optimizer.epsilon, **_common(optimizer))


@_master
def _rmsprop(optimizer, weight, grad, slots, lr, wd):
    """RMSProp: ``rmsprop_update``, or ``rmspropalex_update`` when centered."""
    kwargs = dict(_common(optimizer), gamma1=optimizer.gamma1, epsilon=optimizer.epsilon)
    if optimizer.clip_weights:
        kwargs["clip_weights"] = optimizer.clip_weights
    if optimizer.centered:
        nd.rmspropalex_update(weight, grad, *slots, out=weight, lr=lr, wd=wd, gamma2=optimizer.gamma2, **kwargs)
    else:
        nd.rmsprop_update(weight, grad, slots[0], out=weight, lr=lr, wd=wd, **kwargs)


@_master
def _adagrad(optimizer, weight, grad, slots, lr, wd):
    """AdaGrad: the stock optimizer's own NDArray expressions (there is no dense AdaGrad operator)."""
    history = slots[0]
    grad = grad * optimizer.rescale_grad
    if optimizer.clip_gradient is not None:
        grad = nd.clip(grad, -optimizer.clip_gradient, optimizer.clip_gradient)
    history[:] += nd.square(grad)
    div = grad / nd.sqrt(history + optimizer.float_stable_eps)
    weight[:] += (div + weight * wd) * -lr


def _adam_lr(optimizer, index: int, lr: float) -> float:
    """Adam's bias-corrected lr, computed exactly as ``mx.optimizer.Adam.update`` does."""
    t = optimizer._index_update_count[index]
    coef1 = 1. - optimizer.beta1 ** t
    coef2 = 1. - optimizer.beta2 ** t
    return lr * (math.sqrt(coef2) / coef1)


#: optimizer class -> (kernel, per-index lr adjustment or None). Exact classes only: a subclass may change update().
_KERNELS = {mxopt.SGD: (_sgd, None), mxopt.NAG: (_nag, None), mxopt.Adam: (_adam, _adam_lr),
            mxopt.RMSProp: (_rmsprop, None), mxopt.AdaGrad: (_adagrad, None)}


def _clip_of(optimizer):
    """clip_gradient as MXNet's kernels see it: a float32 bound, or None when off (unset, 0 or negative)."""
    clip = optimizer.clip_gradient
    return np.float32(clip) if clip and clip >= 0 else None


def _adam_consts(optimizer) -> tuple:
    """Adam's float32 constants, as ``AdamUpdateKernel`` receives them."""
    f32 = np.float32
    beta1, beta2 = f32(optimizer.beta1), f32(optimizer.beta2)
    return (beta1, beta2, f32(1) - beta1, f32(1) - beta2, f32(optimizer.epsilon), f32(optimizer.rescale_grad),
            _clip_of(optimizer))


def _adam_chunk(arrays, lr, wd, consts, tmp) -> None:
    """Adam on one cache-sized chunk: the operations and float32 rounding of MXNet's ``AdamUpdateKernel``."""
    beta1, beta2, one_b1, one_b2, eps, rescale, clip = consts
    (w, g, m, v), (x, y) = arrays, tmp
    np.multiply(g, rescale, out=x)
    np.multiply(w, wd, out=y)
    x += y
    if clip is not None:  # MXNet's clip::Map; np.clip is several times slower
        np.minimum(x, clip, out=x)
        np.maximum(x, -clip, out=x)
    m *= beta1
    np.multiply(x, one_b1, out=y)
    m += y
    v *= beta2
    np.multiply(x, one_b2, out=y)
    y *= x
    v += y
    np.sqrt(v, out=y)
    y += eps
    np.multiply(m, lr, out=x)
    x /= y
    w -= x


def _sgd_mom_consts(optimizer) -> tuple:
    """SGD-momentum's float32 constants, as ``SGDMomKernel`` receives them."""
    f32 = np.float32
    return f32(optimizer.momentum), f32(optimizer.rescale_grad), _clip_of(optimizer)


def _sgd_mom_chunk(arrays, lr, wd, consts, tmp) -> None:
    """SGD-momentum on one chunk: the operations and float32 rounding of MXNet's ``SGDMomKernel``."""
    momentum, rescale, clip = consts
    (w, g, m), (x, _) = arrays, tmp
    m *= momentum
    np.multiply(w, lr * wd, out=x)
    m -= x
    if clip is None:
        np.multiply(g, lr * rescale, out=x)
    else:
        np.multiply(g, rescale, out=x)
        np.minimum(x, clip, out=x)
        np.maximum(x, -clip, out=x)
        x *= lr
    m -= x
    w += m


def _chunks(chunk_fn, consts, work) -> None:
    """Run ``chunk_fn`` over ``work`` [(arrays, lr, wd, start, stop)] in chunks of ``_CHUNK`` elements."""
    tmp = (np.empty(_CHUNK, np.float32), np.empty(_CHUNK, np.float32))
    for arrays, lr, wd, start, stop in work:
        for s in range(start, stop, _CHUNK):
            e = min(s + _CHUNK, stop)
            chunk_fn([a[s:e] for a in arrays], lr, wd, consts, (tmp[0][:e - s], tmp[1][:e - s]))


def _split(segments: list, parts: int) -> list:
    """[(arrays, lr, wd)] cut into ``parts`` lists of (arrays, lr, wd, start, stop) of near-equal element counts."""
    total = sum(arrays[0].size for arrays, _, _ in segments)
    share, out, current, filled = -(-total // parts), [], [], 0
    for arrays, lr, wd in segments:
        start = 0
        while start < arrays[0].size:
            stop = min(arrays[0].size, start + share - filled)
            current.append((arrays, lr, wd, start, stop))
            filled, start = filled + stop - start, stop
            if filled >= share:
                out.append(current)
                current, filled = [], 0
    return out + [current] if current else out


def _numpy_update(chunk_fn, consts, segments: list) -> None:
    """Run ``chunk_fn`` over ``segments`` with one thread per core (numpy releases the GIL in its loops)."""
    parts = _split(segments, _threads())
    if len(parts) == 1:
        return _chunks(chunk_fn, consts, parts[0])
    for future in [_pool(len(parts)).submit(_chunks, chunk_fn, consts, part) for part in parts]:
        future.result()


#: numpy implementations: optimizer class -> (constants, chunk kernel, number of state slots it needs).
_NUMPY = {mxopt.SGD: (_sgd_mom_consts, _sgd_mom_chunk, 1), mxopt.Adam: (_adam_consts, _adam_chunk, 2)}


def _numpy_applies(optimizer, group) -> bool:
    """Whether a numpy implementation exists for this optimizer and group (float32 on CPU, no master copy)."""
    spec = _NUMPY.get(type(optimizer))
    if spec is None or group.ctx.device_type != "cpu" or group.dtype != np.float32 or len(group.slots) != spec[2]:
        return False
    return type(optimizer) is not mxopt.SGD or optimizer.momentum > 0


# --------------------------------------------------------------------------------------------- compiled kernels
def _mx_float(dtype: np.dtype):
    """A value as an MXNet operator's ``float`` parameter reaches a kernel on ``dtype`` data: float32, then cast."""
    return lambda value: dtype.type(np.float32(value))


def _sgd_consts(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, zero) for ``_kernels.sgd``."""
    f = _mx_float(dtype)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), f(0)]


def _sgd_single_consts(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, one) for ``_kernels.sgd_single``."""
    f = _mx_float(dtype)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), f(1)]


def _mom_consts(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, momentum, momentum + 1) for ``_kernels.sgd_mom``/``nag_mom`` (the sum in the data's dtype)."""
    f = _mx_float(dtype)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), f(optimizer.momentum), f(optimizer.momentum) + f(1)]


def _adam_consts_compiled(optimizer, dtype: np.dtype) -> list:
    """(rescale, clip, beta1, beta2, 1 - beta1, 1 - beta2, epsilon) for ``_kernels.adam`` (differences in the data's
    dtype, as ``AdamUpdateKernel`` computes them)."""
    f = _mx_float(dtype)
    beta1, beta2 = f(optimizer.beta1), f(optimizer.beta2)
    return [f(optimizer.rescale_grad), f(_clip_value(optimizer)), beta1, beta2, f(1) - beta1, f(1) - beta2,
            f(optimizer.epsilon)]


def _clip_value(optimizer) -> float:
    """clip_gradient as MXNet's kernels receive it: the bound, or -1 (off) when unset, 0 or negative."""
    clip = _clip_of(optimizer)
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


def _compiled_kernel(optimizer, group: _Group):
    """(kernel, constants) for this optimizer and group (CPU, float32 or float64, no float16 master copy), or None."""
    spec = _COMPILED.get((type(optimizer), len(group.slots)))
    if spec is None or group.ctx.device_type != "cpu" or group.dtype not in (np.float32, np.float64):
        return None
    if group.compiled is _UNSET:
        group.compiled = _load_kernels()
    return None if group.compiled is None else (getattr(group.compiled, spec[0]), spec[1])


def _compiled_update(compiled, group: _Group, optimizer, runs: list) -> None:
    """One compiled pass over ``runs`` [(start, stop, lr, wd)], cut into one share per thread (``_threads()``); the
    calling thread runs the first share."""
    kernel, consts_of = compiled
    dtype = np.dtype(group.dtype)
    consts = np.array(consts_of(optimizer, dtype), dtype=dtype)
    use_clip = bool(consts[1] >= 0)
    arrays = group.numpy()
    parts = _threads() if sum(hi - lo for lo, hi, _, _ in runs) >= _MIN_SPLIT else 1
    calls = [(*arrays, *share, consts, use_clip) for share in _shares(runs, parts, dtype)]
    futures = [_pool(len(calls) - 1).submit(kernel, *call) for call in calls[1:]]
    kernel(*calls[0])
    for future in futures:
        future.result()


def _shares(runs: list, parts: int, dtype: np.dtype) -> list:
    """``runs`` [(start, stop, lr, wd)] cut into at most ``parts`` shares of near-equal element counts (cuts on
    16-element boundaries), each as the kernels take it: (starts, stops, lrs, wds) arrays, lr and wd as ``_mx_float``
    makes them."""
    total = sum(hi - lo for lo, hi, _, _ in runs)
    size = (-(-total // parts) + 15) // 16 * 16
    out, current, filled = [], [], 0
    for lo, hi, lr, wd in runs:
        while lo < hi:
            stop = min(hi, lo + size - filled)
            current.append((lo, stop, lr, wd))
            filled, lo = filled + stop - lo, stop
            if filled >= size:
                out.append(current)
                current, filled = [], 0
    f = _mx_float(dtype)
    return [(np.array([r[0] for r in part], np.int64), np.array([r[1] for r in part], np.int64),
             np.array([f(r[2]) for r in part], dtype), np.array([f(r[3]) for r in part], dtype))
            for part in out + ([current] if current else [])]


# ---------------------------------------------------------------------------------------------- the fast path
class FusedUpdate:
    """The fast update path of one trainer: ``prepare()`` before the step, ``apply()`` in place of the stock loop.

    ``prepare()`` and ``regrad()`` may replace Parameter arrays and updater states by views (they pack new flat
    buffers); LrTrainer calls ``prepare()`` at the start of ``allreduce_grads`` and ``update``, and ``regrad()`` right
    after ``freeze``/``unfreeze``/``load_states`` changed a ``grad_req``. ``apply()`` never replaces an array; it
    returns False, having changed nothing, when the fast path does not apply, and the caller then runs the stock loop.

    Which arrays may be replaced when (the contract with ``hybridize(static_alloc=True, static_shape=True)``): such a
    graph binds the gradient arrays at its first backward and keeps writing them, also after ``Parameter._grad`` was
    replaced, until its gradient requests change; then the next backward binds the arrays the Parameters hold at that
    moment (MXNet 1.9.1 ``CachedOp::StaticBackward``; ``tests/gluon_lr/test_fused.py`` checks both halves). So:

    - a parameter's arrays are replaced by views once, when it is first packed: when the trainer is built, at the first
      update (what was not packed then, checked by ``_bound_elsewhere``), or in ``regrad()``;
    - a parameter whose ``grad_req`` becomes ``'null'`` (MXNet drops its gradient array and detaches its data, which
      stays in the flat buffer) keeps its place, dormant; the others keep their views, untouched;
    - ``regrad()`` re-installs the views of exactly the parameters whose ``grad_req`` just left ``'null'`` (or packs
      them, if never packed), before the next backward, which rebinds them because their requests changed;
    - arrays replaced behind the trainer's back after the first update (``grad_req`` set directly,
      ``initialize(force_reinit=True)``) are never replaced again: those parameters go to the stock Updater, in the
      same step, with the same state arrays (``_live``).
    """

    def __init__(self, trainer):
        self._trainer = trainer
        self._groups = {}
        self._disabled = False
        self._checks_left = 0
        self._updated = False

    def names(self) -> tuple:
        """Names of the parameters on the fast path now (packed, live, trainable, and the step can take the path)."""
        if not self.usable():
            return ()
        indices = sorted({m.index for k, groups in self._groups.items() for group in groups for m in group.members
                          if m.param.grad_req != "null" and self._live(k, m)})
        return tuple(self._trainer._params[i].name for i in indices)

    def usable(self) -> bool:
        """Whether this step can take the fast path at all (see the module docstring for the fallbacks)."""
        trainer = self._trainer
        if not trainer._kv_initialized or (trainer._kvstore and trainer._update_on_kvstore):
            return False
        return self._kernels_exist()

    def _kernels_exist(self) -> bool:
        """No AMP loss scaler, no numpy-array mode, and a fast kernel for every updater's optimizer."""
        trainer = self._trainer
        if self._disabled or getattr(trainer, "_amp_loss_scaler", None) is not None or mx.util.is_np_array():
            return False
        return all(type(updater.optimizer) in _KERNELS for updater in trainer._updaters)

    def _packable(self) -> bool:
        """Whether packing pays now: the step takes the fast path, or (kvstore not created yet) it is expected to."""
        if self._trainer._kv_initialized:
            return self.usable()
        return self._kernels_exist() and not _kvstore_may_update(self._trainer)

    def prepare(self, early: bool = False) -> None:
        """Re-sync states replaced by ``load_states``; until the first update, pack what qualifies and is not packed.

        Args:
            early: Called from the trainer's constructor: float16 master copies are left to the first step (they
                copy the weights as they are then).
        """
        if self._disabled or not self._packable():
            return
        trainer = self._trainer
        for k, (ctx, updater) in enumerate(zip(trainer._contexts, trainer._updaters)):
            groups = self._groups.setdefault(k, [])
            self._resync(k, groups, updater)
            if self._updated:
                continue  # a graph may have bound the arrays by now: see the class docstring
            packed = {m.index for group in groups for m in group.members}
            wanted = [(i, p) for i, p in enumerate(trainer._params) if i not in packed
                      and _qualifies(p, k, updater.optimizer) and not (early and np.dtype(p.dtype) == np.float16)]
            if wanted:
                groups += self._build(k, ctx, updater, wanted)
                self._checks_left = 2

    def regrad(self, params: list) -> None:
        """Follow a ``grad_req`` change of ``params`` made just now, before any backward (see the class docstring).

        Parameters that left ``'null'`` get their views back (values copied in) or, if never packed, new flat groups
        (float32 and float64 only: float16 master copies are made from the weights at the update, as stock).
        Parameters that became ``'null'`` stay dormant in their groups.
        """
        params = [p for p in params if p.grad_req != "null"]
        if self._disabled or not params or not self._packable():
            return
        trainer = self._trainer
        index = {id(p): i for i, p in enumerate(trainer._params)}
        for k, (ctx, updater) in enumerate(zip(trainer._contexts, trainer._updaters)):
            groups = self._groups.get(k)
            if groups is None:
                continue  # nothing packed yet: prepare() packs at the first step
            members = {id(m.param): m for group in groups for m in group.members}
            new = []
            for param in params:
                if id(param) in members:
                    _reinstall(k, members[id(param)])
                elif _qualifies(param, k, updater.optimizer) and np.dtype(param.dtype) != np.float16:
                    new.append((index[id(param)], param))
            for group in self._build(k, ctx, updater, new) if new else ():
                for m in group.members:
                    m.old = None  # nothing bound the replaced arrays (see the class docstring)
                groups.append(group)

    def _resync(self, k: int, groups: list, updater) -> None:
        """Copy states replaced by ``load_states`` into the views and re-install them (where the structure fits)."""
        for group in groups:
            for m in group.members:
                state = updater.states.get(m.index)
                if state is m.state:
                    continue
                if state is None:
                    state = updater.optimizer.create_state_multi_precision(m.index, m.weight)
                if _signature(state) != _signature(group.template):
                    continue  # left to the stock Updater with the loaded state (``_live`` is False)
                for view, leaf in zip(_leaves(m.state), _leaves(state)):
                    leaf.copyto(view)
                updater.states[m.index], updater.states_synced[m.index] = m.state, True

    def _build(self, k: int, ctx, updater, wanted: list) -> list:
        """New flat groups on context ``k`` for ``wanted`` [(index, param)], states created where missing."""
        buckets = {}
        for index, param in wanted:
            data = param._data[k]
            if index not in updater.states:
                updater.states[index] = updater.optimizer.create_state_multi_precision(index, data)
            elif not updater.states_synced.get(index, True):
                updater.states[index] = updater.sync_state_context(updater.states[index], ctx)
            updater.states_synced[index] = True
            state = updater.states[index]
            signature = _signature(state)
            if signature is None or any(leaf.size != data.size for leaf in _leaves(state)):
                continue
            buckets.setdefault((np.dtype(data.dtype).name, signature), []).append((index, param))
        return [_pack(ctx, k, entries, updater) for entries in buckets.values()]

    def apply(self, ignore_stale_grad: bool = False) -> bool:
        """One update of every parameter, as ``gluon.Trainer._update`` would; False (nothing done) if not applicable.

        Raises:
            UserWarning: a gradient is stale and ``ignore_stale_grad`` is False (stock Gluon's error, same text).
        """
        trainer = self._trainer
        if not any(self._groups.values()) or not self.usable():
            return False
        bound = self._bound_elsewhere() if self._checks_left else []
        if bound:
            self._unpack(bound)
            return False
        for param in trainer._params:
            if param.grad_req != "null" and not ignore_stale_grad:
                for data in param._check_and_get(param._data, list):
                    if not data._fresh_grad:
                        raise UserWarning(_STALE % (param.name, str(data.context)))
        for k, updater in enumerate(trainer._updaters):
            self._update_context(k, updater, ignore_stale_grad)
        self._updated = True
        return True

    def _bound_elsewhere(self) -> list:
        """(context, member) pairs whose gradient array replaced at packing was written by backward since (a
        static_alloc graph had bound it). Checked on the first two updates after packing; the replaced arrays are
        released afterwards."""
        self._checks_left -= 1
        members = [(k, m) for k, groups in self._groups.items() for group in groups for m in group.members]
        bound = [(k, m) for k, m in members if m.old is not None and not np.array_equal(m.old[1].asnumpy(), m.old[2])]
        if not self._checks_left and not bound:
            for _, m in members:
                m.old = None
        return bound

    def _unpack(self, bound: list) -> None:
        """Give the ``bound`` members their original arrays back (weights copied in); leave the fast path for good.

        The other members keep their views as ordinary arrays: those are what their graphs write (e.g. parameters
        packed when the trainer was built, before the graph existed, beside deferred ones packed at the first update).
        """
        warnings.warn("LrTrainer: a static_alloc graph (hybridize(static_alloc=True)) was built before the fast "
                      "update path packed the parameters, so backward writes the original gradient arrays; the "
                      "stock update loop runs from now on. Build the trainer before the first forward (with "
                      "initialized, not deferred, parameters) to keep the fast path.")
        for k, m in bound:
            if self._live(k, m, states=False):
                old_data, old_grad, _ = m.old
                m.weight.copyto(old_data)
                m.param._data[k], m.param._grad[k] = old_data, old_grad
                old_data._fresh_grad = m.weight._fresh_grad
        self._groups, self._disabled = {}, True

    def _live(self, k: int, m: _Member, states: bool = True) -> bool:
        """Whether member ``m`` is updated here on context ``k``: its Parameter and Updater still use its views."""
        param = m.param
        if param._data is None or param._grad is None or param._data[k] is not m.weight or param._grad[k] is not m.grad:
            return False
        return not states or self._trainer._updaters[k].states.get(m.index) is m.state

    def _update_context(self, k: int, updater, ignore_stale_grad: bool) -> None:
        """Update every parameter's copy on context ``k``: flat runs first, the rest through the stock Updater."""
        fused = {m.index for group in self._groups.get(k, ()) for m in group.members if self._live(k, m)}
        todo = []
        for i, param in enumerate(self._trainer._params):
            if param.grad_req == "null":
                continue
            data = param._data[k]
            if not ignore_stale_grad or data._fresh_grad:
                todo.append(i)
                data._fresh_grad = False
        optimizer = updater.optimizer
        device_counts = optimizer._all_index_update_counts.get(self._trainer._contexts[k].device_id, {})
        counts = {device_counts.get(i, optimizer.begin_num_update) for i in todo}
        if optimizer.lr_scheduler is not None and len(counts) > 1:
            fused = set()
        rest = [i for i in todo if i not in fused]
        if rest:
            params = self._trainer._params
            updater(rest, [params[i]._grad[k] for i in rest], [params[i]._data[k] for i in rest])
        now = [i for i in todo if i in fused]
        if now:
            self._run_fused(k, optimizer, now)

    def _run_fused(self, k: int, optimizer, indices: list) -> None:
        """Count, resolve lr/wd exactly as the optimizer does, then one kernel per run of equal (lr, wd)."""
        optimizer._set_current_context(self._trainer._contexts[k].device_id)
        optimizer._update_count(indices)
        kernel, adjust = _KERNELS[type(optimizer)]
        lrs, wds = optimizer._get_lrs(indices), optimizer._get_wds(indices)
        if adjust is not None:
            lrs = [adjust(optimizer, i, lr) for i, lr in zip(indices, lrs)]
        values = dict(zip(indices, zip(lrs, wds)))
        for group in self._groups[k]:
            runs = _runs(group, values)
            if runs:
                _update_group(group, optimizer, kernel, runs)


def _update_group(group: _Group, optimizer, kernel, runs: list) -> None:
    """Update the ``runs`` [(start, stop, lr, wd)] of one flat group: with the compiled kernel where one applies (CPU,
    float32/float64), else with the faster of the numpy and MXNet implementations (``_Choice``), else MXNet's."""
    compiled = _compiled_kernel(optimizer, group)
    if compiled is not None:
        _wait_to_write([group.weight, group.grad] + group.slots)
        return _compiled_update(compiled, group, optimizer, runs)
    option, timing = group.choice.next(("numpy", "mxnet") if _numpy_applies(optimizer, group) else ("mxnet",))
    if timing:
        _wait_to_write([group.weight, group.grad] + group.slots)
    start = time.perf_counter()
    if option == "numpy":
        _wait_to_write([group.weight, group.grad] + group.slots)
        consts, chunk_fn, _ = _NUMPY[type(optimizer)]
        arrays = group.numpy()
        _numpy_update(chunk_fn, consts(optimizer), [([a[lo:hi] for a in arrays], np.float32(lr), np.float32(wd))
                                                    for lo, hi, lr, wd in runs])
    else:
        for lo, hi, lr, wd in runs:
            kernel(optimizer, group.weight[lo:hi], group.grad[lo:hi], [slot[lo:hi] for slot in group.slots],
                   lr, wd, group.dtype == np.float16)
    if timing:
        group.weight.wait_to_read()
        group.choice.record(option, time.perf_counter() - start)


class _Choice:
    """The faster implementation for one flat group, picked by timing each on the first few steps.

    Every implementation gives the same result (tests check each against the stock trainer); only speed differs,
    and on a CPU it depends on the load: MXNet's OpenMP kernels lose most when cores are oversubscribed.
    """

    SAMPLES = 2

    def __init__(self):
        self.times, self.best = {}, None

    def next(self, options: tuple) -> tuple:
        """(option to run now, whether to time it)."""
        if len(options) == 1:
            return options[0], False
        if self.best in options:
            return self.best, False
        return min(options, key=lambda o: len(self.times.get(o, ()))), True

    def record(self, option: str, seconds: float) -> None:
        """Add a timing; pick the best once every option has SAMPLES timings."""
        self.times.setdefault(option, []).append(seconds)
        if len(self.times) > 1 and all(len(t) >= self.SAMPLES for t in self.times.values()):
            self.best = min(self.times, key=lambda o: min(self.times[o]))


def _runs(group: _Group, values: dict) -> list:
    """[(start, stop, lr, wd)]: maximal runs of consecutive members updated now with equal (lr, wd)."""
    runs = []
    for m in group.members:
        value = values.get(m.index)
        if value is None:
            continue
        if runs and runs[-1][1] == m.offset and runs[-1][2:] == value:
            runs[-1] = (runs[-1][0], m.offset + m.size) + value
        else:
            runs.append((m.offset, m.offset + m.size) + value)
    return runs
