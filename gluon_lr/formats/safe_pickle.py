"""Reading MXNet's pickled optimizer states without running code from the file.

``Trainer.save_states``, ``Module.save_optimizer_states`` and ``LrTrainer.save_states`` write a pickle of the
updater's states (NDArrays in plain containers) and, with ``dump_optimizer``, the optimizer and its lr scheduler.
A pickle can name any importable callable; ``safe_loads`` admits only the classes such a file legitimately holds:

- NDArrays (``mxnet.ndarray.ndarray.NDArray``, the sparse ones) and the ``bytearray`` their state is kept in;
- MXNet's optimizers and lr schedulers, and subclasses of them in modules this process has already imported (a
  user's own optimizer: never imported on the file's word);
- numpy arrays, scalars and dtypes, and plain containers (``set``, ``frozenset``, ``OrderedDict``, ``complex``).

Anything else is refused with ``UnsafeStatesError`` naming the class, before it is imported or called.
"""
import io
import pickle
import sys

from ..errors import UnsafeStatesError

__all__ = ["safe_loads", "ALLOWED"]

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
_MXNET_MODULES = ("mxnet.optimizer.optimizer", "mxnet.optimizer", "mxnet.lr_scheduler")


def _mxnet_class(module: str, name: str):
    """The optimizer or lr scheduler class ``module.name``: MXNet's own, or a subclass of them in a module this
    process has already imported (a user's own optimizer); never imports anything. None otherwise."""
    import mxnet as mx
    if module in _MXNET_MODULES:
        found = getattr(mx.optimizer, name, None) if "optimizer" in module else getattr(mx.lr_scheduler, name, None)
    else:
        found = getattr(sys.modules.get(module), name, None) if "." not in name else None
    bases = (mx.optimizer.Optimizer, mx.lr_scheduler.LRScheduler)
    return found if isinstance(found, type) and issubclass(found, bases) else None


class _StatesUnpickler(pickle.Unpickler):
    """An Unpickler whose ``find_class`` admits only ``ALLOWED`` and MXNet's optimizer/scheduler classes."""

    def __init__(self, data: bytes, source: str):
        super().__init__(io.BytesIO(data))
        self._source = source

    def find_class(self, module, name):
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        found = _mxnet_class(module, name)
        if found is not None:
            return found
        raise UnsafeStatesError(f"States file {self._source!r} names {module}.{name}, which an optimizer states file "
                                f"never holds; it was refused unread (loading it could run code). Load only states "
                                f"files you wrote; for a custom optimizer, import its module before loading.")


def safe_loads(data: bytes, source: str):
    """Unpickle MXNet optimizer states, refusing every class they do not legitimately hold.

    Args:
        data: The pickled bytes.
        source: How messages name the file.

    Returns:
        The unpickled object (a states dict, or ``(states, optimizer)``).

    Raises:
        UnsafeStatesError: the pickle names a class outside ``ALLOWED``, MXNet's optimizers and schedulers and their
            imported subclasses (it is neither imported nor called).

    Example:
        >>> states, optimizer = safe_loads(open("trainer.states", "rb").read(), "trainer.states")
    """
    return _StatesUnpickler(data, source).load()
