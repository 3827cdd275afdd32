"""Continues MXNet trainings in torch from the files MXNet wrote, with no MXNet: run by ``tests/test_torch_env.py``
in ./.venv-torch (numpy 2) and in ./.venv (numpy 1.23), each in a fresh process.

``python -m tests.torch_side.worker JOB.json`` reads a list of cases and, for each, writes ``result-<tag>.npz``
(the weights after the torch steps, by MXNet name) into the case's folder; it prints one JSON line: the numpy and
torch versions and whether ``mxnet`` was imported at any point.

A case with ``"device": "cuda"`` runs there (float32 matrix products without TF32); one with ``"keep_going": true``
records its error in the summary and lets the next case run.

Cases:
- ``optimizer``: a folder with settings.json, trainer.states (LrTrainer's), stock.states (gluon.Trainer's),
  middle.npz (weights at the hand-over) and data.npz; the MLP twin continues with ``torch_optimizer`` +
  ``convert_optimizer_state`` + ``torch_lr_scheduler`` + ``TorchControl`` (the exact path), and with
  ``stock_torch_optimizer`` + ``convert_stock_optimizer_state`` (the stock path); ``param_groups`` is recorded too.
- ``migration``: a ``migrate all`` folder; ``load_migration`` into the twin (``tests.torch_side.models``) or the
  generated ``model.py``, then training on data.npz.
"""
import importlib.util
import json
import os
import sys

import numpy as np
import torch

import migrate
from tests.torch_side import models


def _train(model, optimizer, scheduler, data, steps):
    """``steps`` steps of MXNet's summed squared loss (``trainer.step(batch)`` rescales by 1/batch)."""
    model.train()
    device = next(model.parameters()).device
    for i in range(steps):
        optimizer.zero_grad()
        x, y = (torch.from_numpy(data[f"{v}{i}"]).to(device) for v in "xy")
        loss = ((model(x) - y) ** 2).sum()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def _mlp(folder, dtype, device="cpu"):
    model = models.mlp(getattr(torch, dtype)).to(device)
    middle = np.load(os.path.join(folder, "middle.npz"))
    with torch.no_grad():
        for mx_name, key in models.MLP_MAPPING.items():
            model.get_parameter(key).copy_(torch.from_numpy(middle[mx_name]))
    return model


def _weights(model, mapping) -> dict:
    named = dict(model.named_parameters())
    return {mx_name: named[key].detach().cpu().numpy().copy() for mx_name, key in mapping.items() if key in named}


def optimizer_case(case) -> None:
    """The exact and the stock continuation of one optimizer's MXNet run (see the module docstring)."""
    folder, mapping = case["folder"], models.MLP_MAPPING
    settings = migrate.load_settings(os.path.join(folder, "settings.json"))
    data = np.load(os.path.join(folder, "data.npz"))
    torch.manual_seed(0)  # SGLD's noise
    model = _mlp(folder, case["dtype"], case.get("device", "cpu"))
    optimizer = migrate.torch_optimizer(model, settings, mapping)
    migrate.convert_optimizer_state(os.path.join(folder, "trainer.states"), settings, mapping, optimizer)
    migrate.TorchControl(model, optimizer, mapping)
    _train(model, optimizer, migrate.torch_lr_scheduler(optimizer, settings), data, case["steps"])
    results = {f"exact/{k}": v for k, v in _weights(model, mapping).items()}
    if case["case"] == "test":  # MXNet's test optimizer has no stock torch.optim counterpart
        np.savez(os.path.join(folder, f"result-{case['tag']}.npz"), **results)
        return
    model = _mlp(folder, case["dtype"], case.get("device", "cpu"))
    stock = migrate.stock_torch_optimizer(model, settings, mapping)
    migrate.convert_stock_optimizer_state(os.path.join(folder, "stock.states"), settings, mapping, stock.optimizer)
    _train(model, stock.optimizer, None, data, case["steps"])
    results.update({f"stock/{k}": v for k, v in _weights(model, mapping).items()})
    groups = migrate.param_groups(models.mlp(getattr(torch, case["dtype"])), settings, mapping)
    results["groups/lr"] = np.array([g["lr"] for g in groups])
    np.savez(os.path.join(folder, f"result-{case['tag']}.npz"), **results)


def migration_case(case) -> None:
    """``load_migration`` of a ``migrate all`` folder into its torch model, then training (see the docstring)."""
    folder = case["folder"]
    if case["model"] == "generate":
        spec = importlib.util.spec_from_file_location("generated_model", os.path.join(folder, "model.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = getattr(module, case["class"])()
    else:
        model = models.bn_depthwise_net()
    optimizer, scheduler = migrate.load_migration(folder, model.to(case.get("device", "cpu")))
    mapping = migrate.NameMapping.load(os.path.join(folder, "mapping.json"))
    _train(model, optimizer, scheduler, np.load(case["data"]), case["steps"])
    np.savez(os.path.join(folder, f"result-{case['tag']}.npz"), **_weights(model, mapping))


def main(job_path) -> dict:
    torch.set_num_threads(1)  # the same float sums in both environments
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # float32 on a GPU too
    with open(job_path) as handle:
        cases = json.load(handle)
    errors = {}
    for case in cases:
        try:
            {"optimizer": optimizer_case, "migration": migration_case}[case["kind"]](case)
        except Exception as exc:  # noqa: BLE001 (a case with keep_going reports its error and the next one runs)
            if not case.get("keep_going"):
                raise
            errors[case["case"]] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    return {"numpy": np.__version__, "torch": torch.__version__, "python": sys.version.split()[0],
            "mxnet_imported": "mxnet" in sys.modules, "cases": len(cases), "errors": errors}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
