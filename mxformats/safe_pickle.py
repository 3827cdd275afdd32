"""Reading MXNet's pickled optimizer states without running code from the file, with or without MXNet.

``Trainer.save_states``, ``Module.save_optimizer_states`` and ``LrTrainer.save_states`` write a pickle of the
updater's states (NDArrays in plain containers) and, with ``dump_optimizer``, the optimizer and its lr scheduler.
A pickle can name any importable callable; ``safe_loads`` admits only the classes such a file legitimately holds:

- NDArrays (``mxnet.ndarray.ndarray.NDArray``, the sparse ones) and the ``bytearray`` their state is kept in;
- MXNet's optimizers and lr schedulers (and, as live objects, subclasses of them in modules this process has already
  imported: a user's own optimizer, never imported on the file's word);
- numpy arrays, scalars and dtypes, and plain containers (``set``, ``frozenset``, ``OrderedDict``, ``complex``).

Anything else is refused with ``UnsafeStatesError`` naming the class, before it is imported or called. A hostile
file of a few bytes can neither exhaust the memory nor crash or hang the reader (``pickle_limits``): containers
nested too deep are refused from the opcodes before loading, what an admitted class allocates never passes the
pickle's own size (NDArrays included: their header is checked against the bytes that follow it), and the loaded
structure is walked once, iteratively, for nesting deeper than ``pickle_limits.MAX_NESTING`` or a container holding
itself.

Two ways to read (``as_data``):

- live (the trainer's side, needs MXNet): NDArrays and MXNet's optimizer objects, as ``pickle`` would give them;
- as data (the torch side, no MXNet): every NDArray becomes the numpy array of its values (``mxformats.ndarray``) and
  every optimizer or lr scheduler a ``PickledObject``: its class name (``type(obj).__name__`` is MXNet's, e.g.
  ``"Adam"``) and its attributes, read-only, nothing of MXNet's code run. A user's subclass of an MXNet optimizer
  is read so too where this process has imported MXNet and the subclass's module; elsewhere it is refused.
"""
import io
import pickle
import sys

import numpy as np

from .errors import UnsafeStatesError
from .ndarray import decode_ndarray, ndarray_info
from .pickle_limits import MAX_NESTING, Allocations, nesting_offset, nesting_problem

__all__ = ["safe_loads", "PickledObject", "ALLOWED", "MXNET_OPTIMIZERS", "MXNET_LR_SCHEDULERS"]

#: (module, name) pairs a states pickle may name.
ALLOWED = frozenset({
    ("builtins", "bytearray"), ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"),
    ("collections", "OrderedDict"),
    ("mxnet.ndarray.ndarray", "NDArray"),
    ("mxnet.ndarray.sparse", "RowSparseNDArray"), ("mxnet.ndarray.sparse", "CSRNDArray"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "scalar"),
})
#: MXNet 1.9.1's optimizer classes (``mxnet.optimizer``; GroupAdaGrad in ``mxnet.optimizer.contrib``).
MXNET_OPTIMIZERS = frozenset({
    "SGD", "Signum", "FTML", "LARS", "LBSGD", "LAMB", "DCASGD", "NAG", "SGLD", "ccSGD", "Adam", "AdaGrad", "RMSProp",
    "AdaDelta", "Ftrl", "Adamax", "Nadam", "Test", "GroupAdaGrad", "Optimizer"})
#: MXNet 1.9.1's lr scheduler classes (``mxnet.lr_scheduler``).
MXNET_LR_SCHEDULERS = frozenset({"LRScheduler", "FactorScheduler", "MultiFactorScheduler", "PolyScheduler",
                                 "CosineScheduler"})
_OPTIMIZER_MODULES = ("mxnet.optimizer.optimizer", "mxnet.optimizer", "mxnet.optimizer.contrib")
_SCHEDULER_MODULES = ("mxnet.lr_scheduler",)
_NDARRAYS = {("mxnet.ndarray.ndarray", "NDArray"), ("mxnet.ndarray.sparse", "RowSparseNDArray"),
             ("mxnet.ndarray.sparse", "CSRNDArray")}


def _mxnet_class(module: str, name: str):
    """The optimizer or lr scheduler class ``module.name``: MXNet's own, or a subclass of them in a module this
    process has already imported (a user's own optimizer); never imports anything. None otherwise."""
    import mxnet as mx
    if module in _OPTIMIZER_MODULES + _SCHEDULER_MODULES:
        found = getattr(mx.optimizer, name, None) if "optimizer" in module else getattr(mx.lr_scheduler, name, None)
    else:
        found = getattr(sys.modules.get(module), name, None) if "." not in name else None
    bases = (mx.optimizer.Optimizer, mx.lr_scheduler.LRScheduler)
    return found if isinstance(found, type) and issubclass(found, bases) else None


class PickledObject:
    """An MXNet optimizer or lr scheduler read from a pickle as data: its attributes, read-only, and its class name.

    ``type(obj).__name__`` is MXNet's class name (``"Adam"``), ``obj.mxnet_class`` the full one
    (``"mxnet.optimizer.optimizer.Adam"``), ``vars(obj)`` the attributes the pickle held.

    Examples:
        >>> states, optimizer = safe_loads(raw, "trainer.states", as_data=True)  # doctest: +SKIP
        >>> type(optimizer).__name__, optimizer.num_update  # doctest: +SKIP
        ('Adam', 20)
    """

    mxnet_class = ""

    def __setstate__(self, state):
        if not isinstance(state, dict):
            raise UnsafeStatesError(f"the pickled {self.mxnet_class} holds {type(state).__name__} where MXNet writes "
                                    f"an attribute dict; the file is damaged or not MXNet's")
        self.__dict__.update(state)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} read from a states file is read-only")

    def __repr__(self):
        return f"<{self.mxnet_class} read as data: {sorted(vars(self))[:6]}...>"


_STAND_INS = {}
_NDARRAY_BYTES = "the bytes of a pickled NDArray"  # how a fault in them is named (offsets count from their start)


def _stand_in(module: str, name: str) -> type:
    """The ``PickledObject`` subclass standing for MXNet's ``module.name`` (one per class, named as MXNet's)."""
    key = (module, name)
    if key not in _STAND_INS:
        _STAND_INS[key] = type(name, (PickledObject,), {"mxnet_class": f"{module}.{name}", "__module__": __name__})
    return _STAND_INS[key]


class _NDArrayBytes:
    """What a pickled NDArray unpickles to as data: its bytes, decoded to numpy by ``_to_data`` once loaded."""

    def __init__(self, *args):
        self.raw = None

    def __setstate__(self, state):
        self.raw = state.get("handle") if isinstance(state, dict) else None


def _checked_ndarray(cls: type) -> type:
    """A subclass of MXNet's NDArray class ``cls`` whose unpickling checks the array's header against its bytes
    (``ndarray_info``: MXNet would allocate what the header announces) before MXNet reads it, then becomes ``cls``."""
    def __setstate__(self, state):
        handle = state.get("handle") if isinstance(state, dict) else None
        if handle is not None:
            ndarray_info(handle, _NDARRAY_BYTES)
        cls.__setstate__(self, state)
        self.__class__ = cls
    return type(cls.__name__, (cls,), {"__slots__": (), "__setstate__": __setstate__})


class _StatesUnpickler(pickle.Unpickler):
    """An Unpickler whose ``find_class`` admits only ``ALLOWED`` and MXNet's optimizer/scheduler classes, those that
    allocate bounded by the pickle's size (``pickle_limits.Allocations``)."""

    def __init__(self, data: bytes, source: str, as_data: bool):
        super().__init__(io.BytesIO(data))
        self._source, self._as_data = source, as_data
        self._allocations, self._ndarrays = Allocations(len(data), source), {}

    def find_class(self, module, name):
        if (module, name) in ALLOWED:
            if (module, name) in _NDARRAYS:
                if self._as_data:
                    return _NDArrayBytes
                if name not in self._ndarrays:
                    self._ndarrays[name] = _checked_ndarray(super().find_class(module, name))
                return self._ndarrays[name]
            if module == "numpy.core.multiarray" and np.lib.NumpyVersion(np.__version__) >= "2.0.0":
                module = "numpy._core.multiarray"  # numpy 2 moved it (the old name still works, with a warning)
            return self._bounded(name, super().find_class(module, name))
        found = self._data_class(module, name) if self._as_data else _mxnet_class(module, name)
        if found is not None:
            return found
        raise UnsafeStatesError(f"States file {self._source!r} names {module}.{name}, which an optimizer states file "
                                f"never holds; it was refused unread (loading it could run code). Load only states "
                                f"files you wrote; for a custom optimizer, import its module before loading"
                                + (" (that needs MXNet)." if self._as_data else "."))

    def _bounded(self, name: str, found):
        """``found`` (an admitted class), or the ``Allocations`` check standing for it where it allocates."""
        limits = self._allocations
        bounded = {"bytearray": limits.bytearray, "ndarray": limits.ndarray_type, "dtype": limits.dtype}
        return limits.reconstruct(found) if name == "_reconstruct" else bounded.get(name, found)

    @staticmethod
    def _data_class(module, name):
        """The stand-in of MXNet's optimizer or scheduler ``module.name``; of a subclass of them only where this
        process has already imported MXNet and that class's module (nothing is imported on the file's word)."""
        if (module in _OPTIMIZER_MODULES and name in MXNET_OPTIMIZERS
                or module in _SCHEDULER_MODULES and name in MXNET_LR_SCHEDULERS):
            return _stand_in(module, name)
        if "mxnet" in sys.modules and _mxnet_class(module, name) is not None:
            return _stand_in(module, name)
        return None


def _to_data(value, seen: dict):
    """``value`` with every ``_NDArrayBytes`` decoded to numpy, through containers and PickledObjects."""
    if id(value) in seen:
        return seen[id(value)]
    if isinstance(value, _NDArrayBytes):
        result = decode_ndarray(value.raw, _NDARRAY_BYTES) if value.raw is not None else None
    elif isinstance(value, dict):
        result = type(value)()
        seen[id(value)] = result
        for key, item in value.items():
            result[key] = _to_data(item, seen)
    elif isinstance(value, (list, tuple)):
        result = type(value)(_to_data(item, seen) for item in value)
    elif isinstance(value, PickledObject):
        seen[id(value)] = value
        for key, item in vars(value).items():
            value.__dict__[key] = _to_data(item, seen)
        result = value
    else:
        result = value
    seen[id(value)] = result
    return result


def safe_loads(data: bytes, source: str, as_data: bool = False):
    """Unpickle MXNet optimizer states, refusing every class they do not legitimately hold.

    Args:
        data: The pickled bytes.
        source: How messages name the file.
        as_data: False: live MXNet objects (needs MXNet). True: numpy arrays and ``PickledObject`` s (no MXNet).

    Returns:
        The unpickled object (a states dict, or ``(states, optimizer)``).

    Raises:
        UnsafeStatesError: the pickle names a class outside ``ALLOWED``, MXNet's optimizers and schedulers (and, live,
            their imported subclasses); it is neither imported nor called. Or it asks for more memory than its size
            (``bytearray(4 * 10**9)``), holds an object array, or nests beyond ``pickle_limits.MAX_NESTING``.
        MXNetFileError: an NDArray whose bytes are damaged (its header announces other bytes than follow); as data,
            one that cannot be read without MXNet (sparse).

    Examples:
        >>> states, optimizer = safe_loads(open("trainer.states", "rb").read(), "trainer.states", as_data=True)
    """
    deep = nesting_offset(data)
    if deep is not None:
        raise _too_deep(source, f"containers nest more than {MAX_NESTING} deep (at byte {deep})")
    loaded = _StatesUnpickler(data, source, as_data).load()
    problem = nesting_problem(loaded)
    if problem:
        raise _too_deep(source, problem)
    return _to_data(loaded, {}) if as_data else loaded


def _too_deep(source: str, problem: str) -> UnsafeStatesError:
    return UnsafeStatesError(f"States file {source!r}: {problem}, which no optimizer states file does (MXNet's nest "
                             f"4 deep, without cycles); it was refused (reading it could exhaust the stack): the "
                             f"file is damaged or crafted, save the states again.")
