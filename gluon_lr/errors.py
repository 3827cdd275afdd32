"""The exceptions gluon_lr raises. Each names the object at fault, what was expected, what was received, and the fix.

Every class subclasses ``LrTrainerError`` and one builtin (``ValueError``, ``KeyError`` or ``TypeError``), so callers
can catch either. Add one class per kind of failure. The classes the file formats raise too (``SettingsFileError``,
``StatesFileError``, ...) live in ``mxformats.errors``, which needs no MXNet, and are re-exported here.
"""
from mxformats.errors import (HyperparameterError, LrTrainerError, MultiplierError, MXNetRequiredError,
                              ParamsTypeError, SettingsFileError, StatesFileError, UnsafeStatesError)

__all__ = ["LrTrainerError", "MultiplierError", "PatternError", "RuleMatchError", "UnknownParameterError",
           "DuplicateParameterError", "ParamsTypeError", "KVStoreConfigError", "SettingsFileError", "StatesFileError",
           "MaskError", "ScheduleError", "DistributedError", "UnsafeStatesError", "HyperparameterError",
           "SettingsSourceError", "MXNetRequiredError", "UnknownOptimizerError"]


class PatternError(LrTrainerError, ValueError):
    """A rule's selector is not a valid glob, regex or layer kind."""


class RuleMatchError(LrTrainerError, ValueError):
    """A rule selects no parameter, or selects by a layer kind that cannot be known from the given params."""


class UnknownParameterError(LrTrainerError, KeyError):
    """A parameter name is not one of the trainer's parameters."""

    def __str__(self):
        """Show the message as written (KeyError would wrap it in quotes)."""
        return str(self.args[0]) if self.args else ""


class DuplicateParameterError(LrTrainerError, ValueError):
    """Two different Parameter objects share one name."""


class KVStoreConfigError(LrTrainerError, ValueError):
    """The kvstore and update_on_kvstore arguments contradict each other."""


class MaskError(LrTrainerError, ValueError):
    """An element mask is not an array of 0/1 of the parameter's shape, or cannot apply (parameter frozen whole)."""


class ScheduleError(LrTrainerError, ValueError):
    """A gradual-unfreezing schedule got groups or an epoch it cannot use."""


class DistributedError(LrTrainerError, ValueError):
    """A distributed-kvstore operation of gluon_lr cannot be carried out as asked (states sliced over servers,
    a folder the servers cannot write, ...)."""


class SettingsSourceError(LrTrainerError, ValueError):
    """``gluon_lr.export_settings`` got a source it cannot read: not a Module/Trainer, a Module not bound or before
    ``init_optimizer``, or an optimizer ``migrate`` has no translation for."""


class UnknownOptimizerError(LrTrainerError, ValueError):
    """An optimizer name is not one MXNet registers (the nearest registered names are listed)."""
