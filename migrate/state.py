"""MXNet trainer states (``gluon.Trainer.save_states``) -> the state of migrate's exact torch optimizers."""
import json
import os
import pickle

import numpy as np
import torch

from migrate._settings import as_settings
from migrate.errors import InputFileError, StateConversionError

_LR_MAGIC = b"GLUON-LR-STATES\n"  # gluon_lr.states.MAGIC: LrTrainer.save_states wraps MXNet's bytes in a header
_STATE_NAMES = {"sgd": ("momentum_buffer",), "nag": ("momentum_buffer",), "signum": ("momentum_buffer",),
                "adam": ("mean", "var"), "adamax": ("mean", "var"), "nadam": ("mean", "var"), "lamb": ("mean", "var"),
                "adagrad": ("history",), "adadelta": ("acc_g", "acc_delta"), "ftrl": ("z", "n"),
                "rmsprop": ("n", "g", "delta")}


def convert_optimizer_state(mx_states, settings, mapping, optimizer):
    """Fill ``optimizer``'s state from an MXNet trainer's saved states so training continues exactly.

    Copies each parameter's MXNet state arrays (momentum, mean/var, history, z/n, ...) and its update count
    (the ``step`` that Adam-like bias corrections use); for Nadam also the shared momentum schedule.

    Args:
        mx_states: The file written by ``LrTrainer.save_states`` or ``gluon.Trainer.save_states`` (a path), or
            its bytes. LrTrainer's file also names the parameters, which are checked against the settings.
        settings: The settings document (dict) or a path to the settings file.
        mapping: MXNet parameter name -> torch state_dict key; its ``to_torch(mx_name, array)`` is applied when
            present (layout changes), identity otherwise.
        optimizer: The optimizer from ``torch_optimizer(..., exact=True)`` for the same settings and mapping.

    Returns:
        The number of parameters whose state was filled.

    Raises:
        InputFileError: ``mx_states`` cannot be read or unpickled.
        StateConversionError: The states belong to another optimizer or model (unknown index, wrong shape or
            count of arrays), or ``optimizer`` was not built by ``torch_optimizer`` from these settings.

    Example:
        >>> opt = torch_optimizer(model, "settings.json", mapping)
        >>> convert_optimizer_state("trainer.states", "settings.json", mapping, opt)
        >>> sched = torch_lr_scheduler(opt, "settings.json")  # resumes at MXNet's num_update

    Note:
        MXNet's ``save_states`` does not store lr_mult or wd_mult; they come from the settings.
    """
    settings = as_settings(settings)
    header_names, states, mx_optimizer = _load_states(mx_states)
    name = settings["optimizer"]["name"]
    _check_optimizer(name, mx_optimizer, optimizer)
    targets = _targets(optimizer)
    by_index = {entry["index"]: mx_name for mx_name, entry in settings["params"].items()}
    _check_names(header_names, by_index)
    counts = getattr(mx_optimizer, "_index_update_count", {}) if mx_optimizer is not None else {}
    filled = 0
    for index, state in sorted(states.items(), key=lambda item: str(item[0])):
        mx_name = _name_of(index, by_index, settings)
        if mx_name not in targets:
            continue
        param = targets[mx_name]
        arrays = [_to_torch(mapping, mx_name, array, param) for array in _flatten(state)]
        optimizer.state[param] = _torch_state(name, mx_name, arrays, counts.get(index, settings["num_update"]))
        filled += 1
    if name == "nadam" and mx_optimizer is not None:
        optimizer.state["m_schedule"] = float(mx_optimizer.m_schedule)
    return filled


def _load_states(mx_states):
    """(parameter names or None, states by index, pickled MXNet optimizer or None) from a path or bytes."""
    if isinstance(mx_states, (str, os.PathLike)):
        try:
            with open(mx_states, "rb") as handle:
                mx_states = handle.read()
        except OSError as err:
            raise InputFileError(f"cannot read MXNet states file {str(mx_states)!r}: {err.strerror}; pass the file "
                                 f"written by gluon.Trainer.save_states") from None
    if not isinstance(mx_states, (bytes, bytearray)):
        raise InputFileError(f"mx_states must be a path or bytes, got {type(mx_states).__name__}; pass the file "
                             f"written by gluon.Trainer.save_states")
    names, mx_states = _unwrap(bytes(mx_states))
    import mxnet  # noqa: F401  (unpickling NDArrays needs mxnet)
    try:
        loaded = pickle.loads(mx_states)
    except Exception as err:  # pickle raises many kinds on foreign data
        raise InputFileError(f"MXNet states could not be unpickled ({type(err).__name__}: {err}); pass the file "
                             f"written by gluon.Trainer.save_states") from None
    if isinstance(loaded, tuple) and len(loaded) == 2 and isinstance(loaded[0], dict):
        return (names,) + loaded
    if isinstance(loaded, dict):
        return names, loaded, None
    raise InputFileError(f"MXNet states hold a {type(loaded).__name__}, expected a dict of states or "
                         f"(states, optimizer); pass the file written by gluon.Trainer.save_states")


def _unwrap(data):
    """(parameter names in index order, MXNet's states bytes) of an LrTrainer states file; (None, data) otherwise."""
    if not data.startswith(_LR_MAGIC):
        return None, data
    start = len(_LR_MAGIC) + 8
    size = int.from_bytes(data[len(_LR_MAGIC):start], "big")
    try:
        header = json.loads(data[start:start + size].decode("utf-8"))
        names = [str(param["name"]) for param in header["params"]]
    except (ValueError, KeyError, TypeError) as err:
        raise InputFileError(f"LrTrainer states file has a corrupt header ({type(err).__name__}: {err}); save the "
                             f"states again with LrTrainer.save_states") from None
    return names, data[start + size:]


def _check_names(header_names, by_index):
    """StateConversionError unless the states file's parameter names (LrTrainer files) match the settings'."""
    if header_names is None:
        return
    wrong = [f"{i}: {name!r} in the states, {by_index.get(i)!r} in the settings"
             for i, name in enumerate(header_names) if by_index.get(i) != name]
    if wrong:
        raise StateConversionError(f"the states file names other parameters than the settings ({wrong[:5]}); these "
                                   f"states belong to another model: pass the settings exported with them")


def _check_optimizer(name, mx_optimizer, optimizer):
    """Raise StateConversionError unless states, settings and torch optimizer all name the same optimizer."""
    if mx_optimizer is not None and type(mx_optimizer).__name__.lower() != name:
        raise StateConversionError(f"MXNet states come from optimizer {type(mx_optimizer).__name__!r} but the "
                                   f"settings name {name!r}; pass the states saved with these settings")
    from migrate._mx_optimizers import OPTIMIZERS
    if name not in _STATE_NAMES or not isinstance(optimizer, OPTIMIZERS.get(name, ())):
        raise StateConversionError(f"optimizer {type(optimizer).__name__} cannot take MXNet {name!r} states; "
                                   f"build it with migrate.torch_optimizer(model, settings, mapping, exact=True)")


def _targets(optimizer):
    """MXNet name -> torch parameter, from the ``mx_names`` of the optimizer's groups."""
    targets = {}
    for group in optimizer.param_groups:
        targets.update(zip(group.get("mx_names", ()), group["params"]))
    if not targets:
        raise StateConversionError(f"optimizer {type(optimizer).__name__} has no groups with mx_names; build it "
                                   f"with migrate.torch_optimizer so its groups name their MXNet parameters")
    return targets


def _name_of(index, by_index, settings):
    if index not in by_index:
        raise StateConversionError(f"MXNet states hold parameter index {index!r} but the settings have indices "
                                   f"0..{len(settings['params']) - 1}; these states belong to another model")
    return by_index[index]


def _flatten(state):
    """The state's arrays as numpy, in MXNet's order (None for an absent momentum is dropped)."""
    if state is None:
        return []
    if isinstance(state, (tuple, list)):
        return [array for item in state for array in _flatten(item)]
    return [state.asnumpy()]


def _to_torch(mapping, mx_name, array, param):
    """``array`` in torch layout as a tensor like ``param``; StateConversionError if its shape does not fit."""
    convert = getattr(mapping, "to_torch", None)
    array = convert(mx_name, array) if convert is not None else array
    if tuple(array.shape) != tuple(param.shape):
        raise StateConversionError(f"MXNet state of {mx_name!r} has shape {tuple(array.shape)} but its torch "
                                   f"parameter has {tuple(param.shape)}; these states belong to another model")
    return torch.as_tensor(np.ascontiguousarray(array), dtype=param.dtype, device=param.device).clone()


def _torch_state(name, mx_name, arrays, count):
    """The torch state dict of one parameter: ``step`` and the named buffers."""
    names = _STATE_NAMES[name]
    if name == "rmsprop" and len(arrays) == 1:
        names = ("n",)
    if len(arrays) != len(names) and arrays:
        raise StateConversionError(f"MXNet {name!r} state of {mx_name!r} has {len(arrays)} arrays, expected "
                                   f"{len(names)} ({', '.join(names)}); check the optimizer's settings")
    return dict({"step": int(count)}, **dict(zip(names, arrays)))
