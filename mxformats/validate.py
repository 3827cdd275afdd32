"""One validation of numbers and flags at every entry: the trainer's constructor, ``set_*``, rules, settings files.

Each check returns the value in its plain Python type or raises the caller's exception class with a message naming
the value, what was expected and what to do.
"""
import math
import numbers

from .errors import HyperparameterError, MultiplierError, ParamsTypeError

__all__ = ["check_multiplier", "check_number", "check_bool", "check_optimizer_params", "OPTIMIZER_RANGES", "MAX_MULTIPLIER",
           "MAX_NUM_UPDATE"]

#: The largest lr_mult/wd_mult accepted: beyond it one step overflows float32 weights (use a larger base rate).
MAX_MULTIPLIER = 1e6
#: The largest update count accepted (integers above 2**53 are not exact in float64 schedules).
MAX_NUM_UPDATE = 2 ** 53
_INF = math.inf
#: name -> (low, low included, high, high included): the ranges of MXNet 1.9.1's optimizer arguments.
OPTIMIZER_RANGES = {
    "learning_rate": (0, True, _INF, False), "lr": (0, True, _INF, False), "wd": (0, True, _INF, False),
    "rescale_grad": (0, False, _INF, False), "clip_gradient": (0, False, _INF, False),
    "momentum": (0, True, 1, True), "beta1": (0, True, 1, False), "beta2": (0, True, 1, False),
    "epsilon": (0, True, _INF, False), "eps": (0, True, _INF, False), "rho": (0, True, 1, True),
    "gamma1": (0, True, 1, True), "gamma2": (0, True, 1, True), "lamda1": (0, True, _INF, False),
    "beta": (0, True, _INF, False), "wd_lh": (0, True, _INF, False), "schedule_decay": (0, True, _INF, False),
    "lower_bound": (0, True, _INF, False), "upper_bound": (0, True, _INF, False), "eta": (0, True, _INF, False),
}
#: Optimizer arguments that are flags (MXNet would take any truthy value, "no" included).
_FLAGS = ("multi_precision", "centered", "lazy_update")


def _interval(low, low_in, high, high_in) -> str:
    return f"{'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"


def check_number(value, what: str, low=-_INF, low_in=True, high=_INF, high_in=True, error=HyperparameterError):
    """``value`` as a float if it is a finite real number (not a bool) in the given interval.

    Raises:
        error: naming ``what``, the value and the interval.

    Example:
        >>> check_number(0.9, "momentum", 0, True, 1, True)
        0.9
    """
    interval = _interval(low, low_in, high, high_in)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(f"{what} must be a finite number in {interval}, got {value!r:.60} of type "
                    f"{type(value).__name__}; pass a number.")
    number = float(value)
    inside = (number > low or low_in and number == low) and (number < high or high_in and number == high)
    if not math.isfinite(number) or not inside:
        raise error(f"{what} must be a finite number in {interval}, got {number!r}; pass a value in that range.")
    return number


def check_bool(value, what: str, error=ParamsTypeError) -> bool:
    """``value`` if it is True or False (not a string such as "no", not 0/1).

    Example:
        >>> check_bool(True, "replace")
        True
    """
    if not isinstance(value, bool):
        raise error(f"{what} must be True or False, got {value!r:.60} of type {type(value).__name__}; pass a bool.")
    return value


def check_optimizer_params(params, where: str, error=HyperparameterError) -> None:
    """Check an optimizer's keyword arguments: each one in ``OPTIMIZER_RANGES`` in its range (None, MXNet's default
    for several, passes), every other number finite, flags bools.

    Raises:
        error: naming the argument, its value and the accepted range.

    Example:
        >>> check_optimizer_params({"learning_rate": 0.1, "momentum": 0.9}, "optimizer_params")
    """
    for name, value in params.items():
        what = f"{where}[{name!r}]"
        if value is None:  # MXNet's default for clip_gradient, learning_rate, LAMB's bounds, ...
            continue
        if name in _FLAGS:
            check_bool(value, what, error=error)
        elif name in OPTIMIZER_RANGES:
            check_number(value, what, *OPTIMIZER_RANGES[name], error=error)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            check_number(value, what, error=error)


def check_multiplier(value, what: str) -> float:
    """Return ``value`` as a float if it is a valid multiplier (a finite real number >= 0).

    Args:
        value: The candidate multiplier.
        what: What the value is for, named in the error (e.g. ``"lr_mult of 'dense0_weight'"``).

    Returns:
        The multiplier as a Python float.

    Raises:
        MultiplierError: ``value`` is not a real number, or is negative, NaN or infinite.

    Example:
        >>> check_multiplier(1, "lr_mult of 'w'")
        1.0
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise MultiplierError(f"{what} must be a finite number >= 0, got {value!r:.60} of type "
                              f"{type(value).__name__}; pass a float such as 0.1 (0 stops updates, 1 keeps the base "
                              f"value).")
    value = float(value)
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise MultiplierError(f"{what} must be a finite number >= 0, got {value!r}; "
                              f"pass a float such as 0.1 (0 stops updates, 1 keeps the base value).")
    if value > MAX_MULTIPLIER:
        raise MultiplierError(f"{what} must be a finite number >= 0 and at most {MAX_MULTIPLIER:g}, got {value!r}: "
                              f"one step that large overflows float32 weights; raise the base learning rate or weight "
                              f"decay instead.")
    return value
