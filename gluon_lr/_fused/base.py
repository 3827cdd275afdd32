"""The shared base of the fast update path: raw memory of MXNet arrays, state structures, MXNet's float parsing, and
the timed choice between implementations.

The compiled and numpy back-ends read and write NDArray memory directly, outside MXNet's engine: ``wait_all`` first
lets every pending MXNet operation finish, then ``data_pointers`` gives each array's address in MXNet's default
(row-major) layout.
"""
import ctypes

import numpy as np
from mxnet import nd
from mxnet.base import _LIB, check_call


#: ``FusedUpdate``'s compiled-kernel module before the first CPU update looked it up.
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


def wait_all() -> None:
    """Block until MXNet has finished every operation pushed so far (before memory is read or written directly).

    One call: waiting on each array (``MXNDArrayWaitToWrite`` pushes an empty operation per array, about 7 us each on
    2 cores) would cost milliseconds per step on a network of a few hundred tensors.
    """
    check_call(_LIB.MXNDArrayWaitAll())


def data_pointers(arrays) -> list:
    """The address of each dense NDArray's first element, its memory in MXNet's default (row-major) layout.

    MXNet built with MKLDNN (oneDNN, the pip build) lets a convolution's inference forward reorder the weight array
    in place into a blocked layout (and reallocate it when that layout is padded). ``MXNDArrayGetData`` brings such
    an array back to the default layout first (MXNet 1.9.1 ``src/c_api/c_api.cc``: ``Reorder2DefaultAsync`` then
    ``WaitToRead``), so the address it returns holds the values in row-major order
    (``tests/gluon_lr/fused/test_fused_cnn.py::TestMKLDNNLayout``). Ask again at every step: the address may change.
    """
    pointer = ctypes.c_void_p()
    reference, get_data = ctypes.byref(pointer), _LIB.MXNDArrayGetData
    addresses = [get_data(array.handle, reference) or pointer.value for array in arrays]  # 0 is success, -1 failure
    if -1 in addresses:
        check_call(-1)  # raises MXNet's error message
    return addresses


class ArrayCalls:
    """MXNet's per-array C calls of a step (addresses, gradient freshness) on a list of arrays: one compiled loop
    over the arrays' handles once ``use_loops`` got ``_array_calls`` (loaded with the compiled kernels), else one
    ctypes call per array. The same C functions either way, in the same order.

    Examples:
        >>> calls = ArrayCalls()
        >>> calls.grad_states(arrays)          # array([1, 1], dtype=int32)
        >>> calls.clear_grad_states(arrays)
    """

    def __init__(self):
        self.loops = None

    def use_loops(self, loops) -> None:
        """Take the compiled loops (the ``_array_calls`` module) from now on."""
        self.loops = loops

    def handles(self, arrays) -> np.ndarray:
        """The arrays' NDArray handles (an NDArray's handle is set once, when it is made), for the compiled loops;
        None without them."""
        if self.loops is None:
            return None
        return np.array([array.handle.value for array in arrays], dtype=np.int64)

    def data_pointers(self, arrays, handles, out: np.ndarray) -> None:
        """``out`` (int64, C-contiguous, one per array) = ``data_pointers(arrays)``; ``handles``: ``handles(arrays)``
        or None."""
        if self.loops is None:
            out[:] = data_pointers(arrays)
        else:
            self.loops.data_pointers(self.handles(arrays) if handles is None else handles, out)

    def grad_states(self, arrays, handles=None) -> np.ndarray:
        """Each array's ``_fresh_grad`` (1 when backward wrote its gradient since it was last cleared), int32."""
        if self.loops is None:
            return np.array([array._fresh_grad for array in arrays], dtype=np.int32)
        return self.loops.grad_states(self.handles(arrays) if handles is None else handles)

    def clear_grad_states(self, arrays, handles=None) -> None:
        """``array._fresh_grad = False`` for each array."""
        if self.loops is None:
            for array in arrays:
                array._fresh_grad = False
        else:
            self.loops.clear_grad_states(self.handles(arrays) if handles is None else handles)


def numpy_at(address: int, size: int, dtype) -> np.ndarray:
    """A writable 1-D numpy array over ``size`` elements at ``address`` (no copy); the caller keeps the owner alive."""
    ctype = np.ctypeslib.as_ctypes_type(np.dtype(dtype))
    return np.ctypeslib.as_array((ctype * size).from_address(address))


def kvstore_may_update(trainer) -> bool:
    """Before the kvstore exists: whether it may update the weights (the fast path then does not apply).

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


#: value -> its float32 as MXNet parses it (``param_float32``); cleared when it reaches _PARSED_MAX entries.
_PARSED = {}
#: value -> (batch, position): the NDArray an echo operator is writing the value into, at that position
#: (``parse_floats(wait=False)``), not read yet.
_PENDING = {}
_PARSED_MAX = 4096


def parse_floats(values, wait: bool = True) -> None:
    """Have MXNet parse every value not parsed yet, in one round trip: one operator call each, writing into one
    array, read at once.

    ``param_float32`` then finds them. An operator call goes through MXNet's engine; waiting for each separately
    costs a round trip per value (0.1 ms on an idle machine, several ms on a loaded one), and Adam's bias-corrected
    lr takes new values at every step. ``wait=False`` only pushes the calls (for values needed later: the next steps'
    lrs), and the first ``param_float32`` of such a value reads its whole batch.
    """
    values = {float(v) for v in values} - {0.0}
    todo = values - _PARSED.keys() - _PENDING.keys()
    if len(_PARSED) + len(_PENDING) + len(todo) > _PARSED_MAX:
        _PARSED.clear()
        _PENDING.clear()
    if todo:
        zero, one, batch = nd.zeros(1), nd.ones(1), nd.empty(len(todo))
        for position, value in enumerate(todo):  # 0 - lr * 1, exact
            nd.sgd_update(zero, one, lr=value, wd=0.0, rescale_grad=1.0, out=batch[position:position + 1])
            _PENDING[value] = (batch, position)
    if wait:
        for batch in {id(_PENDING[value][0]): _PENDING[value][0] for value in values & _PENDING.keys()}.values():
            echoed = batch.asnumpy()
            for value in [v for v, (b, _) in _PENDING.items() if b is batch]:
                _PARSED[value] = np.float32(-echoed[_PENDING.pop(value)[1]])


def parse_known(values) -> bool:
    """Whether every value is parsed already or being parsed (``parse_floats``), so no operator call is needed."""
    return all(value in _PARSED or value in _PENDING or value == 0.0 for value in values)


def param_float32(value) -> np.float32:
    """``value`` as an MXNet operator's ``float`` parameter holds it: MXNet passes ``str(value)`` and parses the
    decimal with dmlc's own parser, which is not correctly rounded: for some values (Adam's bias-corrected lr at
    lr_mult 0.1, step 3, for one) it lands one unit in the last place away from ``np.float32(value)``. So an
    operator is asked (once per value, cached; ``parse_floats`` asks for many at once) to echo it.

    Examples:
        >>> param_float32(2.0201059743896793e-05) == np.nextafter(np.float32(2.0201059743896793e-05), 1)
        True
    """
    value = float(value)
    if value == 0.0:
        return np.float32(0.0)
    if value not in _PARSED:
        parse_floats([value])
    return _PARSED[value]


def param_float32_array(values) -> np.ndarray:
    """``param_float32`` of each value, as a float32 array (each distinct value looked up once; parse them first
    with ``parse_floats`` to ask MXNet for all the new ones in one round trip)."""
    parsed = {value: param_float32(value) for value in set(values)}
    return np.array([parsed[value] for value in values], dtype=np.float32)


def mx_float(dtype: np.dtype):
    """A value as an MXNet operator's ``float`` parameter reaches a kernel on ``dtype`` data: parsed by MXNet into a
    float32 (``param_float32``), then cast."""
    return lambda value: dtype.type(param_float32(value))


class Choice:
    """The faster implementation for one table, picked by timing each on the first few steps.

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
