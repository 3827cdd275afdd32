"""migrate: carry gluon-lr settings, weights and optimizer state from MXNet Gluon to PyTorch."""
from migrate.groups import param_groups
from migrate.mapping import NameMapping
from migrate.match import name_mapping
from migrate.migration import load_migration
from migrate.optim import MXNetLRScheduler, StockTranslation, torch_lr_scheduler, torch_optimizer
from migrate.state import convert_optimizer_state
from migrate.verify import NodeCheck, VerifyReport, verify
from migrate.weights import convert_weights

__all__ = [
    "MXNetLRScheduler",
    "NameMapping",
    "NodeCheck",
    "StockTranslation",
    "VerifyReport",
    "convert_optimizer_state",
    "convert_weights",
    "load_migration",
    "name_mapping",
    "param_groups",
    "torch_lr_scheduler",
    "torch_optimizer",
    "verify",
]
