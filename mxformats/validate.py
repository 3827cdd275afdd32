"""One validation of the arguments at every public entry of gluon_lr and migrate: numbers, flags, names, paths,
mappings and torch objects (the trainer's constructor, ``step``, ``set_*``, rules, settings files, migrate's functions).

Each check returns the value in its plain Python type or raises the caller's exception class with a message naming
the argument, what was expected, what was received and what to do. Nothing here imports MXNet or torch: a torch
module or optimizer is recognised by its class's bases.
"""
import difflib
import math
import numbers
import os
from collections.abc import Mapping

from .errors import HyperparameterError, MultiplierError, ParamsTypeError

__all__ = ["check_multiplier", "check_number", "check_bool", "check_optimizer_params", "check_name", "check_path",
           "check_output_file", "check_mapping", "check_torch_module", "check_torch_optimizer", "nearest_names",
           "OPTIMIZER_RANGES", "MAX_MULTIPLIER", "MAX_NUM_UPDATE"]

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

    Examples:
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

    Examples:
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

    Examples:
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

    Examples:
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


def nearest_names(name: str, names, count: int = 3, cutoff: float = 0.5) -> list:
    """The ``count`` names of ``names`` closest to ``name`` (difflib's ratio, at least ``cutoff``; case ignored), best
    first.

    Examples:
        >>> nearest_names("sgdd", ["sgd", "adam", "nag"])
        ['sgd']
    """
    lowered = {str(known).lower(): known for known in names}
    return [lowered[found] for found in difflib.get_close_matches(str(name).lower(), list(lowered), count, cutoff)]


def check_name(value, known, what: str, error, hint: str = "") -> str:
    """``value`` if it is a non-empty string in ``known`` (compared in lower case), else ``error`` listing the nearest
    known names.

    Args:
        value: The name given.
        known: The accepted names.
        what: The argument, as messages name it (e.g. ``"LrTrainer(optimizer=...)"``).
        error: The exception class to raise.
        hint: What to do besides picking a listed name (appended to the message).

    Examples:
        >>> check_name("SGD", ["sgd", "adam"], "optimizer", ValueError)
        'SGD'
    """
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty name, got {value!r:.60} of type {type(value).__name__}; pass one of "
                    f"{sorted(known)[:12]}{hint}.")
    if value.lower() not in {str(name).lower() for name in known}:
        near = nearest_names(value, known)
        raise error(f"{what} {value!r:.60} is not one of the {len(known)} known names; nearest: "
                    f"{near or sorted(known)[:8]}{hint}.")
    return value


def check_path(value, what: str, error) -> str:
    """``value`` as a ``str`` when it is a non-empty path (``str`` or ``os.PathLike``), else ``error``.

    Examples:
        >>> check_path(pathlib.Path("a.json"), "path", ValueError)
        'a.json'
    """
    if not isinstance(value, (str, os.PathLike)):
        raise error(f"{what}: a path is needed, got {type(value).__name__} {value!r:.60}; pass a str or os.PathLike "
                    f"such as 'out/file'.")
    path = os.fspath(value)
    if not isinstance(path, str) or not path:
        raise error(f"{what}: a non-empty path is needed, got {value!r:.60}; pass a path such as 'out/file' (an "
                    f"empty string would mean the current folder).")
    return path


def check_output_file(value, what: str, error) -> str:
    """``value`` as a ``str`` when a file can be written there: a non-empty path, not a folder (nor ending in a path
    separator), whose folder exists and is writable. Checked before any work, so a refusal changes nothing.

    Raises:
        error: naming the path, what is wrong and the fix.

    Examples:
        >>> check_output_file("out/settings.json", "export_settings(path)", ValueError)  # doctest: +SKIP
        'out/settings.json'
    """
    path = check_path(value, what, error)
    if path.endswith((os.sep, "/")) or os.path.isdir(path):
        raise error(f"{what} {path!r}: it is a folder path, a file path is needed; pass a file inside it, such as "
                    f"{os.path.join(path, 'name')!r} (the folder created first).")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        state = "is not a folder" if os.path.lexists(folder) else "does not exist"
        raise error(f"{what} {path!r}: folder {folder!r} {state}; create it (os.makedirs) or choose another path.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise error(f"{what} {path!r}: folder {folder!r} is not writable; choose a folder you can write to, or change "
                    f"its permissions.")
    return path


def check_mapping(value, what: str, error, example: str = "") -> Mapping:
    """``value`` if it is a ``Mapping`` whose keys and values are all strings (a name -> name table such as
    ``migrate.NameMapping``), else ``error`` (a string or a list of pairs is refused, not read as names).

    Examples:
        >>> check_mapping({"dense0_weight": "fc.weight"}, "mapping", ValueError)
        {'dense0_weight': 'fc.weight'}
    """
    fix = f"; pass {example}" if example else ""
    if not isinstance(value, Mapping):
        raise error(f"{what} must be a mapping of name (str) -> name (str), got {type(value).__name__} "
                    f"{value!r:.60}{fix}.")
    wrong = [(key, value[key]) for key in value if not isinstance(key, str) or not isinstance(value[key], str)]
    if wrong:
        raise error(f"{what} must map names (str) to names (str); {len(wrong)} entries do not, e.g. "
                    f"{wrong[0]!r:.80}{fix}.")
    return value


def _has_base(value, module: str, name: str) -> bool:
    return any(klass.__module__ == module and klass.__name__ == name for klass in type(value).__mro__)


def check_torch_module(value, what: str, error):
    """``value`` if it is a ``torch.nn.Module`` instance (TorchScript modules included), else ``error``; a class given
    in place of an instance is named as such.

    Examples:
        >>> check_torch_module(torch.nn.Linear(2, 2), "torch_model", TypeError)  # doctest: +SKIP
    """
    if _has_base(value, "torch.nn.modules.module", "Module"):
        return value
    if isinstance(value, type) and any(k.__module__ == "torch.nn.modules.module" and k.__name__ == "Module"
                                       for k in value.__mro__):
        raise error(f"{what} must be a torch.nn.Module instance, got the class {value.__name__}; build the model "
                    f"first: {value.__name__}(...).")
    raise error(f"{what} must be a torch.nn.Module instance, got {type(value).__name__} {value!r:.60}; build the model "
                f"first (e.g. torchvision.models.resnet18()).")


def check_torch_optimizer(value, what: str, error):
    """``value`` if it is a ``torch.optim.Optimizer`` instance, else ``error``.

    Examples:
        >>> check_torch_optimizer(torch.optim.SGD(model.parameters(), lr=0.1), "optimizer", TypeError)  # doctest: +SKIP
    """
    if not _has_base(value, "torch.optim.optimizer", "Optimizer"):
        raise error(f"{what} must be a torch.optim.Optimizer, got {type(value).__name__} {value!r:.60}; build it "
                    f"with migrate.torch_optimizer(model, settings, mapping).")
    return value
