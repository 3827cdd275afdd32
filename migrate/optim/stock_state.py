"""MXNet trainer states -> the state of the stock ``torch.optim`` optimizer from ``stock_torch_optimizer``.

Each MXNet state array goes to the torch buffer with the same meaning (Adam's mean/var -> exp_avg/exp_avg_sq,
AdaGrad's history -> sum, ...), converted where the two conventions differ (SGD keeps lr inside the momentum in
MXNet and outside in torch); what has no torch counterpart is listed, never dropped silently.
"""
from typing import NamedTuple

import torch
from torch.optim.optimizer import _get_scalar_dtype

from mxformats.settings import as_settings
from mxformats.optimizer_state import state_arrays
from migrate.errors import SettingsError, StateConversionError
from migrate.optim import state_conversion as _sc
from migrate.optim.state_conversion import check_states_optimizer
from migrate.optim.groups import base_lr
from migrate.optim.schedules import mx_schedule

# MXNet optimizer -> the stock torch.optim class stock_torch_optimizer builds for it.
_STOCK_CLASSES = {"sgd": torch.optim.SGD, "nag": torch.optim.SGD, "signum": torch.optim.SGD,
                  "adam": torch.optim.Adam, "adamax": torch.optim.Adamax, "nadam": torch.optim.NAdam,
                  "lamb": torch.optim.AdamW, "adagrad": torch.optim.Adagrad, "adadelta": torch.optim.Adadelta,
                  "rmsprop": torch.optim.RMSprop, "ftrl": torch.optim.Adagrad,
                  "ftml": torch.optim.Adam, "lars": torch.optim.SGD, "lbsgd": torch.optim.SGD,
                  "sgld": torch.optim.SGD, "dcasgd": torch.optim.SGD, "groupadagrad": torch.optim.Adagrad}


class StockStateConversion(NamedTuple):
    """What ``convert_stock_optimizer_state`` returns: parameters filled, and what did not cross exactly."""

    filled: int
    differences: list


def convert_stock_optimizer_state(mx_states, settings, mapping, optimizer) -> StockStateConversion:
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

    Returns:
        A ``StockStateConversion`` ``(filled, differences)``: the number of parameters whose state was filled and
        the sentences naming what did not cross exactly (add them to ``stock_torch_optimizer``'s differences).

    Raises:
        InputFileError: ``mx_states`` cannot be read or unpickled.
        StateConversionError: The states belong to another optimizer or model, or ``optimizer`` is not the stock
            optimizer ``stock_torch_optimizer`` builds for these settings.

    Example:
        >>> opt, differences = stock_torch_optimizer(model, "settings.json", mapping)
        >>> filled, lost = convert_stock_optimizer_state("trainer.states", "settings.json", mapping, opt)
        >>> sched = torch_lr_scheduler(opt, "settings.json", num_update=settings["num_update"])
    """
    settings = as_settings(settings, SettingsError)
    header_names, states, mx_optimizer = _sc._load_states(mx_states)
    name = settings["optimizer"]["name"]
    _check_stock(name, mx_optimizer, optimizer)
    targets = _sc._targets(optimizer)
    groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    by_index = {entry["index"]: mx_name for mx_name, entry in settings["params"].items()}
    _sc._check_names(header_names, by_index)
    counts = getattr(mx_optimizer, "_index_update_count", {}) if mx_optimizer is not None else {}
    num_update = max(counts.values()) if counts else int(settings["num_update"])
    schedule = mx_schedule(settings)
    next_lr = float(schedule(num_update + 1)) if schedule is not None else base_lr(settings)
    hyper = dict(settings["optimizer"]["hyperparameters"], wd=settings["optimizer"]["wd"])
    filled, differences = 0, []
    for index, state in sorted(states.items(), key=lambda item: str(item[0])):
        mx_name = _sc._name_of(index, by_index, settings)
        if mx_name not in targets:
            continue
        param = targets[mx_name]
        shape = (param.shape[0], 1) if name == "groupadagrad" else None  # one history per row
        master, state = _sc.split_master(name, state, settings, mx_name)
        if master is not None:
            differences.append("MXNet's float32 master copies of float16 weights (multi_precision) were not "
                               "carried: stock torch.optim keeps no master weights, so the torch parameters go on "
                               "from the float16 weights (use migrate.torch_optimizer to keep them)")
        arrays = [_sc._to_torch(mapping, mx_name, a, param, shape) for a in state_arrays(state)]
        if not arrays:
            continue
        count = int(counts.get(index, settings["num_update"]))
        lr = next_lr * float(groups[id(param)].get("lr_mult", 1.0))
        torch_state, lost = _stock_state(name, mx_name, arrays, count, lr, hyper)
        differences.extend(lost)
        if torch_state:
            optimizer.state[param] = torch_state
            filled += 1
    if name == "nadam" and filled:
        differences.append("MXNet's Nadam momentum schedule (m_schedule, shared by all parameters) is not carried: "
                           "each torch parameter's mu_product is recomputed from its own update count")
    return StockStateConversion(filled, _unique(differences))


def _check_stock(name, mx_optimizer, optimizer):
    """StateConversionError unless states, settings and the stock torch optimizer name the same optimizer."""
    check_states_optimizer(name, mx_optimizer)
    expected = _STOCK_CLASSES.get(name)
    if expected is None:
        raise StateConversionError(f"MXNet optimizer {name!r} has no stock torch counterpart whose state could take "
                                   f"its states; supported: {sorted(_STOCK_CLASSES)}")
    if type(optimizer) is not expected:
        raise StateConversionError(
            f"optimizer {type(optimizer).__module__}.{type(optimizer).__qualname__} cannot take MXNet {name!r} "
            f"states as a stock optimizer; expected torch.optim.{expected.__name__} from "
            f"migrate.stock_torch_optimizer(model, settings, mapping) (for migrate's exact optimizers use "
            f"convert_optimizer_state)")


def _step(count):
    return torch.tensor(float(count), dtype=_get_scalar_dtype())


def _stock_state(name, mx_name, arrays, count, lr, hyper):
    """(torch state dict of one parameter, differences) for MXNet ``name``'s state ``arrays``."""
    expected = {"rmsprop": (1, 3)}.get(name, (len(_sc._STATE_NAMES[name]),))
    if len(arrays) not in expected:
        raise StateConversionError(f"MXNet {name!r} state of {mx_name!r} has {len(arrays)} arrays, expected "
                                   f"{' or '.join(map(str, expected))}; check the optimizer's settings")
    step = _step(count)
    if name == "lars":
        converted, lost = _stock_state("sgd", mx_name, arrays, count, lr, hyper)
        return converted, lost + ["MXNet's LARS momentum holds lr scaled by each step's trust ratio; it was converted "
                                  "with the unscaled lr (lr * lr_mult), so weights' buffers are off by that ratio"]
    if name in _RARE_LOST:
        return {}, [_RARE_LOST[name]]
    if name == "lbsgd":
        converted, lost = _stock_state("sgd", mx_name, arrays, count, lr, hyper)
        return converted, lost + ["MXNet's LBSGD momentum holds lr scaled by its warmup (or LARS) multiplier; it was "
                                  "converted with the unscaled lr (lr * lr_mult); its partial gradient sums (over "
                                  "batch_scale calls) were not carried"]
    if name in ("sgd", "nag"):
        if lr == 0.0:
            return {}, [f"{mx_name}: MXNet's {name.upper()} momentum was not converted (its next lr is 0, and "
                        f"torch's buffer is MXNet's divided by -lr); torch restarts it from the next gradient"]
        lost = []
        if name == "nag" and float(hyper.get("wd", 0.0)):
            lost.append("MXNet's NAG adds wd times the already-updated weight to its momentum; torch adds wd "
                        "times the weight before the step")
        return {"momentum_buffer": arrays[0] / -lr}, lost
    if name == "signum":
        return {}, ["MXNet's Signum momentum (a (1-momentum)-weighted average of gradients, stepped along by its "
                    "sign) was not converted: torch SGD's buffer has another meaning; it restarts from zero"]
    if name in ("adam", "lamb"):
        return {"step": step, "exp_avg": arrays[0], "exp_avg_sq": arrays[1]}, []
    if name == "adamax":
        return {"step": step, "exp_avg": arrays[0], "exp_inf": arrays[1]}, []
    if name == "nadam":
        beta1, decay = float(hyper.get("beta1", 0.9)), float(hyper.get("schedule_decay", 0.004))
        mu_product = 1.0
        for t in range(1, count + 1):
            mu_product *= beta1 * (1.0 - 0.5 * 0.96 ** (t * decay))
        return {"step": step, "exp_avg": arrays[0], "exp_avg_sq": arrays[1],
                "mu_product": torch.tensor(mu_product, dtype=_get_scalar_dtype())}, []
    if name == "ftml":
        return {}, ["MXNet's FTML state (d, v, z) was not converted: the stock Adam keeps other quantities; it "
                    "restarts from zero"]
    if name == "adagrad":
        return {"step": step, "sum": arrays[0] + float(hyper.get("eps", 1e-7))}, []
    if name == "adadelta":
        return {"step": step, "square_avg": arrays[0], "acc_delta": arrays[1]}, []
    if name == "ftrl":
        return {"step": step, "sum": arrays[1]}, ["MXNet's FTRL z (the accumulated proximal gradient) was not "
                                                  "converted: torch Adagrad has no counterpart"]
    if len(arrays) == 1:  # rmsprop, plain
        return {"step": step, "square_avg": arrays[0]}, []
    if lr == 0.0:
        return {"step": step, "square_avg": arrays[0], "grad_avg": arrays[1]}, [
            f"{mx_name}: MXNet's centered RMSProp delta was not converted (its next lr is 0, and torch's momentum "
            f"buffer is MXNet's delta divided by -lr); torch restarts it from zero"]
    return {"step": step, "square_avg": arrays[0], "grad_avg": arrays[1], "momentum_buffer": arrays[2] / -lr}, []


_RARE_LOST = {
    "dcasgd": "MXNet's DCASGD previous weights (its delay compensation's w_previous) were not converted: torch SGD "
              "has no counterpart",
    "groupadagrad": "MXNet's GroupAdaGrad row histories were not converted: torch Adagrad's per-element sum has "
                    "another meaning; it restarts from its initial accumulator (eps)",
}
"""What does not cross to a stock optimizer, for MXNet optimizers whose state has no stock counterpart."""


def _unique(sentences):
    return list(dict.fromkeys(sentences))
