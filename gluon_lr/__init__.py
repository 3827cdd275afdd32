"""gluon-lr: per-parameter learning rates, weight decay and freezing for MXNet Gluon that hold everywhere."""
from .errors import (DuplicateParameterError, KVStoreConfigError, LrTrainerError, MultiplierError, ParamsTypeError,
                     PatternError, RuleMatchError, SettingsFileError, StatesFileError, UnknownParameterError)
from .explain import Explanation
from .rules import KINDS, Rule
from .settings import load_settings
from .trainer import LrTrainer

__all__ = [
    "LrTrainer", "Rule", "KINDS", "Explanation", "load_settings",
    "LrTrainerError", "MultiplierError", "PatternError", "RuleMatchError", "UnknownParameterError",
    "DuplicateParameterError", "KVStoreConfigError", "ParamsTypeError", "SettingsFileError", "StatesFileError",
]
