"""migrate: carry gluon-lr settings, weights and optimizer state from MXNet Gluon to PyTorch."""
from migrate.groups import param_groups
from migrate.optim import MXNetLRScheduler, StockTranslation, torch_lr_scheduler, torch_optimizer
from migrate.state import convert_optimizer_state

__all__ = ["param_groups", "torch_optimizer", "torch_lr_scheduler", "MXNetLRScheduler", "StockTranslation",
           "convert_optimizer_state"]
