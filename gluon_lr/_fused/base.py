"""The shared base of the fast update path: flat groups of parameters, packing, and state structures.

A ``Group`` is one flat buffer per (context, dtype, state layout) holding weights, gradients and every optimizer state
slot; each ``Member`` is one parameter's slice. The back-ends (``mxnet_ops``, ``numpy_ops``, ``compiled``) update
runs of a group; ``update.FusedUpdate`` drives them.
"""
import ctypes
import functools

import numpy as np
import mxnet as mx
from mxnet import autograd, nd
from mxnet.base import _LIB, check_call

from mxformats.optimizer_state import state_arrays


#: ``Group.compiled`` before the first update looked the compiled kernels up.
UNSET = object()


def state_signature(state):
    """A hashable description of a state's structure and leaf dtypes/storage; None for unsupported states."""
    if state is None:
        return "none"
    if isinstance(state, nd.NDArray):
        return ("array", np.dtype(state.dtype).name) if state.stype == "default" else None
    if isinstance(state, (tuple, list)):
        inner = tuple(state_signature(item) for item in state)
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


def wait_to_write(arrays) -> None:
    """Block until MXNet has finished every pending read and write of ``arrays`` (before numpy writes them)."""
    for array in arrays:
        check_call(_LIB.MXNDArrayWaitToWrite(array.handle))


class Member:
    """One parameter inside a flat group: where it lives and the view objects installed on it."""

    __slots__ = ("index", "param", "offset", "size", "shape", "weight", "grad", "state", "old")

    def __init__(self, index, param, offset, size, shape):
        # shape: the array's, not param.shape (None on a SymbolBlock.imports parameter until the first forward)
        self.index, self.param, self.offset, self.size, self.shape = index, param, offset, size, shape
        self.weight = self.grad = self.state = self.old = None


class Group:
    """Flat buffers on one context for parameters sharing (dtype, state structure)."""

    def __init__(self, ctx, dtype, members, template):
        self.ctx, self.dtype, self.members, self.template = ctx, dtype, members, template
        self.total = sum(m.size for m in members)
        self.weight = nd.zeros((self.total,), ctx=ctx, dtype=dtype)
        self.grad = nd.zeros((self.total,), ctx=ctx, dtype=dtype)
        self.slots = [nd.zeros((self.total,), ctx=ctx, dtype=leaf.dtype) for leaf in state_arrays(template)]
        self.choice = Choice()
        self.compiled = UNSET
        self._numpy = None

    def view(self, flat: nd.NDArray, member: Member) -> nd.NDArray:
        """The view of ``member`` in ``flat``, shaped like the parameter's array."""
        return flat[member.offset:member.offset + member.size].reshape(member.shape)

    def numpy(self) -> list:
        """Numpy views of [weight, grad, *slots] (CPU only), made once."""
        if self._numpy is None:
            self._numpy = [_numpy_view(flat) for flat in [self.weight, self.grad] + self.slots]
        return self._numpy


@functools.lru_cache(maxsize=None)
def _mkldnn() -> bool:
    """Whether this MXNet build runs CPU convolutions through MKLDNN (oneDNN).

    Its convolution, in an inference forward (autograd not recording), reorders the weight NDArray in place into
    its blocked layout; on a view into a flat buffer it reorders the whole buffer, which corrupts every parameter
    packed there (``tests/gluon_lr/test_fused_views.py``). Weights of 3 or more dimensions therefore keep arrays of
    their own on CPU and are updated by the stock Updater.
    """
    return bool(mx.runtime.Features().is_enabled("MKLDNN"))


def qualifies(param, k: int, optimizer) -> bool:
    """Whether ``param``'s copy on context ``k`` can live in a flat buffer (else the stock Updater updates it)."""
    if param.grad_req == "null" or param._data is None or param._grad is None or param._deferred_init:
        return False
    data, grad = param._data[k], param._grad[k]
    if data.stype != "default" or grad.stype != "default":
        return False
    if data.ndim >= 3 and data.context.device_type == "cpu" and _mkldnn():
        return False  # a convolution weight: MKLDNN's inference forward reorders it in place, whole buffer included
    dtype = np.dtype(data.dtype)
    return dtype in (np.float32, np.float64) or (dtype == np.float16 and bool(optimizer.multi_precision))


def pack(ctx, k: int, entries: list, updater) -> Group:
    """Build one group: copy weights, gradients and states in, then install the views on params and updater."""
    entries = sorted(entries, key=lambda e: (e[1].lr_mult, e[1].wd_mult, e[0]))
    members, offset = [], 0
    for index, param in entries:
        members.append(Member(index, param, offset, param._data[k].size, param._data[k].shape))
        offset += param._data[k].size
    group = Group(ctx, param._data[k].dtype, members, updater.states[entries[0][0]])
    fresh = [m.param._data[k]._fresh_grad for m in members]
    for m in members:
        old_data, old_grad = m.param._data[k], m.param._grad[k]
        group.weight[m.offset:m.offset + m.size] = old_data.reshape((-1,))
        group.grad[m.offset:m.offset + m.size] = old_grad.reshape((-1,))
        m.weight, m.grad = group.view(group.weight, m), group.view(group.grad, m)
        m.old = (old_data, old_grad, old_grad.asnumpy())
        m.param._data[k], m.param._grad[k] = m.weight, m.grad
        leaves = state_arrays(updater.states[m.index])
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


def reinstall(k: int, m: Member) -> None:
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


def kvstore_may_update(trainer) -> bool:
    """Before the kvstore exists: whether it may update the weights (packing would then only cost memory).

    Gluon's choice, mirrored from the settings: an explicit ``update_on_kvstore``; else no kvstore (None, or a non-dist
    name with one context) never updates, and any other kvstore may (Gluon's default is to update there).
    """
    config = trainer._kvstore_params
    if config["update_on_kvstore"] is not None:
        return bool(config["update_on_kvstore"])
    kvstore = config["kvstore"]
    return not (kvstore is None or (isinstance(kvstore, str) and "dist" not in kvstore and len(trainer._contexts) == 1))


def clip_of(optimizer):
    """clip_gradient as MXNet's kernels see it: a float32 bound, or None when off (unset, 0 or negative)."""
    clip = optimizer.clip_gradient
    return param_float32(clip) if clip and clip >= 0 else None


@functools.lru_cache(maxsize=4096)
def _parsed(value: float) -> np.float32:
    """``value`` as MXNet parses an operator's ``float`` parameter (see ``param_float32``)."""
    echo = nd.sgd_update(nd.zeros(1), nd.ones(1), lr=value, wd=0.0, rescale_grad=1.0)  # 0 - lr * 1, exact
    return np.float32(-echo.asnumpy()[0])


def param_float32(value) -> np.float32:
    """``value`` as an MXNet operator's ``float`` parameter holds it: MXNet passes ``str(value)`` and parses the
    decimal with dmlc's own parser, which is not correctly rounded: for some values (Adam's bias-corrected lr at
    lr_mult 0.1, step 3, for one) it lands one unit in the last place away from ``np.float32(value)``. So an
    operator is asked (once per value, cached) to echo it.

    Example:
        >>> param_float32(2.0201059743896793e-05) == np.nextafter(np.float32(2.0201059743896793e-05), 1)
        True
    """
    value = float(value)
    return np.float32(0.0) if value == 0.0 else _parsed(value)


def mx_float(dtype: np.dtype):
    """A value as an MXNet operator's ``float`` parameter reaches a kernel on ``dtype`` data: parsed by MXNet into a
    float32 (``param_float32``), then cast."""
    return lambda value: dtype.type(param_float32(value))


class Choice:
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
