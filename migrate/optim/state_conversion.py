"""MXNet trainer states (``gluon.Trainer.save_states``) -> the state of migrate's exact torch optimizers.

What each optimizer's state holds comes from its record (``migrate.optim.registry``): state names, the order of a
``multi_precision`` state, state shapes, and the optimizer-wide state MXNet pickles with the optimizer.
"""
import numpy as np
import torch

from mxformats.settings import OPTIMIZER_ALIASES, as_settings
from mxformats.optimizer_state import recorded_param_names, state_arrays
from migrate import arguments
from migrate.errors import SettingsError, StateConversionError
from migrate.optim.base import HALF_DTYPES
from migrate.optim.mx_states import (StateTargets, check_state_names, load_states, mx_name_of, param_targets,
                                     state_tensor)
from migrate.optim.registry import record, registered_names


def convert_optimizer_state(mx_states, settings, mapping, optimizer, *, assume_order: bool = False) -> int:
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
        assume_order: Convert a stock Trainer's states that name no parameters by index, assuming the settings'
            parameter order (``check_order_known``); False refuses them.

    Returns:
        The number of parameters whose state was filled.

    Raises:
        InputFileError: ``mx_states`` cannot be read or unpickled.
        StateConversionError: The states belong to another optimizer or model (unknown index, wrong shape or
            count of arrays), were saved by a trainer built on another parameter order (when they say it), name no
            parameters (a stock Trainer's file saved before ``gluon_lr.export_settings``) and ``assume_order`` is
            False, or ``optimizer`` was not built by ``torch_optimizer`` from these settings.
        MappingError: ``mapping`` is not a name -> name mapping.

    Warns:
        StatesOrderWarning: with ``assume_order``, a stock Trainer's states name no parameters: matched by index
            (the settings' order).

    Examples:
        >>> opt = torch_optimizer(model, "settings.json", mapping)
        >>> convert_optimizer_state("trainer.states", "settings.json", mapping, opt)
        >>> sched = torch_lr_scheduler(opt, "settings.json")  # resumes at MXNet's num_update

    Note:
        MXNet's ``save_states`` does not store lr_mult or wd_mult; they come from the settings.
    """
    arguments.name_table(mapping, "convert_optimizer_state(mapping)")
    settings = as_settings(settings, SettingsError)
    header_names, states, mx_optimizer = load_states(mx_states)
    name = settings["optimizer"]["name"]
    _check_optimizer(name, mx_optimizer, optimizer)
    entry = record(name)
    targets = StateTargets({e["index"]: mx_name for mx_name, e in settings["params"].items()},
                           param_targets(optimizer), mapping)
    check_order_known(header_names, mx_optimizer, assume_order)
    check_state_names(header_names, targets.by_index, mx_optimizer)
    counts = getattr(mx_optimizer, "_index_update_count", {}) if mx_optimizer is not None else {}
    filled = 0
    for index, state in sorted(states.items(), key=lambda item: str(item[0])):
        mx_name = mx_name_of(index, targets.by_index, settings)
        if mx_name not in targets.params:
            continue
        param = targets.params[mx_name]
        shape = entry.state_shape(param) if entry.state_shape is not None else None
        master, state = split_master(name, state, settings, mx_name)
        dtype = torch.float32 if master is not None and param.dtype in HALF_DTYPES else None
        arrays = [state_tensor(mapping, mx_name, array, param, shape, dtype)
                  for array in state_arrays(state)]
        torch_state = torch_state_of(name, mx_name, arrays, counts.get(index, settings["num_update"]))
        if master is not None:
            _place_master(optimizer, param, torch_state, state_tensor(mapping, mx_name, master, param,
                                                                      dtype=torch.float32), mx_name)
        optimizer.state[param] = torch_state
        filled += 1
    if entry.extra_state is not None and mx_optimizer is not None:
        entry.extra_state(mx_optimizer, optimizer, targets)
    return filled


def check_order_known(header_names, mx_optimizer, assume_order: bool) -> None:
    """StateConversionError for a stock Trainer's states that name no parameters, unless ``assume_order``.

    MXNet's states are keyed by index alone. LrTrainer's file names every parameter, and so does a stock Trainer's
    saved after ``gluon_lr.export_settings(trainer)`` (which records the order on its optimizer); a Module's file
    holds no optimizer and its order is the symbol's, as the settings'. A stock Trainer's file saved before has no
    order to check: a trainer built on another parameter order than the settings' would give equal-shaped
    parameters each other's state, silently.

    Examples:
        >>> check_order_known(None, mx_optimizer, assume_order=True)  # doctest: +SKIP
    """
    if assume_order or header_names is not None or mx_optimizer is None:
        return
    if recorded_param_names(mx_optimizer) is not None:
        return
    raise StateConversionError("the MXNet states name no parameters (a stock gluon.Trainer's file saved before "
                               "gluon_lr.export_settings(trainer) recorded its order), so which state is whose "
                               "cannot be checked: a trainer built on another parameter order than the settings' "
                               "would give equal-shaped parameters each other's state. Call "
                               "gluon_lr.export_settings(trainer, path) before trainer.save_states(...) and convert "
                               "those files (the order is then checked), or pass assume_order=True "
                               "(--assume-states-order) to match by index in the settings' order")


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
    if name not in registered_names() or not isinstance(optimizer, record(name).exact_class):
        raise StateConversionError(f"optimizer {type(optimizer).__name__} cannot take MXNet {name!r} states; "
                                   f"build it with migrate.torch_optimizer(model, settings, mapping, exact=True), "
                                   f"or fill a stock_torch_optimizer with migrate.convert_stock_optimizer_state")


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
    master, rest = (state[1], state[0]) if record(name).master_last else state
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
    if param.dtype in HALF_DTYPES:
        if not group.get("multi_precision"):
            raise StateConversionError(f"MXNet's state of {mx_name!r} holds a float32 master copy "
                                       f"(multi_precision) but the torch optimizer's group of {param.dtype} "
                                       f"parameter {mx_name!r} has multi_precision=False; build it with "
                                       f"migrate.torch_optimizer from the same settings")
        torch_state["master"] = master
    else:
        with torch.no_grad():
            param.copy_(master)


def torch_state_of(name, mx_name, arrays, count):
    """The torch state dict of one parameter of MXNet optimizer ``name``: ``step`` and the buffers named as migrate's
    exact optimizer names them, from MXNet's state ``arrays`` (depth first: ``state_arrays``).

    Examples:
        >>> torch_state_of("adam", "fc_weight", [mean, var], 3)  # doctest: +SKIP
        {'step': 3, 'mean': mean, 'var': var}
    """
    entry = record(name)
    names = next((layout for layout in entry.state_layouts if len(layout) == len(arrays)), entry.state_names)
    if len(arrays) != len(names) and arrays:
        raise StateConversionError(f"MXNet {name!r} state of {mx_name!r} has {len(arrays)} arrays, expected "
                                   f"{len(names)} ({', '.join(names)}); check the optimizer's settings")
    return dict({"step": int(count)}, **dict(zip(names, arrays)))

