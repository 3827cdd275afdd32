"""migrate: carry gluon-lr settings, weights and optimizer state from MXNet Gluon to PyTorch.

The pipeline: ``mapping`` (MXNet names -> torch names: ``name_mapping``, ``verify``, ``convert_weights``), ``optim``
(``param_groups``, ``torch_optimizer``, ``stock_torch_optimizer``, ``torch_lr_scheduler``,
``convert_optimizer_state``, ``convert_stock_optimizer_state``), ``torch_control`` (``TorchControl``, ``control_from_mxnet``: freezing, element masks,
held norm statistics and layer rates in torch after the migration), ``migration_folder`` (``load_migration``),
``generate`` (``generate_torch``: a torch module written from the MXNet graph, for models with no torch twin) and
``cli`` (the ``migrate`` command), ``check`` (``check_training``: a training step compared between MXNet and
torch tensor by tensor). ``load_settings`` reads the settings file gluon_lr wrote (``mxformats.settings``).
``data`` reads MXNet's RecordIO datasets (``RecordFile``, ``RecordDataset``, ``convert_records``; ``migrate data`` on
the command line).

Nothing here imports MXNet: the torch side runs where MXNet cannot be installed (numpy 2, Python 3.12+). MXNet's
files (symbol JSON, params, states) are read without it, and the CLI maps, verifies, generates and converts them
without it; only what reads a live Gluon block or runs the MXNet model (``check_training``, ``migrate check``) needs
it, and raises ``MXNetRequiredError`` without it.

The names below are imported when first used (``migrate.verify`` imports ``migrate.verification.verify`` then), so that
``import migrate`` costs no torch import: ``python -m migrate`` installs its Ctrl-C handling (``migrate.cli``) before
the libraries load. The library itself imports nothing of its command line.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_HOMES = {  # name -> the module that defines it
    "load_settings": "mxformats.settings",
    "TensorCheck": "migrate.check", "TrainingReport": "migrate.check", "check_training": "migrate.check",
    "generate_torch": "migrate.generate",
    "name_mapping": "migrate.mapping.name_mapping", "NameMapping": "migrate.mapping.table",
    "NodeCheck": "migrate.verification", "VerifyReport": "migrate.verification", "verify": "migrate.verification",
    "convert_weights": "migrate.mapping.weights",
    "load_migration": "migrate.migration_folder",
    "ParamGroups": "migrate.optim.groups", "param_groups": "migrate.optim.groups",
    "convert_optimizer_state": "migrate.optim.state_conversion",
    "StockStateConversion": "migrate.optim.stock_state",
    "convert_stock_optimizer_state": "migrate.optim.stock_state",
    "MXNetLRScheduler": "migrate.optim.translate", "StockTranslation": "migrate.optim.translate",
    "stock_torch_optimizer": "migrate.optim.translate", "torch_lr_scheduler": "migrate.optim.translate",
    "torch_optimizer": "migrate.optim.translate",
    "TorchControl": "migrate.torch_control", "control_from_mxnet": "migrate.torch_control",
    "RecordDataset": "migrate.data", "RecordFile": "migrate.data", "RecordHeader": "migrate.data",
    "convert_records": "migrate.data",
}

__all__ = [
    "MXNetLRScheduler",
    "NameMapping",
    "NodeCheck",
    "ParamGroups",
    "RecordDataset",
    "RecordFile",
    "RecordHeader",
    "StockStateConversion",
    "StockTranslation",
    "TensorCheck",
    "TorchControl",
    "TrainingReport",
    "VerifyReport",
    "check_training",
    "control_from_mxnet",
    "convert_optimizer_state",
    "convert_records",
    "convert_stock_optimizer_state",
    "convert_weights",
    "generate_torch",
    "load_migration",
    "load_settings",
    "name_mapping",
    "param_groups",
    "stock_torch_optimizer",
    "torch_lr_scheduler",
    "torch_optimizer",
    "verify",
]


def __getattr__(name: str):
    """A public name, imported from its module on first use; a subpackage or module of ``migrate`` likewise."""
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_HOMES))


if TYPE_CHECKING:  # the same names for type checkers and the API reference, which read imports
    from mxformats.settings import load_settings
    from migrate.check import TensorCheck, TrainingReport, check_training
    from migrate.data import RecordDataset, RecordFile, RecordHeader, convert_records
    from migrate.generate import generate_torch
    from migrate.mapping.name_mapping import name_mapping
    from migrate.mapping.table import NameMapping
    from migrate.verification import NodeCheck, VerifyReport, verify
    from migrate.mapping.weights import convert_weights
    from migrate.migration_folder import load_migration
    from migrate.optim.groups import ParamGroups, param_groups
    from migrate.optim.state_conversion import convert_optimizer_state
    from migrate.optim.stock_state import StockStateConversion, convert_stock_optimizer_state
    from migrate.optim.translate import (MXNetLRScheduler, StockTranslation, stock_torch_optimizer,
                                         torch_lr_scheduler, torch_optimizer)
    from migrate.torch_control import TorchControl, control_from_mxnet
