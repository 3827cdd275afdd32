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
"""
from migrate.cli import interrupts as _interrupts

_interrupts.watch_startup()  # `python -m migrate`: Ctrl-C while the libraries below import ends in one line

from mxformats.settings import load_settings  # noqa: E402 (after the handler above)

from migrate.check import TensorCheck, TrainingReport, check_training
from migrate.generate import generate_torch
from migrate.mapping.name_mapping import name_mapping
from migrate.mapping.table import NameMapping
from migrate.mapping.verify import NodeCheck, VerifyReport, verify
from migrate.mapping.weights import convert_weights
from migrate.migration_folder import load_migration
from migrate.optim.groups import ParamGroups, param_groups
from migrate.optim.state_conversion import convert_optimizer_state
from migrate.optim.stock_state import StockStateConversion, convert_stock_optimizer_state
from migrate.optim.translate import (MXNetLRScheduler, StockTranslation, stock_torch_optimizer, torch_lr_scheduler,
                                     torch_optimizer)
from migrate.torch_control import TorchControl, control_from_mxnet
from migrate.data import RecordDataset, RecordFile, RecordHeader, convert_records

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
