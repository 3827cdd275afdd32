"""The output folder of ``migrate all`` and ``load_migration``, which continues the training from it in torch.

Layout (file names below): ``mapping.json`` (``NameMapping``), ``weights.pt`` (the torch model's whole
``state_dict``), ``param_groups.json`` (readable groups), ``optimizer.pt`` (optimizer ``state_dict``, the settings,
the name mapping and the scheduler's update count), ``report.json`` and ``report.txt``.
"""
import io
import os

import torch

from mxformats.atomic import atomic_write
from migrate import arguments
from migrate.errors import InputFileError
from migrate.optim.groups import settings_with_held_frozen
from migrate.optim.translate import torch_lr_scheduler, torch_optimizer
from migrate.torch_control import TorchControl

__all__ = ["load_migration", "optimizer_document", "torch_save", "MAPPING", "WEIGHTS", "WEIGHTS_SAFETENSORS", "GROUPS",
           "OPTIMIZER", "REPORT_JSON", "REPORT_TXT"]

MAPPING, WEIGHTS, GROUPS, OPTIMIZER = "mapping.json", "weights.pt", "param_groups.json", "optimizer.pt"
WEIGHTS_SAFETENSORS = "weights.safetensors"
REPORT_JSON, REPORT_TXT = "report.json", "report.txt"
OPTIMIZER_FORMAT = "gluon-lr-torch-optimizer"
SCHEMA_VERSION = 1


def torch_save(obj, path) -> None:
    """``torch.save(obj, path)``, atomically (``mxformats.atomic``).

    Examples:
        >>> torch_save(model.state_dict(), "migrated/weights.pt")  # doctest: +SKIP
    """
    buffer = io.BytesIO()  # torch.save refuses a file name that starts with a dot, as temp names do
    torch.save(obj, buffer)
    atomic_write(path, buffer.getvalue())


def optimizer_document(optimizer, scheduler, settings: dict, mapping, control=None) -> dict:
    """The content of ``optimizer.pt``: what ``load_migration`` needs to rebuild the optimizer and scheduler.

    Args:
        optimizer: The optimizer from ``torch_optimizer`` (state converted or fresh).
        scheduler: Its ``torch_lr_scheduler``.
        settings: The settings document it was built from.
        mapping: MXNet name -> torch key (only the names are kept; the tensors it holds at a constant are
            kept frozen in the settings, so that the groups are rebuilt the same).
        control: The ``TorchControl`` of ``control_from_mxnet`` (element masks, norm layers left running), or None.

    Returns:
        A dict of tensors and plain values, loadable with ``torch.load(..., weights_only=True)``.

    Examples:
        >>> torch.save(optimizer_document(opt, sched, settings, mapping), "migrated/optimizer.pt")  # doctest: +SKIP
    """
    return {"format": OPTIMIZER_FORMAT, "schema_version": SCHEMA_VERSION,
            "optimizer_class": type(optimizer).__name__, "settings": settings_with_held_frozen(settings, mapping),
            "mapping": {name: mapping[name] for name in mapping}, "num_update": int(scheduler.num_update),
            "optimizer": optimizer.state_dict(), "control": control.records() if control is not None else {}}


def load_migration(out_dir, torch_model, rescale_grad=None):
    """Load the weights of a ``migrate all`` (or ``weights`` + ``optim``) folder and rebuild its optimizer.

    The model receives ``weights.safetensors`` or, when absent, ``weights.pt`` (strictly); the optimizer is
    ``torch_optimizer(exact=True)`` over the same groups (frozen parameters get ``requires_grad=False`` and keep their
    converted state) with the converted MXNet state; a ``TorchControl`` (``TorchControl.of(optimizer)``) holds the
    element masks and the running statistics of frozen norm layers as LrTrainer did, and freezes or unfreezes later;
    the scheduler resumes at MXNet's update count.

    Args:
        out_dir: The folder ``migrate all --out`` wrote.
        torch_model: A fresh instance of the torch model the folder was made for.
        rescale_grad: Factor applied to every gradient; None keeps MXNet's (``1/batch_size`` after
            ``trainer.step(batch_size)``, right for a loss summed over the batch). Pass 1.0 for a mean loss.

    Returns:
        ``(optimizer, scheduler)``: call ``optimizer.step()`` then ``scheduler.step()`` after each backward.

    Raises:
        InputFileError: ``out_dir`` is not a folder, a file is missing or not what ``migrate`` writes, or the weights
            do not fit the model.
        ModelTypeError: ``torch_model`` is not a ``torch.nn.Module`` instance (a class, a name, ...).
        ArgumentError: ``rescale_grad`` is not None or a finite number > 0. Nothing is loaded into the model
            unless every argument and file passes.

    Examples:
        >>> model = MyNet()
        >>> optimizer, scheduler = migrate.load_migration("migrated", model)
        >>> loss_fn(model(x), y).backward(); optimizer.step(); scheduler.step()  # doctest: +SKIP

    Note:
        MXNet adds the gradients of a batch (``loss.backward()`` on a vector loss) and divides by the batch size
        through ``rescale_grad``; compute a summed loss in torch, or pass ``rescale_grad=1.0`` with a mean loss.
    """
    folder = arguments.path(out_dir, "load_migration(out_dir)", InputFileError)
    if not os.path.isdir(folder):
        raise InputFileError(f"load_migration(out_dir) {folder!r}: not a folder; pass the folder `migrate all --out` "
                             f"wrote (it holds {WEIGHTS_SAFETENSORS} or {WEIGHTS}, and {OPTIMIZER})")
    arguments.torch_model(torch_model, "load_migration(torch_model)")
    rescale_grad = arguments.rescale_grad(rescale_grad, "load_migration(rescale_grad)")
    weights_name = WEIGHTS_SAFETENSORS if os.path.isfile(os.path.join(folder, WEIGHTS_SAFETENSORS)) else WEIGHTS
    weights = _load_safetensors(folder) if weights_name == WEIGHTS_SAFETENSORS else _load(folder, WEIGHTS, dict)
    document = _load(folder, OPTIMIZER, dict)
    if document.get("format") != OPTIMIZER_FORMAT or document.get("schema_version") != SCHEMA_VERSION:
        raise InputFileError(f"{os.path.join(folder, OPTIMIZER)!r}: expected format {OPTIMIZER_FORMAT!r} version "
                             f"{SCHEMA_VERSION}, received {document.get('format')!r} version "
                             f"{document.get('schema_version')!r}; write it again with `migrate all`")
    _load_weights(torch_model, weights, os.path.join(folder, weights_name))
    optimizer = torch_optimizer(torch_model, document["settings"], document["mapping"])
    optimizer.load_state_dict(document["optimizer"])
    TorchControl(torch_model, optimizer, document["mapping"]).load_records(document.get("control") or {})
    for group in optimizer.param_groups:
        if rescale_grad is not None:
            group["rescale_grad"] = rescale_grad
    scheduler = torch_lr_scheduler(optimizer, document["settings"], num_update=document["num_update"])
    return optimizer, scheduler


def _load(folder, name, kind):
    import torch
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise InputFileError(f"{path!r}: not found; pass the folder `migrate all --out` wrote (it holds "
                             f"{WEIGHTS} and {OPTIMIZER})")
    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many kinds on foreign files
        raise InputFileError(f"{path!r}: expected a file torch.save wrote, could not load it "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); write it again with "
                             f"`migrate all`") from None
    if not isinstance(value, kind):
        raise InputFileError(f"{path!r}: expected a {kind.__name__}, received {type(value).__name__}; write it "
                             f"again with `migrate all`")
    return value


def _load_safetensors(folder):
    path = os.path.join(folder, WEIGHTS_SAFETENSORS)
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except Exception as exc:  # safetensors raises its own SafetensorError on foreign files
        raise InputFileError(f"{path!r}: expected a safetensors file, could not load it "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); write it again with "
                             f"`migrate all`") from None


def _load_weights(torch_model, weights, path):
    target = torch_model.state_dict()
    missing = [k for k in target if k not in weights]
    unexpected = [k for k in weights if k not in target]
    shapes = [f"{k!r}: the folder holds {tuple(v.shape)}, the model {tuple(target[k].shape)}"
              for k, v in weights.items() if k in target and tuple(v.shape) != tuple(target[k].shape)]
    if missing or unexpected or shapes:
        raise InputFileError(f"{path!r} does not fit the {type(torch_model).__name__} model: missing keys "
                             f"{missing[:8]}, unexpected keys {unexpected[:8]}, shapes {shapes[:8]}; build the model "
                             f"with the arguments given to `migrate all --torch/--kwargs`, and replace a layer (a new "
                             f"head) after load_migration, as torchvision's fine-tuning does")
    torch_model.load_state_dict(weights)
