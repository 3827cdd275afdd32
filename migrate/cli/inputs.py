"""Loading and checking the inputs of the ``migrate`` command; each error names the flag, the file and what to do."""
from __future__ import annotations

import functools
import importlib
import inspect
import json
import math
import os
import sys
import tempfile

from mxformats.reading import special_kind
from migrate.errors import (CliUsageError, InputFileError, InsufficientMemoryError, MappingError, OutputExistsError,
                            SettingsError)
from migrate.mapping.table import NameMapping
from migrate.optim.schedules import check_schedule
from migrate.source.reading import model_source
from migrate.staged_folder import writable_folder

_MATCH_FLAGS = ("--symbol", "--params", "--input-shape")
#: Environment variable that raises the bound on the elements of all ``--input-shape`` inputs together.
MAX_INPUT_ELEMENTS_VARIABLE = "MIGRATE_MAX_INPUT_ELEMENTS"
MAX_INPUT_ELEMENTS = 2 ** 24  # 64 MiB of float32: one 3x2048x2048 image fits; matching needs a batch of 1


def input_shapes(texts) -> tuple[list, list]:
    """(shapes, dtypes) from ``--input-shape`` values such as ``1,3,32,32`` or ``2,5:int64``."""
    shapes, dtypes = [], []
    for text in texts or ():
        spec, _, dtype = text.partition(":")
        try:
            shapes.append(tuple(int(d) for d in spec.split(",")))
        except ValueError:
            raise CliUsageError(f"--input-shape {text!r:.80}: expected comma-separated integers such as 1,3,32,32 "
                                f"(optionally ':int64'); received {text!r:.80}") from None
        if any(d < 1 for d in shapes[-1]) or len(shapes[-1]) > 32:
            raise CliUsageError(f"--input-shape {text!r:.80}: expected 1 to 32 positive integers such as 1,3,32,32; "
                                f"a batch of 1 is enough to match and verify")
        if dtype not in ("", "float32", "int64", "int32"):
            raise CliUsageError(f"--input-shape {text!r:.80}: dtype {dtype!r:.40} is not one of float32, int64, "
                                f"int32; write e.g. 2,5:int64")
        dtypes.append(dtype or "float32")
    _check_input_size(texts, shapes)
    return shapes, dtypes


def _check_input_size(texts, shapes) -> None:
    """Refuse inputs whose elements together pass the bound (both models run them, with all their activations)."""
    limit_text = os.environ.get(MAX_INPUT_ELEMENTS_VARIABLE, str(MAX_INPUT_ELEMENTS))
    try:
        limit = int(limit_text)
    except ValueError:
        raise CliUsageError(f"{MAX_INPUT_ELEMENTS_VARIABLE}={limit_text!r:.40}: expected an integer number of "
                            f"elements") from None
    total = sum(math.prod(shape) for shape in shapes)
    if total > limit:
        raise CliUsageError(f"--input-shape {' '.join(texts)[:200]}: {total:,} input elements in all, above the "
                            f"limit of {limit:,} (both models run them, with every activation); a batch of 1 is enough "
                            f"to match and verify; to allow more, set {MAX_INPUT_ELEMENTS_VARIABLE}={total}")


def existing_file(flag: str, path: str, what: str) -> str:
    """``path`` if it is a regular file, else InputFileError naming the flag and what the file should be.

    A FIFO, device or socket is refused without opening it (reading one could block forever).
    """
    if not os.path.isfile(path):
        kind = special_kind(path)
        raise InputFileError(f"{flag} {path!r}: " + (f"{kind}, not a regular file" if kind else "file not found")
                             + f"; give {what}")
    return path


def mx_files(opts) -> tuple[str, str]:
    """The MXNet ``(symbol, params)`` files of ``--symbol``/``--params`` (``opts``: the command's ``Options``),
    checked to exist."""
    return (existing_file("--symbol", opts.symbol, "the NAME-symbol.json HybridBlock.export wrote"),
            existing_file("--params", opts.params, "the NAME-0000.params HybridBlock.export wrote"))


class MxModel:
    """The MXNet model of ``--symbol``/``--params``: read when a step of the command first asks for it (matching,
    verification, weight conversion, the training check), then shared by the others; one per command run.

    Args:
        opts: The command's ``Options`` (the files and the input shapes).
    """

    def __init__(self, opts):
        self._opts, self._source = opts, None

    def source(self):
        """The model's ``MxSource`` (``migrate.source.model_source`` of the files), read on the first call."""
        if self._source is None:
            self._source = model_source(mx_files(self._opts), self._opts.input_shapes, self._opts.input_dtypes)
        return self._source


def available_memory() -> int | None:
    """Bytes of memory the system can give without swapping (``MemAvailable``), or None where it is not known."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(opts) -> None:
    """Refuse, before building anything, a migration whose models cannot fit: the MXNet weights (the size of
    --params) and a torch twin of the same size must fit in the available memory.

    Raises:
        InsufficientMemoryError: naming the bytes needed and available.
    """
    params = opts.params
    available = available_memory()
    if not params or available is None or not os.path.isfile(params):
        return
    weights = os.path.getsize(params)
    needed = 2 * weights  # the MXNet weights read from --params, and the torch model built by --torch
    if needed > available:
        raise InsufficientMemoryError(
            f"--params {params!r}: the MXNet weights ({_gib(weights)}) and a torch model of the same size need about "
            f"{_gib(needed)} of memory, but {_gib(available)} is available; free memory or run on a machine with "
            f"more (nothing was built or written)")


def _gib(n: int) -> str:
    return f"{n / 2 ** 30:.2f} GiB"


def torch_model(spec: str, kwargs):
    """The torch model of ``--torch``: a TorchScript file, or ``package.module:callable`` called with ``kwargs`` (the
    parsed ``--kwargs``)."""
    import torch
    if special_kind(spec) is not None:
        raise InputFileError(f"--torch {spec!r}: {special_kind(spec)}, not a TorchScript file; give a file "
                             f"torch.jit.save wrote, or package.module:callable")
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
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise CliUsageError(f"--torch {spec!r}: cannot import it ({exc}); check the module is on PYTHONPATH and "
                            f"the callable exists") from None
    except Exception as exc:  # importing a user's module runs its code, which may raise anything
        raise CliUsageError(f"--torch {spec!r}: importing {module_name!r} raised {type(exc).__name__}: "
                            f"{str(exc)[:200]}; fix the module or name another one") from None
    _check_factory(spec, factory)
    try:
        model = factory(**kwargs)
    except (Exception, SystemExit) as exc:  # the user's factory may raise anything on bad arguments
        torch_oom = isinstance(exc, RuntimeError) and ("can't allocate memory" in str(exc)
                                                       or "not enough memory" in str(exc))  # torch's CPU allocator
        if isinstance(exc, MemoryError) or torch_oom:
            detail = str(exc).splitlines()[0][:200] if torch_oom else f"{_gib(available_memory() or 0)} available now"
            raise InsufficientMemoryError(f"--torch {spec!r}: building the torch model ran out of memory ({detail}); "
                                          f"free memory or run on a machine with more") from None
        raise CliUsageError(f"--torch {spec!r} with --kwargs {str(kwargs)[:200]}: the factory raised "
                            f"{type(exc).__name__}: {str(exc)[:300]}; check the arguments") from None
    if not isinstance(model, torch.nn.Module):
        raise CliUsageError(f"--torch {spec!r}: the factory returned a {type(model).__name__}, expected a "
                            f"torch.nn.Module; name a callable that builds the model")
    return model


def _check_factory(spec: str, factory) -> None:
    """Refuse, without calling it, what cannot be a model factory: a non-callable, a built-in (``sys:exit``), a
    class that is not a ``torch.nn.Module``, or a function of Python's standard library (``code:interact``)."""
    import torch
    module = getattr(factory, "__module__", None) or ""
    if isinstance(factory, functools.partial):
        return _check_factory(spec, factory.func)
    if inspect.isclass(factory):
        if issubclass(factory, torch.nn.Module):
            return
        why = "a class that is not a torch.nn.Module"
    elif not callable(factory):
        why = f"a {type(factory).__name__}, not a callable"
    elif inspect.isbuiltin(factory) or not (inspect.isfunction(factory) or inspect.ismethod(factory)):
        why = f"a built-in or foreign callable ({type(factory).__name__})"
    elif module.partition(".")[0] in sys.stdlib_module_names:
        why = f"a function of Python's standard library ({module})"
    else:
        return
    raise CliUsageError(f"--torch {spec!r}: {why}, not a model factory; name a function or torch.nn.Module class "
                        f"that builds the model, e.g. torchvision.models:resnet18")


def kwargs_object(text: str) -> dict:
    """The JSON object of ``--kwargs``, or CliUsageError naming what is wrong with it."""
    try:
        kwargs = json.loads(text)
    except RecursionError:
        raise CliUsageError(f"--kwargs {text[:40]!r}...: nested too deeply to parse; write a flat JSON object such "
                            f"as '{{\"num_classes\": 10}}'") from None
    except json.JSONDecodeError as exc:
        raise CliUsageError(f"--kwargs {text!r}: expected a JSON object, could not parse it ({exc}); write e.g. "
                            f"'{{\"num_classes\": 10}}'") from None
    if not isinstance(kwargs, dict):
        raise CliUsageError(f"--kwargs {text!r}: expected a JSON object, received {type(kwargs).__name__}; write "
                            f"e.g. '{{\"num_classes\": 10}}'")
    return kwargs


def settings(path: str) -> dict:
    """The validated settings document of ``--settings`` (``LrTrainer.export_settings``)."""
    from mxformats import SettingsFileError, load_settings
    existing_file("--settings", path, "the JSON file LrTrainer.export_settings wrote")
    try:
        document = load_settings(path)
    except SettingsFileError as exc:
        raise InputFileError(f"--settings {path!r}: {exc}") from None
    if document.get("lr_scheduler"):
        try:
            check_schedule(document["lr_scheduler"])
        except SettingsError as exc:
            raise InputFileError(f"--settings {path!r}: {exc}") from None
    return document


def output_paths(paths, inputs, force: bool, check_folder: bool = True) -> None:
    """Refuse to write over an input (always) or over an existing file (unless ``--force``), or into a folder that
    is missing or not writable (checked by creating and removing a file there)."""
    given = {os.path.realpath(p): flag for flag, p in inputs.items() if p and os.path.exists(p)}
    for path in paths:
        if not str(path).strip():
            raise CliUsageError(f"--out {path!r}: an empty path; give the file to write, such as ./out.json")
        if check_folder:
            writable_folder(os.path.dirname(os.path.abspath(path)), "--out")
        real = os.path.realpath(path)
        if real in given:
            raise CliUsageError(f"--out: {path!r} is the input of {given[real]}; inputs are never overwritten, "
                                f"choose another output path")
        if os.path.isdir(path):
            raise CliUsageError(f"--out: {path!r} is a folder; give a file path")
        if os.path.lexists(path) and not os.path.isfile(path):
            raise CliUsageError(f"--out: {path!r} is {special_kind(path) or 'a dangling link'}, not a regular file; "
                                f"give a file path")
        if os.path.exists(path) and not force:
            raise OutputExistsError(f"--out: {path!r} exists; pass --force to replace it, or choose another "
                                    f"output path")


def mapping_needs(opts) -> None:
    """Without ``--mapping``, matching needs ``--symbol``, ``--params`` and ``--input-shape``."""
    if opts.mapping:
        return
    given = {"--symbol": opts.symbol, "--params": opts.params, "--input-shape": opts.input_shapes}
    missing = [flag for flag in _MATCH_FLAGS if not given[flag]]
    if missing:
        raise CliUsageError(f"migrate {opts.command}: no --mapping given and {', '.join(missing)} missing; give "
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
