"""MXNet trainer states -> the state of the stock ``torch.optim`` optimizer from ``stock_torch_optimizer``.

Each MXNet state array goes to the torch buffer with the same meaning (Adam's mean/var -> exp_avg/exp_avg_sq,
AdaGrad's history -> sum, ...), converted where the two conventions differ (SGD keeps lr inside the momentum in
MXNet and outside in torch); what has no torch counterpart is listed, never dropped silently. Each optimizer's record
(``migrate.optim.registry``) names its stock class and converts its state (``stock_state``).
"""
from typing import NamedTuple

import torch
from torch.optim.optimizer import _get_scalar_dtype

from mxformats.settings import as_settings
from mxformats.optimizer_state import state_arrays
from migrate import arguments
from migrate.errors import SettingsError, StateConversionError
from migrate.optim.groups import base_lr
from migrate.optim.mx_states import check_state_names, load_states, mx_name_of, param_targets, state_tensor
from migrate.optim.registry import StockStateInput, record, records, registered_names
from migrate.optim.schedules import mx_schedule
from migrate.optim.state_conversion import check_order_known, check_states_optimizer, split_master


class StockStateConversion(NamedTuple):
    """What ``convert_stock_optimizer_state`` returns: parameters filled, and what did not cross exactly."""

    filled: int
    differences: list


def convert_stock_optimizer_state(mx_states, settings, mapping, optimizer, *,
                                  assume_order: bool = False) -> StockStateConversion:
    """Fill a stock torch optimizer's state (from ``stock_torch_optimizer``) from an MXNet trainer's saved states.

    What crosses, by MXNet optimizer (MXNet state -> torch state; ``step`` is the parameter's MXNet update count):
    sgd and nag momentum -> ``momentum_buffer = -momentum / lr`` (MXNet keeps lr inside the momentum; ``lr`` is
    the lr of the next step, ``schedule(num_update + 1) * lr_mult``, so the next step is MXNet's; after a later
    lr change torch's step differs, as ``stock_torch_optimizer`` lists); adam, lamb mean/var ->
    ``exp_avg``/``exp_avg_sq``; adamax mean/var ->
    ``exp_avg``/``exp_inf``; nadam mean/var -> ``exp_avg``/``exp_avg_sq`` and ``mu_product`` recomputed with
    torch's per-parameter schedule; adagrad history -> ``sum = history + eps`` (the stock Adagrad holds MXNet's
    eps in its initial accumulator); rmsprop n -> ``square_avg`` and, centered, g -> ``grad_avg`` and delta ->
    ``momentum_buffer = -delta / lr``; adadelta acc_g/acc_delta -> ``square_avg``/``acc_delta``; ftrl n -> ``sum``.
    Not crossed, and listed: the float32 master weights of float16 parameters under multi_precision, ftml's d/v/z,
    ftrl's z, signum's momentum (MXNet's holds (1-momentum)-weighted gradients; torch SGD's does not), momentum
    buffers of parameters whose next lr is 0, dcasgd's previous weights, groupadagrad's row histories, lbsgd's
    gradient sums (its momentum crosses as sgd's, off by the warmup multiplier); sgld has no state.

    Args:
        mx_states: The file written by ``LrTrainer.save_states`` or ``gluon.Trainer.save_states`` (a path), or
            its bytes.
        settings: The settings document (dict) or a path to the settings file.
        mapping: MXNet parameter name -> torch state_dict key (``to_torch`` applied when present).
        optimizer: The optimizer from ``stock_torch_optimizer`` for the same settings and mapping.
        assume_order: Convert a stock Trainer's states that name no parameters by index, assuming the settings'
            parameter order (``state_conversion.check_order_known``); False refuses them.

    Returns:
        A ``StockStateConversion`` ``(filled, differences)``: the number of parameters whose state was filled and
        the sentences naming what did not cross exactly (add them to ``stock_torch_optimizer``'s differences).

    Raises:
        InputFileError: ``mx_states`` cannot be read or unpickled.
        StateConversionError: The states belong to another optimizer or model (or were saved by a trainer built on
            another parameter order, when they say it), name no parameters and ``assume_order`` is False, or
            ``optimizer`` is not the stock optimizer ``stock_torch_optimizer`` builds for these settings.
        MappingError: ``mapping`` is not a name -> name mapping.

    Warns:
        StatesOrderWarning: with ``assume_order``, a stock Trainer's states name no parameters: matched by index
            (the settings' order).

    Examples:
        >>> opt, differences = stock_torch_optimizer(model, "settings.json", mapping)
        >>> filled, lost = convert_stock_optimizer_state("trainer.states", "settings.json", mapping, opt)
        >>> sched = torch_lr_scheduler(opt, "settings.json", num_update=settings["num_update"])
    """
    arguments.name_table(mapping, "convert_stock_optimizer_state(mapping)")
    settings = as_settings(settings, SettingsError)
    header_names, states, mx_optimizer = load_states(mx_states)
    name = settings["optimizer"]["name"]
    _check_stock(name, mx_optimizer, optimizer)
    entry = record(name)
    targets = param_targets(optimizer)
    groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    by_index = {entry["index"]: mx_name for mx_name, entry in settings["params"].items()}
    check_order_known(header_names, mx_optimizer, assume_order)
    check_state_names(header_names, by_index, mx_optimizer)
    counts = getattr(mx_optimizer, "_index_update_count", {}) if mx_optimizer is not None else {}
    num_update = max(counts.values()) if counts else int(settings["num_update"])
    schedule = mx_schedule(settings)
    next_lr = float(schedule(num_update + 1)) if schedule is not None else base_lr(settings)
    hyper = dict(settings["optimizer"]["hyperparameters"], wd=settings["optimizer"]["wd"])
    filled, differences = 0, []
    for index, state in sorted(states.items(), key=lambda item: str(item[0])):
        mx_name = mx_name_of(index, by_index, settings)
        if mx_name not in targets:
            continue
        param = targets[mx_name]
        shape = entry.state_shape(param) if entry.state_shape is not None else None
        master, state = split_master(name, state, settings, mx_name)
        if master is not None:
            differences.append("MXNet's float32 master copies of float16 weights (multi_precision) were not "
                               "carried: stock torch.optim keeps no master weights, so the torch parameters go on "
                               "from the float16 weights (use migrate.torch_optimizer to keep them)")
        arrays = [state_tensor(mapping, mx_name, a, param, shape) for a in state_arrays(state)]
        if not arrays:
            continue
        count = int(counts.get(index, settings["num_update"]))
        lr = next_lr * float(groups[id(param)].get("lr_mult", 1.0))
        torch_state, lost = _stock_state(entry, StockStateInput(mx_name, arrays, count, _step(count), lr, hyper))
        differences.extend(lost)
        if torch_state:
            optimizer.state[param] = torch_state
            filled += 1
    return StockStateConversion(filled, _unique(differences))


def _check_stock(name, mx_optimizer, optimizer):
    """StateConversionError unless states, settings and the stock torch optimizer name the same optimizer."""
    check_states_optimizer(name, mx_optimizer)
    expected = record(name).stock_class if name in registered_names() else None
    if expected is None:
        raise StateConversionError(f"MXNet optimizer {name!r} has no stock torch counterpart whose state could take "
                                   f"its states; supported: {sorted(r.name for r in records() if r.stock_class)}")
    if type(optimizer) is not expected:
        raise StateConversionError(
            f"optimizer {type(optimizer).__module__}.{type(optimizer).__qualname__} cannot take MXNet {name!r} "
            f"states as a stock optimizer; expected torch.optim.{expected.__name__} from "
            f"migrate.stock_torch_optimizer(model, settings, mapping) (for migrate's exact optimizers use "
            f"convert_optimizer_state)")


def _step(count):
    return torch.tensor(float(count), dtype=_get_scalar_dtype())


def _stock_state(entry, given):
    """(torch state dict of one parameter, differences) for the state ``given`` of the optimizer of record ``entry``.

    Raises:
        StateConversionError: the parameter's state has a count of arrays MXNet's optimizer does not keep.
    """
    layouts = entry.state_layouts
    if len(given.arrays) not in [len(names) for names in layouts]:
        raise StateConversionError(f"MXNet {entry.name!r} state of {given.mx_name!r} has {len(given.arrays)} arrays, "
                                   f"expected {' or '.join(str(len(names)) for names in layouts)}; check the "
                                   f"optimizer's settings")
    return entry.stock_state(given)


def _unique(sentences):
    return list(dict.fromkeys(sentences))
