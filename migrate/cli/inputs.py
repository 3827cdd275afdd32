"""Loading and checking the inputs of the ``migrate`` command; each error names the flag, the file and what to do."""
from __future__ import annotations

import importlib
import json
import os

from migrate.errors import CliUsageError, InputFileError, MappingError, OutputExistsError
from migrate.mapping.table import NameMapping

_MATCH_FLAGS = ("--symbol", "--params", "--input-shape")


def input_shapes(texts) -> tuple[list, list]:
    """(shapes, dtypes) from ``--input-shape`` values such as ``1,3,32,32`` or ``2,5:int64``."""
    shapes, dtypes = [], []
    for text in texts or ():
        spec, _, dtype = text.partition(":")
        try:
            shapes.append(tuple(int(d) for d in spec.split(",")))
        except ValueError:
            raise CliUsageError(f"--input-shape {text!r}: expected comma-separated integers such as 1,3,32,32 "
                                f"(optionally ':int64'); received {text!r}") from None
        if dtype not in ("", "float32", "int64", "int32"):
            raise CliUsageError(f"--input-shape {text!r}: dtype {dtype!r} is not one of float32, int64, int32; "
                                f"write e.g. 2,5:int64")
        dtypes.append(dtype or "float32")
    return shapes, dtypes


def existing_file(flag: str, path: str, what: str) -> str:
    """``path`` if it is a file, else InputFileError naming the flag and what the file should be."""
    if not os.path.isfile(path):
        raise InputFileError(f"{flag} {path!r}: file not found; give {what}")
    return path


def mx_files(args) -> tuple[str, str]:
    """The MXNet ``(symbol, params)`` files of ``--symbol``/``--params``, checked to exist."""
    return (existing_file("--symbol", args.symbol, "the NAME-symbol.json HybridBlock.export wrote"),
            existing_file("--params", args.params, "the NAME-0000.params HybridBlock.export wrote"))


def torch_model(spec: str, kwargs_text: str):
    """The torch model of ``--torch``: a TorchScript file, or ``package.module:callable`` called with ``--kwargs``."""
    import torch
    if os.path.isfile(spec):
        try:
            return torch.jit.load(spec, map_location="cpu")
        except Exception as exc:  # torch.jit.load raises RuntimeError/ValueError/zip errors on foreign files
            raise InputFileError(f"--torch {spec!r}: not a TorchScript file ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0][:150]}); save one with torch.jit.save, or give "
                                 f"package.module:callable") from None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliUsageError(f"--torch {spec!r}: expected package.module:callable (e.g. torchvision.models:resnet18) "
                            f"or an existing TorchScript file")
    kwargs = _kwargs(kwargs_text)
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise CliUsageError(f"--torch {spec!r}: cannot import it ({exc}); check the module is on PYTHONPATH and "
                            f"the callable exists") from None
    try:
        model = factory(**kwargs)
    except Exception as exc:  # the user's factory may raise anything on bad arguments
        raise CliUsageError(f"--torch {spec!r} with --kwargs {kwargs}: the factory raised "
                            f"{type(exc).__name__}: {exc}; check the arguments") from None
    if not isinstance(model, torch.nn.Module):
        raise CliUsageError(f"--torch {spec!r}: the factory returned a {type(model).__name__}, expected a "
                            f"torch.nn.Module; name a callable that builds the model")
    return model


def _kwargs(text: str) -> dict:
    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliUsageError(f"--kwargs {text!r}: expected a JSON object, could not parse it ({exc}); write e.g. "
                            f"'{{\"num_classes\": 10}}'") from None
    if not isinstance(kwargs, dict):
        raise CliUsageError(f"--kwargs {text!r}: expected a JSON object, received {type(kwargs).__name__}; write "
                            f"e.g. '{{\"num_classes\": 10}}'")
    return kwargs


def settings(path: str) -> dict:
    """The validated settings document of ``--settings`` (``LrTrainer.export_settings``)."""
    from gluon_lr import SettingsFileError, load_settings
    existing_file("--settings", path, "the JSON file LrTrainer.export_settings wrote")
    try:
        return load_settings(path)
    except SettingsFileError as exc:
        raise InputFileError(f"--settings {path!r}: {exc}") from None


def output_paths(paths, inputs, force: bool) -> None:
    """Refuse to write over an input (always) or over an existing file (unless ``--force``)."""
    given = {os.path.realpath(p): flag for flag, p in inputs.items() if p and os.path.exists(p)}
    for path in paths:
        real = os.path.realpath(path)
        if real in given:
            raise CliUsageError(f"--out: {path!r} is the input of {given[real]}; inputs are never overwritten, "
                                f"choose another output path")
        if os.path.exists(path) and not force:
            raise OutputExistsError(f"--out: {path!r} exists; pass --force to replace it, or choose another "
                                    f"output path")
        if os.path.isdir(path):
            raise CliUsageError(f"--out: {path!r} is a folder; give a file path")


def mapping_needs(args) -> None:
    """Without ``--mapping``, matching needs ``--symbol``, ``--params`` and ``--input-shape``."""
    if getattr(args, "mapping", None):
        return
    missing = [flag for flag in _MATCH_FLAGS if not getattr(args, flag.strip("-").replace("-", "_"), None)]
    if missing:
        raise CliUsageError(f"migrate {args.command}: no --mapping given and {', '.join(missing)} missing; give "
                            f"--mapping FILE (from `migrate map`) or all of {', '.join(_MATCH_FLAGS)} to match the "
                            f"models")


def loaded_mapping(path: str, model, document=None):
    """The ``NameMapping`` of ``--mapping``, checked to fit the torch model (and the settings, when given)."""
    existing_file("--mapping", path, "the mapping file `migrate map` wrote")
    try:
        mapping = NameMapping.load(path)
    except (MappingError, InputFileError) as exc:
        raise InputFileError(f"--mapping {path!r}: {exc}") from None
    wrong = _misfits(mapping, model.state_dict())
    foreign = [k for k in mapping if document is not None and k not in document["params"]]
    if wrong or foreign:
        raise InputFileError(f"--mapping {path!r}: made for another model: torch keys that do not fit "
                             f"{type(model).__name__} (model vs mapping): {wrong[:5]}; MXNet names not in "
                             f"--settings: {foreign[:5]}; run `migrate map` on these models")
    return mapping


def _misfits(mapping, target) -> list:
    """Mapped torch keys the model lacks or holds in another shape (a folded bias targets a running mean)."""
    wrong = []
    for name in mapping:
        key, entry = mapping[name], mapping.entry(name)
        if key not in target:
            wrong.append(f"{key} (absent)")
        elif not entry.get("fold") and tuple(target[key].shape) != tuple(entry["torch_shape"]):
            wrong.append(f"{key} {tuple(target[key].shape)} vs {tuple(entry['torch_shape'])}")
    return wrong


def unmapped_names(mapping, model, document=None) -> dict:
    """Names without a counterpart: the mapping's own, trainable torch parameters no MXNet name reaches, and
    settings parameters the mapping lacks."""
    targets = {mapping[k] for k in mapping} | set(mapping.torch_defaults)
    torch_names = set(mapping.unmatched_torch) | {name for name, p in model.named_parameters()
                                                  if p.requires_grad and name not in targets}
    mx_names = set(mapping.unmatched_mx) | ({k for k in document["params"] if k not in mapping}
                                           if document is not None else set())
    return {"mxnet": sorted(mx_names), "torch": sorted(torch_names)}
