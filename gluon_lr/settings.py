"""The settings document of an MXNet optimizer: what ``LrTrainer.export_settings`` and ``gluon_lr.export_settings``
write (the format, its reader and its checks live in ``mxformats.settings``, which needs no MXNet)."""
import inspect
from typing import Optional

import mxnet as mx
import numpy as np
from mxnet import lr_scheduler as _lrs
from mxnet import optimizer as _opt

from mxformats.settings import FORMAT, SCHEDULERS, SCHEMA_VERSION, WARMUP

from .errors import SettingsFileError

__all__ = ["device_count", "settings_document"]

_BASE_ARGS = frozenset(inspect.signature(_opt.Optimizer.__init__).parameters)
#: Constructor arguments that MXNet stores under another attribute name.
_ATTR_ALIASES = {"eps": "float_stable_eps", "pwr": "power"}


def _hyperparameters(optimizer: _opt.Optimizer) -> dict:
    """Every constructor argument of the optimizer's class (and its bases below Optimizer), by MXNet's names."""
    found = {}
    for klass in type(optimizer).__mro__:
        if klass is _opt.Optimizer or "__init__" not in vars(klass):
            continue
        for arg in inspect.signature(klass.__init__).parameters.values():
            if arg.name in _BASE_ARGS or arg.name in found or arg.kind in (arg.VAR_KEYWORD, arg.VAR_POSITIONAL):
                continue
            attr = arg.name if hasattr(optimizer, arg.name) else _ATTR_ALIASES.get(arg.name, arg.name)
            if hasattr(optimizer, attr):
                found[arg.name] = _plain(getattr(optimizer, attr))
            elif arg.name == "begin_epoch" and hasattr(optimizer, "init_updates"):  # LBSGD keeps epoch * per_epoch
                found[arg.name] = _begin_epoch(optimizer)
    if isinstance(optimizer, _opt.LARS):  # MXNet's LARS skips names ending in gamma/beta/bias when it has names:
        found["by_name"] = bool(optimizer.idx2name)  # a Module gives them, a gluon.Trainer does not
    return found


def _begin_epoch(optimizer) -> float:
    """LBSGD's ``begin_epoch`` argument, from the ``init_updates = begin_epoch * updates_per_epoch`` it stores."""
    per_epoch = optimizer.updates_per_epoch
    if not per_epoch:
        return 0
    whole, rest = divmod(optimizer.init_updates, per_epoch)
    return _plain(whole) if rest == 0 else optimizer.init_updates / per_epoch


def _plain(value):
    """A JSON-ready copy of a hyperparameter value (numpy scalars and tuples become Python values and lists)."""
    if isinstance(value, (np.generic,)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _scheduler_base_lr(scheduler) -> float:
    """The base_lr the scheduler was built with (Factor/MultiFactor decay their ``base_lr`` in place).

    When a FactorScheduler is clamped at ``stop_factor_lr``, the value returned reproduces every learning rate from
    the current step on (not the ones before).
    """
    if isinstance(scheduler, (_lrs.PolyScheduler, _lrs.CosineScheduler)):
        return scheduler.base_lr_orig
    if isinstance(scheduler, _lrs.MultiFactorScheduler):
        return scheduler.base_lr / scheduler.factor ** scheduler.cur_step_ind
    if isinstance(scheduler, _lrs.FactorScheduler):
        return scheduler.base_lr / scheduler.factor ** (scheduler.count // scheduler.step)
    return scheduler.base_lr


def _scheduler_document(scheduler) -> Optional[dict]:
    """The scheduler as {type, base_lr, <constructor arguments>}, or None."""
    if scheduler is None:
        return None
    kind = type(scheduler).__name__
    if kind not in SCHEDULERS:
        raise SettingsFileError(f"Cannot export lr scheduler {kind}: the settings file supports {sorted(SCHEDULERS)}; "
                                f"use one of those (mx.lr_scheduler) or export without a scheduler.")
    document = {"type": kind, "base_lr": float(_scheduler_base_lr(scheduler))}
    for arg in SCHEDULERS[kind] + WARMUP:
        document[arg] = _plain(getattr(scheduler, _ATTR_ALIASES.get(arg, arg)))
    return document


def device_count(trainer) -> int:
    """The devices whose gradients one step of a Gluon ``Trainer`` sums: its contexts, times the workers of a dist
    kvstore (the data-parallel size a torch job continues the run with).

    Examples:
        >>> device_count(gluon.Trainer(net.collect_params(), "sgd"))  # net on [mx.cpu(0), mx.cpu(1)]
        2
    """
    kvstore = trainer._kvstore if trainer._kvstore is not None else trainer._kvstore_params.get("kvstore")
    workers = kvstore.num_workers if isinstance(kvstore, mx.kvstore.KVStore) and "dist" in kvstore.type else 1
    return len(trainer._contexts) * workers


def settings_document(optimizer: _opt.Optimizer, params: list, num_update: int, num_devices: int = 1) -> dict:
    """Build the settings document (see the README) for an optimizer and per-parameter records.

    Args:
        optimizer: The MXNet optimizer.
        params: One dict per parameter in index order, with keys name, shape, dtype, lr_mult, wd_mult, frozen,
            masked_elements.
        num_update: The optimizer's update count.
        num_devices: The devices whose gradients each step summed (``device_count``).

    Returns:
        The document (a JSON-serialisable dict).

    Raises:
        SettingsFileError: the lr scheduler is of a type the format does not hold.

    Examples:
        >>> doc = settings_document(trainer.optimizer, records, trainer.optimizer.num_update)
    """
    scheduler = _scheduler_document(optimizer.lr_scheduler)
    learning_rate = scheduler["base_lr"] if scheduler else optimizer.lr
    return {
        "format": FORMAT, "schema_version": SCHEMA_VERSION, "mxnet_version": mx.__version__,
        "optimizer": {"name": type(optimizer).__name__.lower(), "learning_rate": float(learning_rate),
                      "wd": float(optimizer.wd), "rescale_grad": float(optimizer.rescale_grad),
                      "clip_gradient": _plain(optimizer.clip_gradient),
                      "multi_precision": bool(optimizer.multi_precision),
                      "hyperparameters": _hyperparameters(optimizer)},
        "lr_scheduler": scheduler,
        "num_update": int(optimizer.num_update),
        "num_devices": int(num_devices),
        "params": {record["name"]: dict({"index": i}, **{k: v for k, v in record.items() if k != "name"})
                   for i, record in enumerate(params)},
    }
