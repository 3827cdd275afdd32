"""``migrate all`` on MXNet's files, then training, with no MXNet: run by
``tests/migrate/test_without_mxnet_files.py`` in ./.venv-torch (numpy 2), in a fresh process.

``python -m tests.torch_side.files_worker JOB.json`` reads a list of cases; for each it runs ``migrate all`` in this
process on the case's symbol, params, settings and states files (written by MXNet in the main venv), loads the
folder with ``load_migration`` into its torch model (the generated ``model.py``, or the twin a ``module:factory``
builds), trains ``steps`` steps on ``data.npz`` and writes ``result-<torch>.npz`` (every mapped parameter and buffer
after the steps, by MXNet name) into the case's folder. It prints one JSON
line: per case the exit code and the report's ``mxnet_graph``, the numpy version and whether ``mxnet`` was imported.

Case keys: ``folder``, ``symbol``, ``params``, ``settings``, ``states``, ``shape`` (``"4,2,6,6"``), ``torch``
(``generate`` or ``module:factory``), ``class`` (the generated class), ``steps``, ``loss``: ``squared`` (MXNet's
summed squared error, targets ``y{i}``) or ``softmax`` (SoftmaxOutput's summed cross-entropy, integer labels
``y{i}``).
"""
import importlib
import importlib.util
import json
import os
import sys

import numpy as np
import torch

import migrate
from migrate.cli.commands import main as migrate_main


def _generated(folder, class_name):
    spec = importlib.util.spec_from_file_location(f"generated_{abs(hash(folder))}", os.path.join(folder, "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, class_name)()


def _model(case, out):
    if case["torch"] == "generate":
        return _generated(out, case["class"])
    module, factory = case["torch"].split(":")
    return getattr(importlib.import_module(module), factory)()


def _loss(kind, output, target):
    if kind == "softmax":
        return torch.nn.functional.cross_entropy(output, target.long(), reduction="sum")
    return ((output - target) ** 2).sum()


def case_result(case) -> dict:
    """Migrate, load, train (see the module docstring); the exit code and the report's ``mxnet_graph``."""
    tag = case["torch"].replace(":", "-")
    out = os.path.join(case["folder"], f"migrated-{tag}")
    code = migrate_main(["all", "--symbol", case["symbol"], "--params", case["params"], "--settings", case["settings"],
                         "--states", case["states"], "--torch", case["torch"], "--input-shape", case["shape"], "--out",
                         out, "--quiet", "--force"])
    if code != 0:
        return {"exit_code": code}
    with open(os.path.join(out, "report.json")) as handle:
        report = json.load(handle)
    model = _model(case, out)
    optimizer, scheduler = migrate.load_migration(out, model)
    data = np.load(os.path.join(case["folder"], "data.npz"))
    model.train()
    for i in range(case["steps"]):
        optimizer.zero_grad()
        _loss(case["loss"], model(torch.from_numpy(data[f"x{i}"])), torch.from_numpy(data[f"y{i}"])).backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    state, mapping = model.state_dict(), migrate.NameMapping.load(os.path.join(out, "mapping.json"))
    np.savez(os.path.join(case["folder"], f"result-{tag}.npz"), **{name: state[mapping[name]].numpy()
                                                                   for name in mapping})
    return {"exit_code": code, "mxnet_graph": report.get("mxnet_graph"), "verify": report.get("verify")}


if __name__ == "__main__":
    torch.set_num_threads(1)
    with open(sys.argv[1]) as handle:
        results = [case_result(case) for case in json.load(handle)]
    print(json.dumps({"numpy": np.__version__, "mxnet_imported": "mxnet" in sys.modules, "cases": results}))
