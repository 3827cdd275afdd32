"""gluon-lr: per-parameter learning rates, weight decay and freezing for MXNet Gluon that hold everywhere.

The public API: ``LrTrainer`` (a ``gluon.Trainer`` with one multiplier table), ``Rule`` (select parameters by glob,
``re:`` or layer kind), layer-wise decay (``layer_decay``, ``discriminative``, ``layer_groups``),
``GradualUnfreezing``, ``Explanation`` (``LrTrainer.explain()``), ``load_settings`` and ``export_settings`` (the
settings file that ``migrate`` reads, also from a Module or a stock Trainer) and the exceptions, each a ``ValueError``
subclass of ``LrTrainerError``.

gluon_lr needs MXNet 1.9.1 (``pip install "gluon-lr[mxnet]"``); without it ``import gluon_lr`` raises
``mxformats.MXNetRequiredError`` saying what to install. The torch side, ``migrate``, needs no MXNet.
"""
from mxformats.optional import import_mxnet

import_mxnet("gluon_lr (LrTrainer, export_settings: the MXNet side of gluon-lr)")

from .decay import DecayRule, discriminative, even_mults, layer_decay, layer_groups
from .errors import (DistributedError, DuplicateParameterError, HyperparameterError, KVStoreConfigError,
                     LrTrainerError, MaskError, MultiplierError, ParamsTypeError, PatternError, RuleMatchError,
                     ScheduleError, SettingsFileError, SettingsSourceError, StatesFileError, UnknownOptimizerError,
                     UnknownParameterError, UnsafeStatesError)
from .explain import Explanation
from mxformats.settings import load_settings
from .rules import KINDS, Rule
from .sources import export_settings
from .trainer import LrTrainer
from .unfreeze import GradualUnfreezing

__all__ = [
    "LrTrainer", "Rule", "KINDS", "Explanation", "load_settings", "export_settings",
    "DecayRule", "discriminative", "even_mults", "layer_decay", "layer_groups", "GradualUnfreezing",
    "LrTrainerError", "MultiplierError", "PatternError", "RuleMatchError", "UnknownParameterError",
    "DuplicateParameterError", "KVStoreConfigError", "ParamsTypeError", "SettingsFileError", "SettingsSourceError",
    "StatesFileError", "MaskError", "ScheduleError", "DistributedError", "HyperparameterError", "UnsafeStatesError",
    "UnknownOptimizerError",
]
