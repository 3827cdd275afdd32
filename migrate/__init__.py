"""migrate: carry gluon-lr settings, weights and optimizer state from MXNet Gluon to PyTorch."""
from migrate.mapping import NameMapping
from migrate.match import name_mapping

__all__ = [
    "NameMapping",
    "name_mapping",
]
