"""MXNet trainer states (``gluon.Trainer.save_states``) -> the state of migrate's exact torch optimizers."""
import numpy as np
import torch

from mxformats.settings import OPTIMIZER_ALIASES, as_settings
from mxformats.states import split_states, states_bytes, unpickle_states
from mxformats.optimizer_state import state_arrays
from migrate.errors import InputFileError, SettingsError, StateConversionError

_STATE_NAMES = {"sgd": ("momentum_buffer",), "nag": ("momentum_buffer",), "signum": ("momentum_buffer",),
                "adam": ("mean", "var"), "adamax": ("mean", "var"), "nadam": ("mean", "var"), "lamb": ("mean", "var"),
                "adagrad": ("history",), "adadelta": ("acc_g", "acc_delta"), "ftrl": ("z", "n"),
                "rmsprop": ("n", "g", "delta"), "ftml": ("d", "v", "z"),
                "lars": ("momentum_buffer",), "lbsgd": ("momentum_buffer",), "sgld": (),
                "dcasgd": ("previous_weight",), "groupadagrad": ("history",), "test": ("weight_copy",)}


def convert_optimizer_state(mx_states, settings, mapping, optimizer):
    """Fill ``optimizer``'s state from an MXNet trainer's saved states so training continues exactly.

    Copies each parameter's MXNet state arrays (momentum, mean/var, history, z/n, ...) and its update count
    (the ``step`` that Adam-like bias corrections use); for Nadam also the shared momentum schedule. Under
    ``multi_precision`` a float16 weight's float32 master copy becomes ``state["master"]`` (its buffers stay
    float32) of a half-precision torch parameter, or the values of a float32 one.

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
    settings = as_settings(settings, SettingsError)
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
        shape = (param.shape[0], 1) if name == "groupadagrad" else None  # one history per row, no layout change
        master, state = split_master(name, state, settings, mx_name)
        dtype = torch.float32 if master is not None and param.dtype in _HALF else None
        arrays = [_to_torch(mapping, mx_name, array, param, shape, dtype)
                  for array in state_arrays(state)]
        torch_state = _torch_state(name, mx_name, arrays, counts.get(index, settings["num_update"]))
        if master is not None:
            _place_master(optimizer, param, torch_state, _to_torch(mapping, mx_name, master, param,
                                                                   dtype=torch.float32), mx_name)
        optimizer.state[param] = torch_state
        filled += 1
    if name == "nadam" and mx_optimizer is not None:
        optimizer.state["m_schedule"] = float(mx_optimizer.m_schedule)
    if name == "lars" and getattr(mx_optimizer, "cur_lr", None) is not None:
        optimizer.state["lars_last_lr"] = float(mx_optimizer.cur_lr)  # its momentum correction's last lr
    if name == "lbsgd" and mx_optimizer is not None:
        _lbsgd_accumulation(mx_optimizer, by_index, targets, mapping, optimizer)
    return filled


def _load_states(mx_states):
    """(parameter names or None, states by index, pickled MXNet optimizer or None) from a path or bytes."""
    data = states_bytes(mx_states, error=InputFileError)
    names, mx_states = split_states(data, "mx_states", error=InputFileError)
    states, optimizer = unpickle_states(mx_states, "mx_states", error=InputFileError, as_data=True)
    return (None if names is None else [param["name"] for param in names]), states, optimizer


def _check_names(header_names, by_index):
    """StateConversionError unless the states file's parameter names (LrTrainer files) match the settings'."""
    if header_names is None:
        return
    wrong = [f"{i}: {name!r} in the states, {by_index.get(i)!r} in the settings"
             for i, name in enumerate(header_names) if by_index.get(i) != name]
    if wrong:
        raise StateConversionError(f"the states file names other parameters than the settings ({wrong[:5]}); these "
                                   f"states belong to another model: pass the settings exported with them")


def check_states_optimizer(name, mx_optimizer) -> None:
    """Raise StateConversionError unless the states' MXNet optimizer (None: not recorded) is the settings' ``name``
    (``ccsgd`` counts as ``sgd``)."""
    mx_name = type(mx_optimizer).__name__.lower() if mx_optimizer is not None else None
    if mx_optimizer is not None and OPTIMIZER_ALIASES.get(mx_name, mx_name) != name:
        raise StateConversionError(f"MXNet states come from optimizer {type(mx_optimizer).__name__!r} but the "
                                   f"settings name {name!r}; pass the states saved with these settings")


def _check_optimizer(name, mx_optimizer, optimizer):
    """Raise StateConversionError unless states, settings and torch optimizer all name the same optimizer."""
    check_states_optimizer(name, mx_optimizer)
    from migrate.optim.exact import OPTIMIZERS
    if name not in _STATE_NAMES or not isinstance(optimizer, OPTIMIZERS.get(name, ())):
        raise StateConversionError(f"optimizer {type(optimizer).__name__} cannot take MXNet {name!r} states; "
                                   f"build it with migrate.torch_optimizer(model, settings, mapping, exact=True), "
                                   f"or fill a stock_torch_optimizer with migrate.convert_stock_optimizer_state")


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


_MASTER_LAST = ("sgd", "nag", "lars")
"""MXNet optimizers whose multi_precision state is ``(state, weight32)``; the others' is ``(weight32, state)``."""

_HALF = (torch.float16, torch.bfloat16)


def split_master(name, state, settings, mx_name):
    """(float32 master copy or None, the rest) of one parameter's MXNet state.

    MXNet keeps a master copy where the optimizer has ``multi_precision`` and the weight is float16
    (``create_state_multi_precision``): SGD, NAG and LARS hold ``(state, weight32)``, every other optimizer
    ``(weight32, state)``.
    """
    optimizer, entry = settings["optimizer"], settings["params"].get(mx_name, {})
    mp = optimizer.get("multi_precision") or optimizer["hyperparameters"].get("multi_precision")
    if not (mp and entry.get("dtype") == "float16"):
        return None, state
    if not (isinstance(state, (tuple, list)) and len(state) == 2):
        raise StateConversionError(f"MXNet {name!r} state of float16 {mx_name!r} under multi_precision should be a "
                                   f"pair (weight32 and the optimizer's state), got {type(state).__name__}; check "
                                   f"the settings' multi_precision and dtype")
    master, rest = (state[1], state[0]) if name in _MASTER_LAST else state
    if not isinstance(master, np.ndarray) or master.dtype != np.float32:
        raise StateConversionError(f"MXNet {name!r} state of float16 {mx_name!r} under multi_precision has no "
                                   f"float32 master weight where MXNet keeps it; these states are not from it")
    return master, rest


def _place_master(optimizer, param, torch_state, master, mx_name):
    """Put MXNet's float32 master copy of ``param`` where the torch optimizer keeps it.

    A half-precision parameter in a multi_precision group takes it as ``state["master"]``; a float32 or float64
    parameter takes its values (the weights file holds them rounded to float16); a half-precision parameter in a
    group without multi_precision cannot hold it (StateConversionError).
    """
    group = next(g for g in optimizer.param_groups if any(p is param for p in g["params"]))
    if param.dtype in _HALF:
        if not group.get("multi_precision"):
            raise StateConversionError(f"MXNet's state of {mx_name!r} holds a float32 master copy "
                                       f"(multi_precision) but the torch optimizer's group of {param.dtype} "
                                       f"parameter {mx_name!r} has multi_precision=False; build it with "
                                       f"migrate.torch_optimizer from the same settings")
        torch_state["master"] = master
    else:
        with torch.no_grad():
            param.copy_(master)


def _to_torch(mapping, mx_name, array, param, shape=None, dtype=None):
    """``array`` in torch layout as a tensor like ``param`` (of ``shape``, when given, and then taken as it is; in
    ``dtype`` when given); StateConversionError if its shape does not fit."""
    convert = getattr(mapping, "to_torch", None) if shape is None else None
    array = convert(mx_name, array) if convert is not None else array
    expected = tuple(param.shape) if shape is None else tuple(shape)
    if tuple(array.shape) != expected:
        raise StateConversionError(f"MXNet state of {mx_name!r} has shape {tuple(array.shape)} but its torch "
                                   f"parameter needs {expected}; these states belong to another model")
    return torch.as_tensor(np.ascontiguousarray(array), dtype=dtype or param.dtype, device=param.device).clone()


def _torch_state(name, mx_name, arrays, count):
    """The torch state dict of one parameter: ``step`` and the named buffers."""
    names = _STATE_NAMES[name]
    if name == "rmsprop" and len(arrays) == 1:
        names = ("n",)
    if len(arrays) != len(names) and arrays:
        raise StateConversionError(f"MXNet {name!r} state of {mx_name!r} has {len(arrays)} arrays, expected "
                                   f"{len(names)} ({', '.join(names)}); check the optimizer's settings")
    return dict({"step": int(count)}, **dict(zip(names, arrays)))


def _lbsgd_accumulation(mx_optimizer, by_index, targets, mapping, optimizer):
    """LBSGD's gradient sums (``mx_optimizer.cumgrads``, kept on the optimizer) -> each torch parameter's state.

    A sum still at its first call is MXNet's live gradient array (``cum_live``: the next call reads it overwritten).
    """
    for index, entry in getattr(mx_optimizer, "cumgrads", {}).items():
        mx_name = by_index.get(index)
        if mx_name not in targets or targets[mx_name] not in optimizer.state:
            continue
        param, cum, num_cums = targets[mx_name], entry["cum_grad"], int(entry["num_cums"])
        held = isinstance(cum, np.ndarray)
        master = "master" in optimizer.state[param]  # a float32 sum, as the gradients it adds
        live = held and num_cums == mx_optimizer.init_updates + 1 and not master
        dtype = torch.float32 if master else None
        optimizer.state[param].update(
            num_cums=num_cums, cum_live=live,
            cum_grad=_to_torch(mapping, mx_name, cum, param, dtype=dtype) if held else None)
