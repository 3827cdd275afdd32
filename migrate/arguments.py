"""The checks of migrate's public functions' arguments: ``mxformats.validate`` (shared with gluon_lr) with migrate's
exception classes, so every entry point refuses a malformed argument the same way, before it reads or writes anything.

Examples:
    >>> torch_model = arguments.torch_model(model, "load_migration(torch_model)")  # doctest: +SKIP
"""
import math

from mxformats import validate

from migrate.errors import ArgumentError, MappingError, ModelTypeError

__all__ = ["torch_model", "torch_optimizer", "name_table", "rescale_grad", "tolerance", "flag", "path"]


def torch_model(value, what: str):
    """``value`` if it is a ``torch.nn.Module`` instance, else ``ModelTypeError`` (a class given for an instance, a
    name given for a model, ... named as such)."""
    return validate.check_torch_module(value, what, ModelTypeError)


def torch_optimizer(value, what: str):
    """``value`` if it is a ``torch.optim.Optimizer``, else ``ArgumentError``."""
    return validate.check_torch_optimizer(value, what, ArgumentError)


def name_table(value, what: str = "mapping"):
    """``value`` if it is a Mapping of MXNet name (str) -> torch key (str), else ``MappingError`` (a string is refused,
    not read as the names 'a', 'b', ...)."""
    return validate.check_mapping(value, what, MappingError,
                                  example="the NameMapping of migrate.name_mapping, or a dict MXNet name -> torch key")


def rescale_grad(value, what: str):
    """None (keep the settings' value), or ``value`` as a float when it is a finite number > 0; else ArgumentError."""
    if value is None:
        return None
    return validate.check_number(value, what, 0, False, math.inf, False, error=ArgumentError)


def tolerance(value, what: str) -> float:
    """``value`` as a float when it is a finite number >= 0; else ArgumentError."""
    return validate.check_number(value, what, 0, True, math.inf, False, error=ArgumentError)


def flag(value, what: str) -> bool:
    """``value`` if it is True or False; else ArgumentError."""
    return validate.check_bool(value, what, error=ArgumentError)


def path(value, what: str, error=ArgumentError) -> str:
    """``value`` as a str when it is a non-empty path (str or os.PathLike); else ``error``."""
    return validate.check_path(value, what, error)
