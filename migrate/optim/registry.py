"""The registry of MXNet optimizers: one ``OptimizerRecord`` per MXNet 1.9.1 optimizer, keyed by MXNet's name.

A record holds everything migrate knows of one optimizer: its exact torch class (with its state names), the
compiled kernels that class runs on CPU (``mxupdate.kernels``), its closest stock ``torch.optim`` counterpart with
the builder that lists what differs, and the converters of MXNet's saved state into either. The family modules
(``sgd_family``, ``large_batch``, ``adam_family``, ``adagrad_family``) each register their records;
``migrate.optim`` imports them all, so the registry is full once ``migrate.optim`` is imported. Adding an optimizer
is one record in one family module (and its test). Registering a name twice is an error; looking up an unknown
name names the nearest ones.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

from mxformats.settings import OPTIMIZER_ALIASES
from migrate.errors import UnsupportedOptimizerError

__all__ = ["OptimizerRecord", "StockStateInput", "record", "records", "register", "registered_names"]

_RECORDS: dict = {}


class StockStateInput(NamedTuple):
    """One parameter's MXNet optimizer state, as a record's ``stock_state`` converter takes it.

    Attributes:
        mx_name: The MXNet parameter name.
        arrays: Its MXNet state arrays as torch tensors in torch layout, in MXNet's order (``state_names``).
        count: Its MXNet update count.
        step: ``count`` as the scalar tensor a stock ``torch.optim`` optimizer keeps in ``state["step"]``.
        lr: The lr of the next step, ``schedule(num_update + 1) * lr_mult``.
        hyper: The settings' MXNet hyperparameters, ``wd`` included.
    """

    mx_name: str
    arrays: list
    count: int
    step: Any
    lr: float
    hyper: dict


@dataclass(frozen=True)
class OptimizerRecord:
    """What migrate knows of one MXNet optimizer.

    Attributes:
        name: MXNet's registered name (``mx.optimizer.create(name)``), lower case.
        exact_class: migrate's torch optimizer that replays MXNet's update (a ``base.MXNetOptimizer``).
        kernels: The names of the ``mxupdate.kernels`` the exact class runs on CPU tensors (MXNet's C++ loops replayed
            bit for bit, through ``migrate.optim.compiled``), empty where torch operations replay the update.
        stock_class: The stock ``torch.optim`` class closest to it, or None where there is none.
        stock_optimizer: ``(groups, options) -> (stock_class optimizer, differences)``: builds the stock counterpart
            from param groups and MXNet's options (``lr``, ``weight_decay``, the hyperparameters) and lists in
            sentences what differs from MXNet; it may adjust the groups (a decoupled wd set to 0). None with
            ``stock_class``.
        stock_state: ``(StockStateInput) -> (state dict, differences)``: one parameter's MXNet state as the stock
            optimizer's state, and what did not cross. None with ``stock_class``.
        master_last: MXNet's ``multi_precision`` state is ``(state, weight32)`` (SGD, NAG, LARS) rather than
            ``(weight32, state)``.
        state_shape: ``param -> shape`` of the state arrays where they are not the parameter's own shape in torch
            layout (GroupAdaGrad keeps one history per row); None: the parameter's shape, converted by the mapping.
        extra_state: ``(mx_optimizer, optimizer, targets) -> None``: copies what the pickled MXNet optimizer keeps
            beyond the per-parameter states (Nadam's momentum schedule, ...) into the exact torch optimizer
            (``targets``: ``mx_states.StateTargets``); None where it keeps nothing more.

    Examples:
        >>> record("adam").exact_class.__name__, record("adam").state_names, record("adam").stock_class.__name__
        ('Adam', ('mean', 'var'), 'Adam')
    """

    name: str
    exact_class: type
    kernels: tuple
    stock_class: Optional[type]
    stock_optimizer: Optional[Callable]
    stock_state: Optional[Callable]
    master_last: bool = False
    state_shape: Optional[Callable] = None
    extra_state: Optional[Callable] = None

    @property
    def state_names(self) -> tuple:
        """The names of one parameter's state buffers in MXNet's order of its state arrays (the exact class's)."""
        return tuple(self.exact_class.state_names)

    @property
    def state_layouts(self) -> tuple:
        """Every tuple of state names MXNet may keep for one parameter (RMSProp: ``("n",)`` or ``("n", "g",
        "delta")``)."""
        return tuple(self.exact_class.state_layouts or (self.state_names,))


def register(entry: OptimizerRecord) -> OptimizerRecord:
    """Add ``entry`` to the registry under ``entry.name``.

    Raises:
        ValueError: the name is registered already, or is one of ``mxformats.settings.OPTIMIZER_ALIASES`` (read as
            another optimizer's name).

    Examples:
        >>> register(OptimizerRecord("sgd", SGD, (), None, None, None))  # doctest: +SKIP
        Traceback (most recent call last):
        ValueError: MXNet optimizer 'sgd' is registered twice (SGD and SGD); keep one record per optimizer
    """
    if entry.name in _RECORDS:
        first = _RECORDS[entry.name].exact_class.__name__
        raise ValueError(f"MXNet optimizer {entry.name!r} is registered twice ({first} and "
                         f"{entry.exact_class.__name__}); keep one record per optimizer")
    if entry.name in OPTIMIZER_ALIASES:
        raise ValueError(f"MXNet optimizer {entry.name!r} is read as {OPTIMIZER_ALIASES[entry.name]!r} "
                         f"(mxformats.settings.OPTIMIZER_ALIASES); register it under that name")
    _RECORDS[entry.name] = entry
    return entry


def record(name: str) -> OptimizerRecord:
    """The record of MXNet optimizer ``name`` (an alias such as ``ccsgd`` gives the record it stands for).

    Raises:
        UnsupportedOptimizerError: no record has that name (names the nearest registered names and all of them).

    Examples:
        >>> record("ccsgd").name
        'sgd'
    """
    key = OPTIMIZER_ALIASES.get(name, name)
    if key not in _RECORDS:
        near = difflib.get_close_matches(str(name), registered_names(), n=3, cutoff=0.5)
        raise UnsupportedOptimizerError(f"optimizer {name!r} has no torch translation (nearest names: "
                                        f"{near or 'none'}); supported: {sorted(_RECORDS)}; retrain in MXNet with "
                                        f"one of them or port it by hand")
    return _RECORDS[key]


def records() -> list:
    """Every registered record, sorted by name.

    Examples:
        >>> [r.name for r in records()][:3]
        ['adadelta', 'adagrad', 'adam']
    """
    return [_RECORDS[name] for name in sorted(_RECORDS)]


def registered_names() -> list:
    """Every MXNet optimizer name ``record`` accepts, aliases included, sorted.

    Examples:
        >>> "ccsgd" in registered_names() and "sgd" in registered_names()
        True
    """
    aliases = [alias for alias, name in OPTIMIZER_ALIASES.items() if name in _RECORDS]
    return sorted(set(_RECORDS) | set(aliases))
