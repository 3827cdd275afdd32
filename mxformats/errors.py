"""The exceptions of the file formats and of the checks both halves share. Each names the object at fault, what was
expected, what was received, and the fix.

``gluon_lr.errors`` re-exports every class here (they are gluon_lr's errors too: ``SettingsFileError`` is an
``LrTrainerError``), and ``migrate.errors`` re-exports ``MXNetRequiredError``.
"""
import sys

__all__ = ["LrTrainerError", "MultiplierError", "ParamsTypeError", "HyperparameterError", "SettingsFileError",
           "StatesFileError", "UnsafeStatesError", "MXNetFileError", "SymbolFileError", "MXNetRequiredError",
           "MXNET_INSTALL"]

#: How to install the MXNet side (the trainer, and migrate's MXNet exporter), for messages.
MXNET_INSTALL = 'pip install "gluon-lr[mxnet]"'


class LrTrainerError(Exception):
    """Base class of every error raised by gluon_lr (and by the file formats it writes)."""


class MultiplierError(LrTrainerError, ValueError):
    """A learning-rate or weight-decay multiplier is negative, NaN, infinite or not a number."""


class ParamsTypeError(LrTrainerError, TypeError):
    """``params`` (or a multiplier mapping) is not of an accepted type."""


class HyperparameterError(LrTrainerError, ValueError):
    """An optimizer argument (learning rate, weight decay, momentum, ...) is not a finite number in its range."""


class SettingsFileError(LrTrainerError, ValueError):
    """A settings file is missing, unreadable, corrupt, of another format, or of an unsupported version."""


class StatesFileError(LrTrainerError, ValueError):
    """A trainer states file is missing, corrupt, foreign, or does not fit this trainer."""


class UnsafeStatesError(StatesFileError):
    """A states file names a class that optimizer states never hold; it was refused unread (it could run code)."""


class MXNetFileError(ValueError):
    """A file MXNet wrote (NDArray bytes, a ``.params`` file) is truncated, corrupt, of another format, or holds what
    cannot be read without MXNet (a sparse array); names the file and the byte offset."""


class SymbolFileError(MXNetFileError):
    """A symbol JSON file (``NAME-symbol.json``) is not JSON, not an MXNet symbol, damaged, or of a version newer than
    MXNet 1.x; names the file and what is wrong where."""


class MXNetRequiredError(ModuleNotFoundError):
    """What was asked needs MXNet 1.9.1, which this environment does not have (names the thing and the install).

    Raised by ``import gluon_lr`` and by the parts of ``migrate`` that run MXNet (exporting a live Gluon block or an
    MXNet checkpoint); ``migrate``'s torch side never needs it.

    Examples:
        >>> raise MXNetRequiredError.for_("gluon_lr.LrTrainer")  # doctest: +SKIP
    """

    @classmethod
    def for_(cls, what: str, cause: BaseException = None) -> "MXNetRequiredError":
        """The error for ``what`` (e.g. ``"gluon_lr"``), saying why MXNet could not be imported when it is there."""
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        found = (f"importing mxnet failed ({type(cause).__name__}: {str(cause).splitlines()[0][:160]})"
                 if cause is not None and not isinstance(cause, ModuleNotFoundError) else "mxnet is not installed")
        return cls(f"{what} needs MXNet 1.9.1, and in this environment (Python {python}) {found}. Install the MXNet "
                   f"side with `{MXNET_INSTALL}` in an environment with Python <= 3.11 and numpy < 1.24 (MXNet 1.9.1 "
                   f"requires both; `bash scripts/setup.sh` builds one). The torch side (`import migrate`: "
                   f"load_migration, torch_optimizer, TorchControl, ...) needs no MXNet.", name="mxnet")
