"""migrate: carry gluon-lr settings, weights and optimizer state from MXNet Gluon to PyTorch."""
from migrate.mapping import NameMapping
from migrate.match import name_mapping
from migrate.verify import NodeCheck, VerifyReport, verify
from migrate.weights import convert_weights

__all__ = [
    "NameMapping",
    "NodeCheck",
    "VerifyReport",
    "convert_weights",
    "name_mapping",
    "verify",
]
