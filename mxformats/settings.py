"""The settings file format: schema, writer (``write_settings``), reader and validator (``load_settings``).

The format is documented in docs/ ("Settings file format"); it is the contract between ``gluon_lr`` (which builds the
document from an MXNet optimizer: ``gluon_lr.settings.settings_document``) and ``migrate``, which reads it through
``as_settings``. A document is validated once, where it enters: by ``load_settings`` for a file, by ``as_settings``
for a dict a program built. Nothing here needs MXNet.
"""
import json
import os

from .atomic import write_json
from .errors import SettingsFileError
from .validate import MAX_NUM_UPDATE, check_multiplier, check_optimizer_params
from .reading import read_regular_file

__all__ = ["FORMAT", "SCHEMA_VERSION", "SCHEDULERS", "WARMUP", "DTYPES", "MAX_ELEMENTS", "SettingsDocument", "as_settings", "check_settings",
           "load_settings", "write_settings", "OPTIMIZER_ALIASES"]

FORMAT = "gluon-lr-settings"
SCHEMA_VERSION = 1
#: The lr schedulers the format holds: MXNet class name -> constructor arguments stored (beside ``base_lr``).
SCHEDULERS = {
    "FactorScheduler": ("step", "factor", "stop_factor_lr"),
    "MultiFactorScheduler": ("step", "factor"),
    "PolyScheduler": ("max_update", "pwr", "final_lr"),
    "CosineScheduler": ("max_update", "final_lr"),
}
#: The warmup arguments every scheduler record holds.
WARMUP = ("warmup_steps", "warmup_begin_lr", "warmup_mode")
#: The dtype names a parameter record may hold: the dtypes MXNet 1.9.1 arrays take (``_DTYPE_NP_TO_MX``).
DTYPES = ("float16", "float32", "float64", "bfloat16", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64",
          "uint64", "bool")
#: A parameter's element count must fit MXNet's int64 sizes.
MAX_ELEMENTS = 2 ** 63 - 1


def _is_number(value) -> bool:
    """A real number that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_shape(value) -> bool:
    """A list of ints >= 0 (not bools) whose product fits MXNet's int64 sizes."""
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
        return False
    elements = 1
    for dim in value:
        elements *= dim
    return elements <= MAX_ELEMENTS and all(d <= MAX_ELEMENTS for d in value)


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
    "shape": (_is_shape, "a list of ints >= 0 whose product fits MXNet's sizes (below 2**63)"),
    "dtype": (lambda v: v in DTYPES, f"one of MXNet's dtype names {list(DTYPES)}"),
    "lr_mult": (_is_number, "a number"),
    "wd_mult": (_is_number, "a number"),
    "frozen": (lambda v: isinstance(v, bool), "true or false"),
    "masked_elements": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
}


def _check_fields(source: str, where: str, obj, fields: dict, error) -> None:
    """Check that ``obj`` is an object holding every field of ``fields`` with a valid value."""
    if not isinstance(obj, dict):
        raise error(f"{source}: {where} must be an object, got {type(obj).__name__}; "
                    f"re-export it with LrTrainer.export_settings.")
    for field, (valid, expected) in fields.items():
        if field not in obj or not valid(obj[field]):
            got = repr(obj[field]) if field in obj else "nothing"
            raise error(f"{source}: {where}.{field} must be {expected}, got {got}; "
                        f"re-export it with LrTrainer.export_settings.")


def _unique_keys(pairs: list) -> dict:
    """A JSON object's dict; a key given twice is an error (json keeps the last one silently)."""
    document = {}
    for key, value in pairs:
        if key in document:
            raise ValueError(f"key {key!r} appears twice in one object")
        document[key] = value
    return document


def _no_constant(name: str):
    """NaN, Infinity and -Infinity are not JSON numbers (Python's json reads them by default)."""
    raise ValueError(f"{name} is not a JSON number")


def _read_json(path) -> dict:
    """Read a JSON object from ``path`` or raise SettingsFileError saying what is wrong."""
    data = read_regular_file(path, SettingsFileError, "the settings file LrTrainer.export_settings wrote")
    try:
        document = json.loads(data.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise SettingsFileError(f"Settings file {path!r} is not valid JSON ({exc}); it is corrupt or not a "
                                f"settings file: re-export it with LrTrainer.export_settings.") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        got = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise SettingsFileError(f"File {path!r} is not a gluon-lr settings file: expected format {FORMAT!r}, got "
                                f"{got!r}; pass the file written by LrTrainer.export_settings.")
    version = document.get("schema_version")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise SettingsFileError(f"Settings file {path!r} has schema_version {document.get('schema_version')!r}, "
                                f"this gluon_lr reads version {SCHEMA_VERSION}; re-export it with this version.")
    return document


def _check_scheduler(source: str, scheduler, error) -> None:
    """``lr_scheduler`` is null or a known type holding all its arguments."""
    if scheduler is None:
        return
    kind = scheduler.get("type") if isinstance(scheduler, dict) else None
    if kind not in SCHEDULERS:
        raise error(f"{source}: lr_scheduler.type must be one of {sorted(SCHEDULERS)}, got {kind!r}; "
                    f"re-export it with LrTrainer.export_settings.")
    missing = [arg for arg in ("base_lr",) + SCHEDULERS[kind] + WARMUP if arg not in scheduler]
    if missing:
        raise error(f"{source}: lr_scheduler ({kind}) lacks {missing}; re-export it.")


def _check_params(source: str, params, error) -> None:
    """Every parameter record is complete, valid, and the indices are 0..n-1."""
    if not isinstance(params, dict) or not params:
        raise error(f"{source}: params must be a non-empty object name -> record, got "
                    f"{params!r:.60}; re-export it with LrTrainer.export_settings.")
    for name, record in params.items():
        _check_fields(source, f"params[{name!r}]", record, _PARAM_FIELDS, error)
        for field in ("lr_mult", "wd_mult"):
            try:
                check_multiplier(record[field], f"params[{name!r}].{field}")
            except ValueError as exc:
                raise error(f"{source}: {exc}") from None
    indices = sorted(record["index"] for record in params.values())
    if indices != list(range(len(params))):
        raise error(f"{source}: params indices must be 0..{len(params) - 1} once each, "
                    f"got {indices[:10]}; re-export it with LrTrainer.export_settings.")


class SettingsDocument(dict):
    """A settings document that was validated where it entered (``load_settings``, ``check_settings``); ``as_settings``
    passes it on without checking it again. Edit a copy as a plain dict (``dict(document)``): that is checked anew."""


def _check_values(source: str, document: dict, error) -> None:
    """Every number of the optimizer in its range (``mxformats.validate``), and ``num_update`` bounded. The lr
    scheduler's arguments are checked where a scheduler is built (``migrate.optim.schedules.check_schedule``)."""
    optimizer = document["optimizer"]
    values = {key: optimizer[key] for key in ("learning_rate", "wd", "rescale_grad", "clip_gradient")}
    try:
        check_optimizer_params(values, "optimizer", error)
        check_optimizer_params(optimizer["hyperparameters"], "optimizer.hyperparameters", error)
    except error as exc:
        raise error(f"{source}: {exc}") from None
    if document["num_update"] > MAX_NUM_UPDATE:
        raise error(f"{source}: num_update must be at most {MAX_NUM_UPDATE}, got {document['num_update']}; "
                    f"re-export it with LrTrainer.export_settings.")


_DOCUMENT_FIELDS = {
    "optimizer": (lambda v: isinstance(v, dict), "an object"),
    "num_update": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    "params": (lambda v: isinstance(v, dict), "an object"), "lr_scheduler": (lambda v: True, "present")}
#: Fields a document may lack (files written before them): ``num_devices``, the devices whose gradients MXNet summed
#: in each step (a Trainer's contexts, times the workers of a dist kvstore); ``migrate.load_migration`` compares it
#: with the ranks of a torch job.
_OPTIONAL_FIELDS = {
    "num_devices": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1")}


OPTIMIZER_ALIASES = {"ccsgd": "sgd"}
"""Optimizer names read as another: MXNet's deprecated ``ccSGD`` is ``SGD`` (a subclass that changes nothing)."""


def check_settings(document, source: str = "settings document", error=SettingsFileError) -> dict:
    """Validate a settings document (every field of the README's "Settings file format") and return it.

    Args:
        document: The document as a dict.
        source: How messages name it (a file's path, or "settings document").
        error: The exception class to raise.

    Returns:
        The document as a ``SettingsDocument``, ``params`` in index order.

    Raises:
        error: a field is missing or invalid (the message names the field and the fix).

    Examples:
        >>> check_settings(json.load(open("settings.json")))["num_update"]
        20
    """
    if not isinstance(document, dict):
        raise error(f"{source} must be a dict or a path to a settings file, got {type(document).__name__}; pass "
                    f"the document LrTrainer.export_settings wrote.")
    _check_fields(source, "the document", document, _DOCUMENT_FIELDS, error)
    _check_fields(source, "the document", document, {k: v for k, v in _OPTIONAL_FIELDS.items() if k in document}, error)
    _check_fields(source, "optimizer", document["optimizer"], _OPTIMIZER_FIELDS, error)
    _check_values(source, document, error)
    _check_scheduler(source, document["lr_scheduler"], error)
    _check_params(source, document["params"], error)
    document = SettingsDocument(document)
    document["params"] = dict(sorted(document["params"].items(), key=lambda item: item[1]["index"]))
    name = document["optimizer"]["name"]
    document["optimizer"] = dict(document["optimizer"], name=OPTIMIZER_ALIASES.get(name, name))
    return document


def load_settings(path) -> dict:
    """Read and validate a settings file written by ``LrTrainer.export_settings``.

    Args:
        path: The settings file.

    Returns:
        The document as a dict (see the README's "Settings file format"); ``params`` is in index order.

    Raises:
        SettingsFileError: the file is missing, unreadable, not JSON, of another format or schema version, or a
            field is missing or invalid (the message names the field).

    Examples:
        >>> settings = load_settings("demo_output/settings.json")
        >>> settings["params"]["resnetv10_dense0_weight"]["lr_mult"]
        1.0
    """
    path = os.fspath(path)
    return check_settings(_read_json(path), f"Settings file {path!r}")


def as_settings(settings, error=SettingsFileError) -> dict:
    """The validated settings document: the file at a path read by ``load_settings``, a dict checked, or a
    ``SettingsDocument`` as it is (it was checked where it entered).

    Args:
        settings: A path to a settings file, or the document as a dict.
        error: The exception class raised for an invalid dict (files raise ``SettingsFileError``).

    Returns:
        The document.

    Examples:
        >>> as_settings("out/settings.json")["optimizer"]["name"]
        'sgd'
    """
    if isinstance(settings, SettingsDocument):
        return settings
    if isinstance(settings, (str, os.PathLike)):
        return load_settings(settings)
    return check_settings(settings, error=error)


def write_settings(path, document: dict) -> None:
    """Write a settings document to ``path`` atomically.

    Raises:
        SettingsFileError: the folder is missing or not writable.

    Examples:
        >>> write_settings("settings.json", settings_document(trainer.optimizer, records, 0))
    """
    write_json(path, document, error=SettingsFileError)
