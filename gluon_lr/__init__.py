"""gluon-lr: per-parameter learning rates, weight decay and freezing for MXNet Gluon that hold everywhere."""
from .errors import (DuplicateParameterError, KVStoreConfigError, LrTrainerError, MultiplierError, ParamsTypeError, PatternError,
                     RuleMatchError, SettingsFileError, StatesFileError, UnknownParameterError)
from .rules import Rule
from .trainer import LrTrainer

__all__ = [
    "LrTrainer", "Rule",
    "LrTrainerError", "MultiplierError", "PatternError", "RuleMatchError", "UnknownParameterError",
    "DuplicateParameterError", "KVStoreConfigError", "ParamsTypeError", "SettingsFileError", "StatesFileError",
]
