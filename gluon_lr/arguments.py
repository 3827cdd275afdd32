"""The checks of ``LrTrainer``'s constructor and call arguments that need MXNet (optimizer names and classes, kvstore
kinds), on top of ``mxformats.validate`` (numbers, flags, paths), which migrate shares.

Each runs before anything changes, so a refused call leaves the trainer (or the Parameters) as they were.
"""
import inspect
import math
from collections.abc import Mapping

import mxnet as mx

from mxformats import validate

from .errors import HyperparameterError, KVStoreConfigError, ParamsTypeError, UnknownOptimizerError

__all__ = ["check_optimizer", "check_kvstore", "check_batch_size", "optimizer_arguments"]

#: kvstore names MXNet 1.9.1's ``kv.create`` takes as they are (it also takes any name holding "device", "nccl" or
#: "dist"); listed in messages.
_KVSTORES = ("local", "device", "nccl", "dist_sync", "dist_async", "dist_sync_device", "dist_async_device",
             "dist_device_sync", "local_update_cpu", "local_allreduce_cpu", "local_allreduce_device")


def optimizer_arguments(klass) -> set:
    """The keyword arguments an MXNet optimizer class takes: its ``__init__`` and its bases' as far as ``**kwargs``
    reaches (``param_dict`` excluded: the Trainer passes it).

    Examples:
        >>> sorted(optimizer_arguments(mx.optimizer.SGD))[:3]
        ['begin_num_update', 'clip_gradient', 'lazy_update']
    """
    names = set()
    for base in klass.__mro__:
        if "__init__" not in vars(base) or base is object:
            continue
        params = list(inspect.signature(base.__init__).parameters.values())[1:]
        names.update(p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return names - {"param_dict"}


def _optimizer_values(optimizer) -> dict:
    """The numeric settings of an optimizer object, by MXNet's argument names (for validation)."""
    names = ("wd", "rescale_grad", "clip_gradient", "momentum", "beta1", "beta2", "epsilon", "rho", "gamma1",
             "gamma2")
    values = {name: getattr(optimizer, name) for name in names if hasattr(optimizer, name)}
    values["learning_rate"] = optimizer.learning_rate if optimizer.lr_scheduler is None else None
    return values


def check_optimizer(optimizer, optimizer_params) -> None:
    """``LrTrainer(optimizer=..., optimizer_params=...)``: a registered name with keyword arguments its class takes,
    each in range; or an ``mx.optimizer.Optimizer`` object (then no ``optimizer_params``) with valid settings.

    Raises:
        ParamsTypeError: ``optimizer`` is neither a name nor an Optimizer; ``optimizer_params`` is not a mapping with
            string keys, or is given with an Optimizer object.
        UnknownOptimizerError: no MXNet optimizer has that name (the nearest registered names are listed).
        HyperparameterError: an argument one of MXNet's optimizers does not take, or a value out of its range.

    Examples:
        >>> check_optimizer("sgd", {"learning_rate": 0.1, "momentum": 0.9})
    """
    if isinstance(optimizer, mx.optimizer.Optimizer):
        if optimizer_params:
            raise ParamsTypeError(f"optimizer_params must be None when optimizer is an {type(optimizer).__name__} "
                                  f"object, got {optimizer_params!r:.80}; set them on the object, or pass the name "
                                  f"{type(optimizer).__name__.lower()!r} with optimizer_params.")
        validate.check_optimizer_params(_optimizer_values(optimizer), f"{type(optimizer).__name__} optimizer")
        return
    if not isinstance(optimizer, str):
        raise ParamsTypeError(f"LrTrainer(optimizer=...) must be an optimizer name such as 'sgd' or an "
                              f"mx.optimizer.Optimizer, got {type(optimizer).__name__} {optimizer!r:.60}; pass e.g. "
                              f"'sgd' or mx.optimizer.SGD(learning_rate=0.1).")
    registry = mx.optimizer.Optimizer.opt_registry
    validate.check_name(optimizer, registry, "LrTrainer(optimizer=...)", UnknownOptimizerError,
                        hint=" (MXNet's registered optimizers; a class of your own needs @mx.optimizer.register)")
    if optimizer_params is None:
        return
    if not isinstance(optimizer_params, Mapping) or not all(isinstance(k, str) for k in optimizer_params):
        raise ParamsTypeError(f"optimizer_params must be a dict of argument name (str) -> value, got "
                              f"{type(optimizer_params).__name__} {optimizer_params!r:.60}; pass e.g. "
                              f"{{'learning_rate': 0.1}}.")
    klass = registry[optimizer.lower()]
    accepted = optimizer_arguments(klass)
    unknown = sorted(set(optimizer_params) - accepted) if klass.__module__.startswith("mxnet.") else []
    if unknown:  # a class of the user's may take what its signature does not show (kwargs.pop): not checked
        near = {name: validate.nearest_names(name, accepted, cutoff=0.4) for name in unknown[:3]}
        raise HyperparameterError(f"optimizer_params {unknown} are not arguments of MXNet's {optimizer!r} optimizer "
                                  f"(nearest: {near}); it takes {sorted(accepted)}.")
    validate.check_optimizer_params(dict(optimizer_params), "optimizer_params")


def check_kvstore(kvstore, compression_params, update_on_kvstore) -> None:
    """``LrTrainer(kvstore=..., compression_params=..., update_on_kvstore=...)``: a kvstore name MXNet creates, a
    KVStore object or None; a dict or None; True, False or None; and not ``update_on_kvstore=True`` without a kvstore.

    Raises:
        KVStoreConfigError: naming the argument, what was received and what is accepted.

    Examples:
        >>> check_kvstore("device", None, None)
    """
    if kvstore is not None and not isinstance(kvstore, (str, mx.kvstore.KVStoreBase)):
        raise KVStoreConfigError(f"LrTrainer(kvstore=...) must be a kvstore name such as 'device', an mx.kv.KVStore "
                                 f"or None, got {type(kvstore).__name__} {kvstore!r:.60}; pass e.g. kvstore='device'.")
    if isinstance(kvstore, str) and not _known_kvstore(kvstore):
        raise KVStoreConfigError(f"LrTrainer(kvstore={kvstore!r:.60}) is not a kvstore MXNet creates; nearest: "
                                 f"{validate.nearest_names(kvstore, _KVSTORES) or list(_KVSTORES[:3])}; pass one of "
                                 f"{list(_KVSTORES)}.")
    if compression_params is not None and not isinstance(compression_params, Mapping):
        raise KVStoreConfigError(f"LrTrainer(compression_params=...) must be a dict such as {{'type': '2bit', "
                                 f"'threshold': 0.5}} or None, got {type(compression_params).__name__} "
                                 f"{compression_params!r:.60}.")
    if update_on_kvstore is not None and not isinstance(update_on_kvstore, bool):
        raise KVStoreConfigError(f"LrTrainer(update_on_kvstore=...) must be True, False or None, got "
                                 f"{type(update_on_kvstore).__name__} {update_on_kvstore!r:.40}.")
    if kvstore is None and update_on_kvstore:
        raise KVStoreConfigError("update_on_kvstore=True needs a kvstore, got kvstore=None; pass kvstore='device' "
                                 "(or 'local'), or leave update_on_kvstore=None to update on the workers.")


def _known_kvstore(name: str) -> bool:
    """True when MXNet's ``kv.create`` takes ``name`` (its C++ rules, and the Python kvstore registry)."""
    lowered = name.lower()
    return (lowered in _KVSTORES or lowered in mx.kvstore.KVStoreBase.kv_registry
            or any(part in lowered for part in ("device", "nccl", "dist")))


def check_batch_size(batch_size, what: str) -> float:
    """``step``/``update``'s ``batch_size``: a finite number > 0 (the gradients are scaled by ``1 / batch_size``).

    Raises:
        HyperparameterError: a string, 0 (MXNet divides by it), a negative (MXNet would step uphill), NaN or infinity.

    Examples:
        >>> check_batch_size(32, "step(batch_size)")
        32.0
    """
    return validate.check_number(batch_size, what, 0, False, math.inf, False, error=HyperparameterError)
