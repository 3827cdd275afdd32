"""Which parameters the fast path updates, and the per-tensor tables a step hands to its back-ends.

Nothing is packed into shared buffers: every weight, gradient and optimizer state stays the NDArray that MXNet (or the
optimizer) made. So MXNet may reorder a weight in place (MKLDNN), a static_alloc graph keeps writing the gradient
arrays it bound, and ``load_states``, ``set_data``, ``freeze``/``unfreeze`` or a direct ``grad_req`` change need no
bookkeeping: each step reads the arrays that the Parameters and the Updater hold at that moment. A ``Table`` lists,
for one context, dtype and state structure, the tensors a step updates with their lr and wd; a back-end updates a
whole table in one launch (the compiled and numpy back-ends through ``Table.addresses``, MXNet's operators through
the NDArrays).
"""
import numpy as np

from mxformats.optimizer_state import state_arrays

from .base import ArrayCalls, state_signature

#: ``route``'s answer for a parameter copy that can take the fast path.
FAST = "fast"
#: The path of a parameter that is not updated at all (``grad_req='null'``, e.g. frozen).
NOT_UPDATED = "none"


def route(param, k: int, optimizer) -> str:
    """``FAST`` if ``param``'s copy on context ``k`` can take the fast path, else the path it takes instead.

    Returns:
        ``FAST``; ``NOT_UPDATED`` for ``grad_req='null'``; or ``'stock:<reason>'`` (the stock Updater updates it, in
        the same step): ``uninitialized``, ``sparse`` (row_sparse/csr weight or gradient), ``float16`` (float16
        without ``multi_precision=True``), or the dtype's name (integer and other float types).
    """
    if param.grad_req == "null":
        return NOT_UPDATED
    if param._data is None or param._grad is None or param._deferred_init:
        return "stock:uninitialized"
    data, grad = param._data[k], param._grad[k]
    if data.stype != "default" or grad.stype != "default":
        return "stock:sparse"
    dtype = np.dtype(data.dtype)
    if dtype == np.float16 and not optimizer.multi_precision:
        return "stock:float16"
    if dtype not in (np.float16, np.float32, np.float64) or np.dtype(grad.dtype) != dtype:
        return f"stock:{dtype.name}"
    return FAST


def ready_state(updater, index: int, weight):
    """The Updater's state for ``index``, created or moved to the weight's context first, as ``Updater.__call__`` does
    before it updates."""
    if index not in updater.states:
        updater.states[index] = updater.optimizer.create_state_multi_precision(index, weight)
        updater.states_synced[index] = True
    elif not updater.states_synced.get(index, True):
        updater.states[index] = updater.sync_state_context(updater.states[index], weight.context)
        updater.states_synced[index] = True
    return updater.states[index]


def state_key(state, weight, sizes: bool = True, context: bool = True):
    """The state's signature if a back-end can update ``weight`` with it, else None (the stock Updater then does).

    It can when the state is None or (nested tuples of) dense arrays of the weight's size, on its context, all of the
    weight's dtype, or all float32 for a float16 weight (master copy and states of ``multi_precision``). ``sizes``
    and ``context`` False skip those two checks (a state made on a 1-element stand-in; one not yet moved).
    """
    signature = state_signature(state)
    if signature is None:
        return None
    dtype = np.dtype(weight.dtype)
    wanted = np.float32 if dtype == np.float16 else dtype
    for leaf in state_arrays(state):
        if np.dtype(leaf.dtype) != wanted or (context and leaf.context != weight.context):
            return None
        if sizes and leaf.size != weight.size:
            return None
    return signature


class Route:
    """One parameter copy's route, worked out from its arrays and reused while they stay the same objects.

    An NDArray's dtype, storage and shape never change, so what ``route`` and ``state_key`` found holds as long as the
    Parameter, the Updater and the optimizer hold the same objects (``load_states``, ``set_data`` on a new context,
    ``initialize(force_reinit=True)``, a ``grad_req`` change all install new ones) and the state's structure cannot
    change in place (tuples, not lists). A parameter copy whose route is not ``FAST`` is routed again at every step.
    """

    __slots__ = ("index", "weight", "grad", "state", "optimizer", "key", "slots", "size", "mutable")

    def __init__(self, k: int, index: int, param, updater):
        self.index, self.optimizer, self.state, self.slots, self.key = index, updater.optimizer, _MISSING, [], None
        self.weight = self.grad = None
        self.mutable = False
        if route(param, k, updater.optimizer) != FAST:
            return
        self.weight, self.grad = param._data[k], param._grad[k]
        self.size = self.weight.size
        self.state = ready_state(updater, index, self.weight)
        self.mutable = _mutable(self.state)
        signature = state_key(self.state, self.weight)
        if signature is not None:
            self.key, self.slots = (np.dtype(self.weight.dtype), signature), state_arrays(self.state)

    def holds(self, param, k: int, updater) -> bool:
        """Whether ``param`` on context ``k`` and ``updater`` still hold the arrays this route was worked out from."""
        if self.weight is None or param._data is None or param._grad is None:
            return False
        return (param._data[k] is self.weight and param._grad[k] is self.grad and updater.optimizer is self.optimizer
                and updater.states.get(self.index, _MISSING) is self.state
                and updater.states_synced.get(self.index, True) and not self.mutable)


#: A state not looked at (the route is not FAST) or not in the Updater.
_MISSING = object()


def _mutable(state) -> bool:
    """Whether a state's structure can change in place (it holds a list)."""
    return isinstance(state, list) or (isinstance(state, tuple) and any(_mutable(item) for item in state))


class Tensor:
    """One parameter copy in a table: its own weight, gradient and state arrays, and its lr and wd for this step."""

    __slots__ = ("index", "weight", "grad", "slots", "lr", "wd")

    def __init__(self, index: int, weight, grad, slots: list):
        self.index, self.weight, self.grad, self.slots = index, weight, grad, slots
        self.lr = self.wd = None


class Table:
    """The tensors of one context that share (dtype, state structure): what one back-end launch updates.

    A table is kept across steps while its parameters' arrays are (``plan.Plan``), so what a back-end derives from its
    fixed layout (the compiled back-end's cut into shares) is kept in ``derived``; lr and wd are given at each step.

    Examples:
        >>> table = Table(mx.cpu(), np.dtype("float32"), "none")
        >>> table.add(0, weight, grad, [], weight.size)
        >>> addresses, lengths = table.addresses()   # after base.wait_all()
    """

    def __init__(self, ctx, dtype: np.dtype, signature):
        self.ctx, self.dtype, self.signature = ctx, dtype, signature
        self.tensors, self._arrays, self._sizes = [], [], []
        self.derived = {}
        self._lengths = self._addresses = self._handles = None

    @property
    def slot_count(self) -> int:
        """State arrays per tensor."""
        return len(self.tensors[0].slots) if self.tensors else 0

    @property
    def lengths(self) -> np.ndarray:
        """Each tensor's element count (int64)."""
        if self._lengths is None or self._lengths.size != len(self._sizes):
            self._lengths = np.array(self._sizes, dtype=np.int64)
        return self._lengths

    @property
    def size(self) -> int:
        """Elements in all tensors."""
        return sum(self._sizes)

    def add(self, index: int, weight, grad, slots: list, size: int) -> None:
        """Append one parameter copy (``size``: its element count)."""
        self.tensors.append(Tensor(index, weight, grad, slots))
        self._arrays += [weight, grad] + slots
        self._sizes.append(size)
        self._addresses = self._handles = None

    def addresses(self, calls=None) -> tuple:
        """(addresses, lengths): an int64 row (weight, grad, *state slots) of element-0 addresses per tensor, and
        each tensor's element count. Every address is asked of MXNet now (``base.data_pointers``, through ``calls``,
        a ``base.ArrayCalls``: ctypes if None), which brings a weight MKLDNN reordered back to the default layout;
        call after ``base.wait_all()``, and use before anything else runs on these arrays. The arrays returned are
        the table's own, rewritten at the next call."""
        calls = calls or _CTYPES
        if self._addresses is None:
            self._addresses = np.empty((len(self.tensors), 2 + self.slot_count), dtype=np.int64)
        if self._handles is None:
            self._handles = calls.handles(self._arrays)
        calls.data_pointers(self._arrays, self._handles, self._addresses.reshape(-1))
        return self._addresses, self.lengths


#: The ctypes calls, for ``Table.addresses`` without an ``ArrayCalls``.
_CTYPES = ArrayCalls()
