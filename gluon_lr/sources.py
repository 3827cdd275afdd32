"""Settings files from what MXNet users train with: ``mx.mod.Module``, a stock ``gluon.Trainer``, or an ``LrTrainer``.

``export_settings(source, path)`` writes the same file as ``LrTrainer.export_settings`` (``mxformats.settings``), holding
what MXNet really applies to each parameter:

- a Module: its optimizer's ``lr_mult``/``wd_mult`` tables, looked up the way ``Optimizer._get_lrs``/``_get_wds`` do
  (by index, then by name through ``idx2name``, default 1.0). Those tables hold the symbol's ``__lr_mult__`` and
  ``__wd_mult__`` attributes merged with the LAST ``set_lr_mult``/``set_wd_mult`` dict (each call rebuilds its table),
  and wd_mult 0 for names not ending in ``_weight``/``_gamma``. Indices are the updater's: position in
  ``param_names``; inputs and labels are not parameters and are never listed. The auxiliary states (BatchNorm's
  ``moving_mean``/``moving_var``) follow, frozen: MXNet never trains them, and a Gluon Trainer's settings list
  running statistics the same way;
- a stock ``gluon.Trainer``: each ``Parameter.lr_mult``/``wd_mult`` (what its optimizer reads through param_dict).
  The parameter names by index are also recorded on its optimizer (``mxformats.optimizer_state.PARAM_NAMES``), so
  the states files it saves from then on say which index is which: ``migrate`` refuses states saved by a trainer
  built on another parameter order instead of giving equal-shaped tensors each other's momentum.
"""
import numpy as np
from mxnet import module as _module
from mxnet.gluon.trainer import Trainer as _GluonTrainer

from mxformats.optimizer_state import record_param_names
from mxformats.settings import write_settings
from mxformats.validate import check_output_file

from . import settings as _settings
from .errors import SettingsFileError, SettingsSourceError
from .trainer import LrTrainer

__all__ = ["TRANSLATED_OPTIMIZERS", "export_settings"]

#: The optimizers ``migrate`` translates to torch (``migrate.optim.OPTIMIZERS``; a test keeps them equal).
TRANSLATED_OPTIMIZERS = ("adadelta", "adagrad", "adam", "adamax", "ccsgd", "dcasgd", "ftml", "ftrl", "groupadagrad",
                         "lamb", "lars", "lbsgd", "nadam", "nag", "rmsprop", "sgd", "sgld", "signum", "test")


def _multiplier(optimizer, table: dict, index: int) -> float:
    """A Module optimizer's multiplier for ``index`` (``_get_lrs``'s lookup: param_dict, index, then name)."""
    if index in optimizer.param_dict:
        field = "lr_mult" if table is optimizer.lr_mult else "wd_mult"
        return float(getattr(optimizer.param_dict[index], field))
    if index in table:
        return float(table[index])
    return float(table.get(optimizer.idx2name[index], 1.0)) if index in optimizer.idx2name else 1.0


def _check_optimizer(optimizer, what: str) -> None:
    """Refuse an optimizer ``migrate`` cannot translate (the file would be of no use)."""
    name = type(optimizer).__name__.lower()
    if name not in TRANSLATED_OPTIMIZERS:
        raise SettingsSourceError(f"{what} uses optimizer {name!r}, which migrate has no translation for; train with "
                                  f"one of {list(TRANSLATED_OPTIMIZERS)} to migrate its settings.")


def _module_records(module) -> list:
    """Per parameter of a bound Module with an optimizer, in the updater's index order, the settings record."""
    if not module.binded:
        raise SettingsSourceError("Module is not bound: export_settings needs its parameters and optimizer; call "
                                  "module.bind(...), init_params() and init_optimizer(...) first.")
    if not module.optimizer_initialized:
        raise SettingsSourceError("Module has no optimizer yet: call module.init_optimizer(...) (or fit) before "
                                  "export_settings.")
    if len(module._context) != 1 or module._update_on_kvstore:
        raise SettingsSourceError(f"Module runs on {len(module._context)} contexts / updates on the kvstore: "
                                  f"export_settings reads one-device Modules; bind it to one context to export.")
    optimizer, group = module._optimizer, module._exec_group
    arg_params, aux_params = module.get_params()
    records = []
    for index, name in enumerate(group.param_names):
        array = arg_params[name]
        records.append({"name": name, "shape": [int(d) for d in array.shape], "dtype": np.dtype(array.dtype).name,
                        "lr_mult": _multiplier(optimizer, optimizer.lr_mult, index),
                        "wd_mult": _multiplier(optimizer, optimizer.wd_mult, index),
                        "frozen": group.grad_req.get(name) == "null" if isinstance(group.grad_req, dict) else False,
                        "masked_elements": 0})
    for name in group.aux_names:  # carried, never trained: frozen, as a Gluon Trainer lists running statistics
        array = aux_params[name]
        records.append({"name": name, "shape": [int(d) for d in array.shape], "dtype": np.dtype(array.dtype).name,
                        "lr_mult": 1.0, "wd_mult": 1.0, "frozen": True, "masked_elements": 0})
    return records


def _trainer_records(trainer: _GluonTrainer) -> list:
    """Per parameter of a stock Trainer, in index order, the settings record."""
    records = []
    for param in trainer._params:
        shape = param.shape if param._data is None else param._data[0].shape
        records.append({"name": param.name, "shape": [int(d) for d in (shape or ())],
                        "dtype": np.dtype(param.dtype).name, "lr_mult": float(param.lr_mult),
                        "wd_mult": float(param.wd_mult), "frozen": param.grad_req == "null", "masked_elements": 0})
    return records


def export_settings(source, path) -> dict:
    """Write the settings file ``migrate`` reads for a Module, a stock ``gluon.Trainer`` or an ``LrTrainer``.

    Args:
        source: An ``mx.mod.Module`` after ``bind`` and ``init_optimizer`` (one context), a ``gluon.Trainer``, or an
            ``LrTrainer`` (then the same as ``source.export_settings(path)``).
        path: Destination JSON file (replaced atomically).

    Returns:
        The document written (format in the README, "Settings file format").

    Raises:
        SettingsSourceError: the source is of another type, a Module is unbound or has no optimizer, or the optimizer
            has no translation in ``migrate``. Nothing is written then.
        SettingsFileError: ``path`` is not a file path, its folder is missing or not writable, or the lr scheduler
            has no representation in the format.

    Examples:
        >>> mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
        >>> gluon_lr.export_settings(mod, "out/settings.json")["params"]["fc1_weight"]["lr_mult"]
        0.1

    Note:
        ``Module``'s optimizer rebuilds its table on every ``set_lr_mult(d)`` from the symbol attributes plus ``d``:
        two calls keep only the second dict. The file holds what MXNet applies, i.e. after the last call.
    """
    if isinstance(source, LrTrainer):
        return source.export_settings(path)
    path = check_output_file(path, "export_settings(path)", SettingsFileError)
    if isinstance(source, _module.Module):
        records = _module_records(source)
        optimizer, what = source._optimizer, "Module"
    elif isinstance(source, _GluonTrainer):
        records, optimizer, what = _trainer_records(source), source._optimizer, "gluon.Trainer"
    else:
        raise SettingsSourceError(f"export_settings reads an mx.mod.Module, a gluon.Trainer or an LrTrainer, got "
                                  f"{type(source).__name__}; pass the object that trains the model.")
    _check_optimizer(optimizer, what)
    devices = _settings.device_count(source) if what == "gluon.Trainer" else 1  # a Module is exported on one context
    document = _settings.settings_document(optimizer, records, optimizer.num_update, devices)
    write_settings(path, document)
    if what == "gluon.Trainer":
        _record_order(source)
    return document


def _record_order(trainer) -> None:
    """Record the parameter names by index on every optimizer a stock Trainer holds (see the module docstring)."""
    names = [param.name for param in trainer._params]
    kvstore_updater = getattr(getattr(trainer, "_kvstore", None), "_updater", None)
    for holder in [trainer, *trainer._updaters, kvstore_updater]:
        optimizer = getattr(holder, "_optimizer", None) or getattr(holder, "optimizer", None)
        if optimizer is not None:
            record_param_names(optimizer, names)
