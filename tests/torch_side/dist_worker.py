"""Continues migrated runs in torch on several ranks (DDP, FSDP2, DCP checkpoints) or in one process, without MXNet:
started by ``tests/torch_side/test_distributed.py`` and ``tests/migrate/test_ddp.py`` through
``devtools.local_cluster.run_torch_ddp`` (./.venv-torch or ./.venv).

``python -m tests.torch_side.dist_worker JOB.json``: without ``RANK`` in the environment it runs alone (no process
group); with it, it joins the gloo job. For each case of the job it writes ``OUT/{name}-rank{r}.npz`` (every
parameter and buffer by torch key, DTensors gathered whole) and prints, as its last line, one JSON object
``{name: {"warnings": [...], "error": "Type: message" or None, "seconds": ...}}``.

A case (a dict):
- ``name``, ``folder`` (a ``migrate all`` folder), ``model``: ``"module:function"`` building the torch model, or
  ``"generate:Class"`` for the folder's ``model.py``;
- ``mode``: ``single`` (no process group; ``slices`` forwards per step, BatchNorm per slice as per MXNet device),
  ``ddp`` or ``fsdp`` (``devtools.torch_ranks.parallel``), each rank on its slice of every batch;
- ``data`` (npz with x0, y0, x1, ...), ``steps`` (batches to train, from ``first``: 0), ``load`` (keyword arguments
  of ``load_migration``);
- ``save``: ``{"dir", "at"}`` saves model, optimizer and scheduler with ``torch.distributed.checkpoint`` before batch
  ``at``; ``resume``: ``{"dir"}`` loads them after ``load_migration`` (train then from ``first``);
- ``bad``: the name of a function of this module that builds a model ``load_migration`` must refuse on every rank;
  the case records the error (no training).
"""
import importlib
import importlib.util
import json
import os
import sys
import time
import warnings

import numpy as np
import torch

import migrate
from devtools import torch_ranks


def build_model(spec: str, folder: str):
    """The torch model of ``spec``: ``"module:function"``, or ``"generate:Class"`` from ``folder/model.py``."""
    where, name = spec.split(":")
    if where == "generate":
        loader = importlib.util.spec_from_file_location("generated_model", os.path.join(folder, "model.py"))
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)()


def train(model, optimizer, scheduler, case, rank, world, save=None) -> None:
    """Batches ``first``..``steps``-1 of the case's data: MXNet's summed squared error on this rank's slice (alone:
    the sum over ``slices`` slices, each its own forward); DCP save before batch ``save["at"]``."""
    data, slices = np.load(case["data"]), case.get("slices", 1)
    model.train()
    for i in range(case.get("first", 0), case["steps"]):
        if save is not None and i == save["at"]:
            _dcp(model, optimizer, scheduler, save["dir"], "save")
        x, y = data[f"x{i}"], data[f"y{i}"]
        parts = [(x, y)] if world == 1 and slices == 1 else [
            (torch_ranks.rank_slice(x, r, n), torch_ranks.rank_slice(y, r, n))
            for r, n in ([(rank, world)] if world > 1 else [(s, slices) for s in range(slices)])]
        optimizer.zero_grad()
        loss = sum(((model(torch.from_numpy(px)) - torch.from_numpy(py)) ** 2).sum() for px, py in parts)
        loss.backward()
        optimizer.step()
        scheduler.step()


def _dcp(model, optimizer, scheduler, folder, action) -> None:
    """Save (or load into) model, optimizer and scheduler with torch.distributed.checkpoint."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state, "scheduler": scheduler.state_dict()}
    if action == "save":
        dcp.save(state, checkpoint_id=folder)
        return
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    scheduler.load_state_dict(state["scheduler"])


def run_case(case, rank, world) -> dict:
    """One training case; returns its summary entry (the weights go to the npz file)."""
    model = build_model(case["model"], case["folder"])
    if case["mode"] == "fsdp":
        model = torch_ranks.parallel(model, "fsdp")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizer, scheduler = migrate.load_migration(case["folder"], model, **case.get("load", {}))
    trained = torch_ranks.parallel(model, case["mode"]) if case["mode"] == "ddp" else model
    if "resume" in case:
        _dcp(model, optimizer, scheduler, case["resume"]["dir"], "load")
    train(trained, optimizer, scheduler, case, rank, world, case.get("save"))
    np.savez(os.path.join(case["out"], f"{case['name']}-rank{rank}.npz"), **torch_ranks.whole_weights(model))
    return {"warnings": [f"{w.category.__name__}: {w.message}" for w in caught], "error": None}


def bad_case(case, rank, world) -> dict:
    """Build the case's bad model and call ``load_migration`` on it; the error it raised here."""
    model, folder = globals()[case["bad"]](case, rank)
    try:
        migrate.load_migration(folder, model)
    except migrate.errors.MigrateError as exc:
        return {"warnings": [], "error": f"{type(exc).__name__}: {exc}"}
    return {"warnings": [], "error": None}


def _small(case):
    return build_model(case["model"], case["folder"])


def two_meshes(case, rank):
    """The first layer sharded on the mesh of ranks [0, 1], the rest on [1, 0]."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    model = _small(case)
    fully_shard(model[0], mesh=DeviceMesh("cpu", [0, 1]))
    fully_shard(model, mesh=DeviceMesh("cpu", [1, 0]))
    return model, case["folder"]


def plain_beside_sharded(case, rank):
    """Only the first layer sharded: the root's parameters stay plain tensors."""
    from torch.distributed.fsdp import fully_shard
    model = _small(case)
    fully_shard(model[0])
    return model, case["folder"]


def partial_placement(case, rank):
    """Every parameter a DTensor with a Partial placement (a pending sum, not a cut)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial
    model, mesh = _small(case), init_device_mesh("cpu", (2,))
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            held = DTensor.from_local(param.detach() / 2, mesh, [Partial()], run_check=False)
            setattr(module, name, torch.nn.Parameter(held))
    return model, case["folder"]


def rank_outside_mesh(case, rank):
    """Every parameter a DTensor on a mesh of rank 0 alone: rank 1 holds no part of any parameter."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard
    model, mesh = _small(case), DeviceMesh("cpu", [0])
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            held = DTensor.from_local(param.detach(), mesh, [Shard(0)], run_check=False, shape=param.shape,
                                      stride=param.stride())
            setattr(module, name, torch.nn.Parameter(held))
    return model, case["folder"]


def folder_missing_on_rank_1(case, rank):
    """A sharded model; rank 1 is given a folder that does not exist there (a node without the files)."""
    from torch.distributed.fsdp import fully_shard
    model = _small(case)
    fully_shard(model)
    return model, case["folder"] if rank == 0 else case["folder"] + "-elsewhere"


def ddp_wrapper(case, rank):
    """The model wrapped in DistributedDataParallel before the call."""
    return torch.nn.parallel.DistributedDataParallel(_small(case)), case["folder"]


def main(job_path) -> None:
    torch.set_num_threads(1)
    rank, world = torch_ranks.init_gloo() if "RANK" in os.environ else (0, 1)
    with open(job_path) as handle:
        cases = json.load(handle)
    summary = {}
    for case in cases:
        start = time.perf_counter()
        summary[case["name"]] = (bad_case if "bad" in case else run_case)(case, rank, world)
        summary[case["name"]]["seconds"] = round(time.perf_counter() - start, 2)
    if world > 1:
        torch_ranks.finish()
    print(json.dumps(summary))


if __name__ == "__main__":
    torch_ranks.run_rank(main, sys.argv[1])
