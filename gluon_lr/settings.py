"""The settings file: what ``LrTrainer.export_settings`` writes and ``load_settings`` reads and validates.

The format is documented in the README ("Settings file format"); it is the contract with ``migrate``.
"""
import inspect
import json
import os
import tempfile
from typing import Optional

import mxnet as mx
import numpy as np
from mxnet import lr_scheduler as _lrs
from mxnet import optimizer as _opt

from .errors import SettingsFileError
from .rules import check_multiplier

__all__ = ["FORMAT", "SCHEMA_VERSION", "load_settings", "settings_document", "write_json_atomic", "atomic_write"]

FORMAT = "gluon-lr-settings"
SCHEMA_VERSION = 1
_BASE_ARGS = frozenset(inspect.signature(_opt.Optimizer.__init__).parameters)
#: Constructor arguments that MXNet stores under another attribute name.
_ATTR_ALIASES = {"eps": "float_stable_eps", "begin_epoch": "init_updates", "pwr": "power"}
_SCHEDULERS = {
    "FactorScheduler": ("step", "factor", "stop_factor_lr"),
    "MultiFactorScheduler": ("step", "factor"),
    "PolyScheduler": ("max_update", "pwr", "final_lr"),
    "CosineScheduler": ("max_update", "final_lr"),
}
_WARMUP = ("warmup_steps", "warmup_begin_lr", "warmup_mode")


def atomic_write(path, data: bytes, error=SettingsFileError) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same folder, then ``os.replace``.

    The file gets the usual permissions (0666 minus the umask), not the temp file's 0600.

    Args:
        path: Destination file.
        data: The bytes to write.
        error: The exception class raised when the folder is missing or not writable.

    Raises:
        SettingsFileError: (or ``error``) the folder does not exist or is not writable.

    Example:
        >>> atomic_write("notes.txt", b"hello")
    """
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    except OSError as exc:
        raise error(f"Cannot write {str(path)!r}: folder {folder!r} is not writable ({exc.strerror}); create it "
                    f"or choose another path.") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json_atomic(path, document: dict) -> None:
    """Write ``document`` as indented JSON to ``path`` atomically (see ``atomic_write``).

    Args:
        path: Destination file.
        document: A JSON-serialisable dict (NaN and infinity are refused).

    Raises:
        SettingsFileError: the folder does not exist or is not writable.

    Example:
        >>> write_json_atomic("settings.json", {"format": FORMAT})
    """
    atomic_write(path, (json.dumps(document, indent=1, allow_nan=False) + "\n").encode("utf-8"))


def _hyperparameters(optimizer: _opt.Optimizer) -> dict:
    """Every constructor argument of the optimizer's class (and its bases below Optimizer), by MXNet's names."""
    found = {}
    for klass in type(optimizer).__mro__:
        if klass is _opt.Optimizer or "__init__" not in vars(klass):
            continue
        for arg in inspect.signature(klass.__init__).parameters.values():
            if arg.name in _BASE_ARGS or arg.name in found or arg.kind in (arg.VAR_KEYWORD, arg.VAR_POSITIONAL):
                continue
            attr = arg.name if hasattr(optimizer, arg.name) else _ATTR_ALIASES.get(arg.name, arg.name)
            if hasattr(optimizer, attr):
                found[arg.name] = _plain(getattr(optimizer, attr))
    return found


def _plain(value):
    """A JSON-ready copy of a hyperparameter value (numpy scalars and tuples become Python values and lists)."""
    if isinstance(value, (np.generic,)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _scheduler_base_lr(scheduler) -> float:
    """The base_lr the scheduler was built with (Factor/MultiFactor decay their ``base_lr`` in place).

    When a FactorScheduler is clamped at ``stop_factor_lr``, the value returned reproduces every learning rate from
    the current step on (not the ones before).
    """
    if isinstance(scheduler, (_lrs.PolyScheduler, _lrs.CosineScheduler)):
        return scheduler.base_lr_orig
    if isinstance(scheduler, _lrs.MultiFactorScheduler):
        return scheduler.base_lr / scheduler.factor ** scheduler.cur_step_ind
    if isinstance(scheduler, _lrs.FactorScheduler):
        return scheduler.base_lr / scheduler.factor ** (scheduler.count // scheduler.step)
    return scheduler.base_lr


def _scheduler_document(scheduler) -> Optional[dict]:
    """The scheduler as {type, base_lr, <constructor arguments>}, or None."""
    if scheduler is None:
        return None
    kind = type(scheduler).__name__
    if kind not in _SCHEDULERS:
        raise SettingsFileError(f"Cannot export lr scheduler {kind}: the settings file supports {sorted(_SCHEDULERS)}; "
                                f"use one of those (mx.lr_scheduler) or export without a scheduler.")
    document = {"type": kind, "base_lr": float(_scheduler_base_lr(scheduler))}
    for arg in _SCHEDULERS[kind] + _WARMUP:
        document[arg] = _plain(getattr(scheduler, _ATTR_ALIASES.get(arg, arg)))
    return document


def settings_document(optimizer: _opt.Optimizer, params: list, num_update: int) -> dict:
    """Build the settings document (see the README) for an optimizer and per-parameter records.

    Args:
        optimizer: The MXNet optimizer.
        params: One dict per parameter in index order, with keys name, shape, dtype, lr_mult, wd_mult, frozen,
            masked_elements.
        num_update: The optimizer's update count.

    Returns:
        The document (a JSON-serialisable dict).

    Raises:
        SettingsFileError: the lr scheduler is of a type the format does not hold.

    Example:
        >>> doc = settings_document(trainer.optimizer, records, trainer.optimizer.num_update)
    """
    scheduler = _scheduler_document(optimizer.lr_scheduler)
    learning_rate = scheduler["base_lr"] if scheduler else optimizer.lr
    return {
        "format": FORMAT, "schema_version": SCHEMA_VERSION, "mxnet_version": mx.__version__,
        "optimizer": {"name": type(optimizer).__name__.lower(), "learning_rate": float(learning_rate),
                      "wd": float(optimizer.wd), "rescale_grad": float(optimizer.rescale_grad),
                      "clip_gradient": _plain(optimizer.clip_gradient),
                      "multi_precision": bool(optimizer.multi_precision),
                      "hyperparameters": _hyperparameters(optimizer)},
        "lr_scheduler": scheduler,
        "num_update": int(optimizer.num_update),
        "params": {record["name"]: dict({"index": i}, **{k: v for k, v in record.items() if k != "name"})
                   for i, record in enumerate(params)},
    }


def _is_number(value) -> bool:
    """A real number that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_OPTIMIZER_FIELDS = {
    "name": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "learning_rate": (_is_number, "a number"),
    "wd": (_is_number, "a number"),
    "rescale_grad": (_is_number, "a number"),
    "clip_gradient": (lambda v: v is None or _is_number(v), "null or a number"),
    "multi_precision": (lambda v: isinstance(v, bool), "true or false"),
    "hyperparameters": (lambda v: isinstance(v, dict), "an object"),
}
_PARAM_FIELDS = {
    "index": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    "shape": (lambda v: isinstance(v, list) and all(isinstance(d, int) and d >= 0 for d in v), "a list of ints"),
    "dtype": (lambda v: isinstance(v, str) and v != "", "a dtype name such as 'float32'"),
    "lr_mult": (_is_number, "a number"),
    "wd_mult": (_is_number, "a number"),
    "frozen": (lambda v: isinstance(v, bool), "true or false"),
    "masked_elements": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
}


def _check_fields(path, where: str, obj, fields: dict) -> None:
    """Check that ``obj`` is an object holding every field of ``fields`` with a valid value."""
    if not isinstance(obj, dict):
        raise SettingsFileError(f"Settings file {path!r}: {where} must be an object, got {type(obj).__name__}; "
                                f"re-export it with LrTrainer.export_settings.")
    for field, (valid, expected) in fields.items():
        if field not in obj or not valid(obj[field]):
            got = repr(obj[field]) if field in obj else "nothing"
            raise SettingsFileError(f"Settings file {path!r}: {where}.{field} must be {expected}, got {got}; "
                                    f"re-export it with LrTrainer.export_settings.")


def _read_json(path) -> dict:
    """Read a JSON object from ``path`` or raise SettingsFileError saying what is wrong."""
    try:
        with open(path, encoding="utf-8") as source:
            document = json.load(source)
    except OSError as exc:
        raise SettingsFileError(f"Cannot read settings file {path!r}: {exc.strerror}; pass the path written by "
                                f"LrTrainer.export_settings.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SettingsFileError(f"Settings file {path!r} is not valid JSON ({exc}); it is corrupt or not a "
                                f"settings file: re-export it with LrTrainer.export_settings.") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        got = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise SettingsFileError(f"File {path!r} is not a gluon-lr settings file: expected format {FORMAT!r}, got "
                                f"{got!r}; pass the file written by LrTrainer.export_settings.")
    if document.get("schema_version") != SCHEMA_VERSION:
        raise SettingsFileError(f"Settings file {path!r} has schema_version {document.get('schema_version')!r}, "
                                f"this gluon_lr reads version {SCHEMA_VERSION}; re-export it with this version.")
    return document


def _check_scheduler(path, scheduler) -> None:
    """``lr_scheduler`` is null or a known type holding all its arguments."""
    if scheduler is None:
        return
    kind = scheduler.get("type") if isinstance(scheduler, dict) else None
    if kind not in _SCHEDULERS:
        raise SettingsFileError(f"Settings file {path!r}: lr_scheduler.type must be one of {sorted(_SCHEDULERS)}, "
                                f"got {kind!r}; re-export it with LrTrainer.export_settings.")
    missing = [arg for arg in ("base_lr",) + _SCHEDULERS[kind] + _WARMUP if arg not in scheduler]
    if missing:
        raise SettingsFileError(f"Settings file {path!r}: lr_scheduler ({kind}) lacks {missing}; re-export it.")


def _check_params(path, params) -> None:
    """Every parameter record is complete, valid, and the indices are 0..n-1."""
    if not isinstance(params, dict) or not params:
        raise SettingsFileError(f"Settings file {path!r}: params must be a non-empty object name -> record, got "
                                f"{params!r:.60}; re-export it with LrTrainer.export_settings.")
    for name, record in params.items():
        _check_fields(path, f"params[{name!r}]", record, _PARAM_FIELDS)
        for field in ("lr_mult", "wd_mult"):
            try:
                check_multiplier(record[field], f"params[{name!r}].{field}")
            except ValueError as exc:
                raise SettingsFileError(f"Settings file {path!r}: {exc}") from None
    indices = sorted(record["index"] for record in params.values())
    if indices != list(range(len(params))):
        raise SettingsFileError(f"Settings file {path!r}: params indices must be 0..{len(params) - 1} once each, "
                                f"got {indices[:10]}; re-export it with LrTrainer.export_settings.")


def load_settings(path) -> dict:
    """Read and validate a settings file written by ``LrTrainer.export_settings``.

    Args:
        path: The settings file.

    Returns:
        The document as a dict (see the README's "Settings file format"); ``params`` is in index order.

    Raises:
        SettingsFileError: the file is missing, unreadable, not JSON, of another format or schema version, or a
            field is missing or invalid (the message names the field).

    Example:
        >>> settings = load_settings("demo_output/settings.json")
        >>> settings["params"]["resnetv10_dense0_weight"]["lr_mult"]
        1.0
    """
    path = os.fspath(path)
    document = _read_json(path)
    _check_fields(path, "the document", document, {
        "optimizer": (lambda v: isinstance(v, dict), "an object"),
        "num_update": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
        "params": (lambda v: isinstance(v, dict), "an object"), "lr_scheduler": (lambda v: True, "present")})
    _check_fields(path, "optimizer", document["optimizer"], _OPTIMIZER_FIELDS)
    _check_scheduler(path, document["lr_scheduler"])
    _check_params(path, document["params"])
    document["params"] = dict(sorted(document["params"].items(), key=lambda item: item[1]["index"]))
    return document
