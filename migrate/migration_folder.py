"""The output folder of ``migrate all`` and ``load_migration``, which continues the training from it in torch.

Layout (file names below): ``mapping.json`` (``NameMapping``), ``weights.pt`` (the torch model's whole
``state_dict``), ``param_groups.json`` (readable groups), ``optimizer.pt`` (optimizer ``state_dict``, the settings,
the name mapping and the scheduler's update count), ``report.json`` and ``report.txt``.
"""
import io
import os
import warnings
from typing import Optional, Union

import torch

from mxformats.atomic import atomic_write
from migrate import arguments
from migrate.distributed import agreement, check_sharding, held_block, held_state_dict, state_tensors
from migrate.distributed import data_parallel_size as distributed_size
from migrate.errors import ArgumentError, DeviceCountWarning, InputFileError
from migrate.mapping.stream import TensorFile
from migrate.optim.sharded import local
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


def load_migration(out_dir: Union[str, os.PathLike], torch_model: torch.nn.Module, rescale_grad: Optional[float] = None,
                   *, data_parallel_size: Optional[int] = None) -> tuple:
    """Load the weights of a ``migrate all`` (or ``weights`` + ``optim``) folder and rebuild its optimizer.

    The model receives ``weights.safetensors`` or, when absent, ``weights.pt`` (strictly, key by key into its own
    tensors); the optimizer is ``torch_optimizer(exact=True)`` over the same groups (frozen parameters get
    ``requires_grad=False`` and keep their converted state) with the converted MXNet state; a ``TorchControl``
    (``TorchControl.of(optimizer)``) holds the element masks and the running statistics of frozen norm layers as
    LrTrainer did, and freezes or unfreezes later; the scheduler resumes at MXNet's update count.

    A model sharded with FSDP2 (``fully_shard``) or DTensors loads on every rank only the blocks that rank holds, of
    the weights and of the optimizer state (whose tensors become DTensors with their parameter's placements).

    Args:
        out_dir: The folder ``migrate all --out`` wrote.
        torch_model: A fresh instance of the torch model the folder was made for, sharded or not (not wrapped in
            ``DistributedDataParallel``: wrap it after this call).
        rescale_grad: Factor applied to every gradient, used as given; None: MXNet's (``1/batch_size`` after
            ``trainer.step(batch_size)``) times ``data_parallel_size``.
        data_parallel_size: The number of ranks whose gradients DDP or FSDP average, each on its slice of MXNet's
            batch with the loss summed over the slice; None: torch.distributed's world size (1 without it). Pass 1
            when every rank trains on the whole batch.

    Returns:
        ``(optimizer, scheduler)``: call ``optimizer.step()`` then ``scheduler.step()`` after each backward.

    Raises:
        InputFileError: ``out_dir`` is not a folder, a file is missing or not what ``migrate`` writes, or the weights
            do not fit the model.
        ModelTypeError: ``torch_model`` is not a ``torch.nn.Module`` instance (a class, a name, ...).
        ShardingError: a sharded model this rank cannot load (``migrate.distributed.check_sharding``), or a DDP wrapper.
        ArgumentError: ``rescale_grad`` is not None or a finite number > 0, or ``data_parallel_size`` not None or an
            integer >= 1. Nothing is loaded into the model unless every argument and file passes.
        RankFailedError: under torch.distributed, the call failed on another rank (every rank raises).

    Warns:
        DeviceCountWarning: the settings say the MXNet run had another number of devices than
            ``data_parallel_size``: BatchNorm statistics are taken over other slices than MXNet's.

    Examples:
        >>> model = MyNet()
        >>> optimizer, scheduler = migrate.load_migration("migrated", model)
        >>> loss_fn(model(x), y).backward(); optimizer.step(); scheduler.step()  # doctest: +SKIP

    Note:
        MXNet adds the gradients of a batch (``loss.backward()`` on a vector loss) and divides by the batch size
        through ``rescale_grad``; compute a summed loss in torch, or pass ``rescale_grad=1.0`` with a mean loss.
        Under torch.distributed call it on every rank: the ranks agree on failures (one ``all_gather_object``).
        MXNet sums the devices' gradients, DDP and FSDP average the ranks': hence the factor ``data_parallel_size``.
    """
    with agreement("load_migration"):
        folder = arguments.path(out_dir, "load_migration(out_dir)", InputFileError)
        if not os.path.isdir(folder):
            raise InputFileError(f"load_migration(out_dir) {folder!r}: not a folder; pass the folder `migrate all "
                                 f"--out` wrote (it holds {WEIGHTS_SAFETENSORS} or {WEIGHTS}, and {OPTIMIZER})")
        arguments.torch_model(torch_model, "load_migration(torch_model)")
        rescale_grad = arguments.rescale_grad(rescale_grad, "load_migration(rescale_grad)")
        ranks = _ranks(data_parallel_size)
        check_sharding(torch_model)
        weights, document = _weights_file(folder), _document(folder)
        _check_weights(torch_model, weights, weights.path)
    _warn_device_count(document["settings"], ranks)
    with agreement("load_migration"):
        _load_weights(torch_model, weights)
        optimizer = torch_optimizer(torch_model, document["settings"], document["mapping"])
        _check_groups(optimizer, document["optimizer"], os.path.join(folder, OPTIMIZER))
        states = TensorFile(os.path.join(folder, OPTIMIZER), lambda: state_tensors(_document(folder)["optimizer"]))
        optimizer.load_state_dict(held_state_dict(document["optimizer"], optimizer, states))
        TorchControl(torch_model, optimizer, document["mapping"]).load_records(document.get("control") or {})
        for group in optimizer.param_groups:
            group["rescale_grad"] = rescale_grad if rescale_grad is not None else group["rescale_grad"] * ranks
        scheduler = torch_lr_scheduler(optimizer, document["settings"], num_update=document["num_update"])
    return optimizer, scheduler


def _ranks(data_parallel_size) -> int:
    """``data_parallel_size`` checked, or torch.distributed's world size for None."""
    if data_parallel_size is None:
        return distributed_size()
    if isinstance(data_parallel_size, bool) or not isinstance(data_parallel_size, int) or data_parallel_size < 1:
        raise ArgumentError(f"load_migration(data_parallel_size) must be None or an integer >= 1 (the ranks whose "
                            f"gradients are averaged), got {data_parallel_size!r}")
    return data_parallel_size


def _warn_device_count(settings, ranks) -> None:
    """DeviceCountWarning when the settings record another device count than ``ranks`` (older files record none)."""
    devices = settings.get("num_devices")
    if devices is not None and devices != ranks:
        warnings.warn(f"the MXNet run summed the gradients of {devices} device(s) (settings num_devices), this job "
                      f"averages them over {ranks} rank(s): gradients are scaled for MXNet's whole batch split in "
                      f"{ranks}, but BatchNorm takes its statistics over each rank's slice where MXNet took them over "
                      f"each device's; run {devices} rank(s) on MXNet's slices to continue its run exactly",
                      DeviceCountWarning, stacklevel=3)


def _weights_file(folder):
    """The ``TensorFile`` of the folder's weights: ``weights.safetensors``, else ``weights.pt`` (memory-mapped)."""
    if os.path.isfile(os.path.join(folder, WEIGHTS_SAFETENSORS)):
        return TensorFile(os.path.join(folder, WEIGHTS_SAFETENSORS))
    return TensorFile(os.path.join(folder, WEIGHTS), lambda: _load(folder, WEIGHTS, dict))


def _document(folder) -> dict:
    """``optimizer.pt`` (memory-mapped: a rank reads the pages of its blocks), its format checked."""
    document = _load(folder, OPTIMIZER, dict)
    if document.get("format") != OPTIMIZER_FORMAT or document.get("schema_version") != SCHEMA_VERSION:
        raise InputFileError(f"{os.path.join(folder, OPTIMIZER)!r}: expected format {OPTIMIZER_FORMAT!r} version "
                             f"{SCHEMA_VERSION}, received {document.get('format')!r} version "
                             f"{document.get('schema_version')!r}; write it again with `migrate all`")
    return document


def _check_groups(optimizer, saved: dict, path) -> None:
    """The saved optimizer state has the groups (and their sizes) of the optimizer its settings give this model."""
    want = [len(group["params"]) for group in optimizer.param_groups]
    got = [len(group.get("params", ())) for group in saved.get("param_groups", ())]
    if got != want:
        raise InputFileError(f"{path!r}: its optimizer state holds groups of {got} parameters, the optimizer its "
                             f"settings give the {type(optimizer).__name__} of this model has {want}; write it again "
                             f"with `migrate all` for this model")


def _load(folder, name, kind):
    import torch
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise InputFileError(f"{path!r}: not found; pass the folder `migrate all --out` wrote (it holds "
                             f"{WEIGHTS} and {OPTIMIZER})")
    try:
        value = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch.load raises many kinds on foreign files
        raise InputFileError(f"{path!r}: expected a file torch.save wrote, could not load it "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); write it again with "
                             f"`migrate all`") from None
    if not isinstance(value, kind):
        raise InputFileError(f"{path!r}: expected a {kind.__name__}, received {type(value).__name__}; write it "
                             f"again with `migrate all`")
    return value


def _check_weights(torch_model, weights, path):
    target = torch_model.state_dict()
    missing = [k for k in target if k not in weights]
    unexpected = [k for k in weights if k not in target]
    shapes = [f"{k!r}: the folder holds {tuple(v)}, the model {tuple(target[k].shape)}"
              for k, v in weights.shapes.items() if k in target and tuple(v) != tuple(target[k].shape)]
    if missing or unexpected or shapes:
        raise InputFileError(f"{path!r} does not fit the {type(torch_model).__name__} model: missing keys "
                             f"{missing[:8]}, unexpected keys {unexpected[:8]}, shapes {shapes[:8]}; build the model "
                             f"with the arguments given to `migrate all --torch/--kwargs`, and replace a layer (a new "
                             f"head) after load_migration, as torchvision's fine-tuning does")


def _load_weights(torch_model, weights):
    """Copy each tensor of ``weights`` into the model's own, tensor by tensor: of a DTensor, the block this rank holds
    (read alone from the file)."""
    with torch.no_grad():
        for key, tensor in torch_model.state_dict().items():
            weights.read(key, held_block(tensor), out=local(tensor))
