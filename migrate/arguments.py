"""The checks of migrate's public functions' arguments: ``mxformats.validate`` (shared with gluon_lr) with migrate's
exception classes, so every entry point refuses a malformed argument the same way, before it reads or writes anything.

Examples:
    >>> torch_model = arguments.torch_model(model, "load_migration(torch_model)")  # doctest: +SKIP
"""
import math
import numbers

import numpy as np

from mxformats import validate

from migrate.errors import ArgumentError, InputShapeError, MappingError, ModelTypeError

__all__ = ["torch_model", "torch_optimizer", "name_table", "rescale_grad", "tolerance", "flag", "path",
           "normalize_shapes"]


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


def normalize_shapes(input_shapes, input_dtypes=None) -> tuple[list[tuple], list[np.dtype]]:
    """Return ``(shapes, dtypes)`` as lists, from one shape tuple or a list of them.

    Args:
        input_shapes: ``(1, 3, 32, 32)`` or ``[(1, 3, 32, 32), (1, 10)]``.
        input_dtypes: None (float32 for all), one dtype, or one per input.

    Returns:
        A list of shape tuples and a list of numpy dtypes of the same length.

    Raises:
        InputShapeError: a shape is empty or holds something other than positive integers (a float, a bool), the
            shapes are not a tuple or a list of tuples, or a dtype is not one numpy knows.

    Examples:
        >>> normalize_shapes((1, 3, 8, 8))
        ([(1, 3, 8, 8)], [dtype('float32')])
    """
    def is_dim(d):
        return isinstance(d, (int, np.integer)) and not isinstance(d, bool)
    fix = "pass one shape tuple of positive integers such as (1, 3, 32, 32), or a list of them"
    shapes = input_shapes
    if isinstance(shapes, (tuple, list)) and shapes and all(isinstance(d, (numbers.Number, np.number)) for d in shapes):
        shapes = [shapes]  # one shape
    if not isinstance(shapes, (tuple, list)) or not shapes or not all(isinstance(s, (tuple, list)) for s in shapes):
        raise InputShapeError(f"input_shapes: expected a tuple of positive integers or a list of them, received "
                              f"{input_shapes!r:.80}; {fix}")
    shapes = [tuple(s) for s in shapes]
    for s in shapes:
        bad = [d for d in s if not (is_dim(d) and d > 0)]
        if not s or bad:
            what = f"{bad[0]!r:.20} ({type(bad[0]).__name__}) is not one" if bad else "it is empty"
            raise InputShapeError(f"input shape {s!r:.80}: expected a tuple of positive integers, {what}; received "
                                  f"{input_shapes!r:.80}; {fix}")
    dtypes = input_dtypes if isinstance(input_dtypes, (list, tuple)) else [input_dtypes] * len(shapes)
    if len(dtypes) != len(shapes):
        raise InputShapeError(f"input_dtypes: expected {len(shapes)} dtypes (one per input shape), received "
                              f"{len(dtypes)}; give one dtype per shape or a single dtype for all")
    try:
        return shapes, [np.dtype(d if d is not None else np.float32) for d in dtypes]
    except TypeError as exc:
        raise InputShapeError(f"input_dtypes {input_dtypes!r:.80}: not numpy dtypes ({exc}); pass e.g. 'float32' "
                              f"or 'int64'") from None
