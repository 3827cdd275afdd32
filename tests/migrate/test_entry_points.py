"""Malformed arguments at each public function of migrate: the project's own error naming the argument, what was
expected and the fix (``migrate.arguments`` over ``mxformats.validate``), raised before anything is read, changed or
written: the torch model, the optimizer and the files are as they were.

The MXNet side is ``MxResidual`` trained 2 steps by ``LrTrainer`` (sgd, momentum); its `migrate all` folder, mapping,
settings and states are built once.
"""
import hashlib
import math
import os

import pytest
import torch

import migrate
from migrate.cli import main
from migrate.errors import (ArgumentError, InputFileError, InputShapeError, MappingError, MigrateError,
                            ModelTypeError, SettingsError, StateConversionError)
from tests.migrate import models as M

SHAPE = (1, 3, 8, 8)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """name -> path or object: the exported files, the `migrate all` folder and the mapping."""
    folder = tmp_path_factory.mktemp("entry-points")
    M.residual_files(folder)
    files = (str(folder / "res-symbol.json"), str(folder / "res-0000.params"))
    assert main(["all", "--symbol", files[0], "--params", files[1], "--settings", str(folder / "settings.json"),
                 "--states", str(folder / "trainer.states"), "--torch", "tests.migrate.models:torch_residual",
                 "--input-shape", "1,3,8,8", "--out", str(folder / "all")]) == 0
    return {"folder": folder, "files": files, "settings": str(folder / "settings.json"),
            "states": str(folder / "trainer.states"), "all": str(folder / "all"),
            "mapping": migrate.NameMapping.load(str(folder / "all" / "mapping.json"))}


def _model():
    torch.manual_seed(0)
    return M.torch_residual()


def _optimizer(made, model):
    return migrate.torch_optimizer(model, made["settings"], made["mapping"])


# (description, call(made, model, optimizer), error class, message pattern)
CASES = [
    ("load_migration: out_dir an int", lambda m, t, o: migrate.load_migration(123, t), InputFileError,
     r"load_migration\(out_dir\): a path is needed, got int 123"),
    ("load_migration: out_dir ''", lambda m, t, o: migrate.load_migration("", t), InputFileError,
     r"load_migration\(out_dir\): a non-empty path is needed"),
    ("load_migration: out_dir a file", lambda m, t, o: migrate.load_migration(m["settings"], t), InputFileError,
     r"load_migration\(out_dir\) '.*settings.json': not a folder; pass the folder `migrate all --out` wrote"),
    ("load_migration: a model's name", lambda m, t, o: migrate.load_migration(m["all"], "TorchMLP"), ModelTypeError,
     r"load_migration\(torch_model\) must be a torch.nn.Module instance, got str 'TorchMLP'; build the model"),
    ("load_migration: a model's class", lambda m, t, o: migrate.load_migration(m["all"], M.TorchResidual),
     ModelTypeError, r"got the class TorchResidual; build the model first: TorchResidual\(...\)"),
    ("load_migration: rescale_grad NaN", lambda m, t, o: migrate.load_migration(m["all"], t, rescale_grad=math.nan),
     ArgumentError, r"load_migration\(rescale_grad\) must be a finite number in \(0, inf\), got nan"),
    ("load_migration: rescale_grad 'big'", lambda m, t, o: migrate.load_migration(m["all"], t, rescale_grad="big"),
     ArgumentError, r"load_migration\(rescale_grad\) .* got 'big' of type str; pass a number"),
    ("load_migration: rescale_grad 0", lambda m, t, o: migrate.load_migration(m["all"], t, rescale_grad=0),
     ArgumentError, r"\(0, inf\), got 0.0"),
    ("torch_optimizer: model a str", lambda m, t, o: migrate.torch_optimizer("x", m["settings"], m["mapping"]),
     ModelTypeError, r"torch_optimizer\(torch_model\) must be a torch.nn.Module instance, got str"),
    ("torch_optimizer: mapping a str", lambda m, t, o: migrate.torch_optimizer(t, m["settings"], "abc"),
     MappingError, r"mapping must be a mapping of name \(str\) -> name \(str\), got str 'abc'; pass the NameMapping"),
    ("torch_optimizer: mapping of pairs", lambda m, t, o: migrate.torch_optimizer(t, m["settings"], [("a", "b")]),
     MappingError, r"got list \[\('a', 'b'\)\]"),
    ("torch_optimizer: mapping to ints", lambda m, t, o: migrate.torch_optimizer(t, m["settings"], {"fc_bias": 3}),
     MappingError, r"must map names \(str\) to names \(str\); 1 entries do not, e.g. \('fc_bias', 3\)"),
    ("torch_optimizer: rescale_grad inf", lambda m, t, o: migrate.torch_optimizer(
        t, m["settings"], m["mapping"], rescale_grad=math.inf), ArgumentError,
     r"torch_optimizer\(rescale_grad\) .* got inf"),
    ("torch_optimizer: exact 'no'", lambda m, t, o: migrate.torch_optimizer(t, m["settings"], m["mapping"],
                                                                           exact="no"),
     ArgumentError, r"torch_optimizer\(exact=...\) must be True or False, got 'no'"),
    ("stock_torch_optimizer: rescale_grad -1", lambda m, t, o: migrate.stock_torch_optimizer(
        t, m["settings"], m["mapping"], rescale_grad=-1), ArgumentError,
     r"stock_torch_optimizer\(rescale_grad\) must be a finite number in \(0, inf\), got -1.0"),
    ("param_groups: model None", lambda m, t, o: migrate.param_groups(None, m["settings"], m["mapping"]),
     ModelTypeError, r"param_groups\(torch_model\) must be a torch.nn.Module instance, got NoneType"),
    ("param_groups: mapping an int", lambda m, t, o: migrate.param_groups(t, m["settings"], 5), MappingError,
     r"got int 5"),
    ("torch_lr_scheduler: optimizer a str", lambda m, t, o: migrate.torch_lr_scheduler("x", m["settings"]),
     ArgumentError, r"torch_lr_scheduler\(optimizer\) must be a torch.optim.Optimizer, got str 'x'"),
    ("torch_lr_scheduler: num_update -1", lambda m, t, o: migrate.torch_lr_scheduler(o, m["settings"], -1),
     SettingsError, r"num_update -1; expected an integer in \[0, 2\*\*63\)"),
    ("name_mapping: a float dimension", lambda m, t, o: migrate.name_mapping(m["files"], t, (2.0, 4)),
     InputShapeError, r"input shape \(2.0, 4\): expected a tuple of positive integers, 2.0 \(float\) is not one"),
    ("name_mapping: shapes an int", lambda m, t, o: migrate.name_mapping(m["files"], t, 5), InputShapeError,
     r"input_shapes: expected a tuple of positive integers or a list of them, received 5"),
    ("name_mapping: dtype 'banana'", lambda m, t, o: migrate.name_mapping(m["files"], t, SHAPE,
                                                                           input_dtypes="banana"),
     InputShapeError, r"input_dtypes 'banana': not numpy dtypes"),
    ("verify: mapping a str", lambda m, t, o: migrate.verify(m["files"], t, "not a mapping", SHAPE), MappingError,
     r"verify\(mapping\) must be a mapping of name \(str\) -> name \(str\), got str 'not a mapping'"),
    ("verify: atol NaN", lambda m, t, o: migrate.verify(m["files"], t, m["mapping"], SHAPE, atol=math.nan),
     ArgumentError, r"verify\(atol\) must be a finite number in \[0, inf\), got nan"),
    ("verify: model a str", lambda m, t, o: migrate.verify(m["files"], "abc", m["mapping"], SHAPE), ModelTypeError,
     r"verify\(torch_model\) must be a torch.nn.Module instance, got str 'abc'"),
    ("verify: in_place 'yes'", lambda m, t, o: migrate.verify(m["files"], t, m["mapping"], SHAPE, in_place="yes"),
     ArgumentError, r"verify\(in_place=...\) must be True or False"),
    ("convert_weights: mapping a str", lambda m, t, o: migrate.convert_weights(m["files"][1], "abc"), MappingError,
     r"convert_weights\(mapping\) must be a mapping .* got str 'abc'"),
    ("convert_weights: model a str", lambda m, t, o: migrate.convert_weights(m["files"][1], m["mapping"], "x"),
     ModelTypeError, r"convert_weights\(torch_model\) must be a torch.nn.Module instance"),
    ("convert_optimizer_state: mapping a str", lambda m, t, o: migrate.convert_optimizer_state(
        m["states"], m["settings"], "abc", o), MappingError, r"convert_optimizer_state\(mapping\) .* got str 'abc'"),
    ("convert_optimizer_state: no optimizer", lambda m, t, o: migrate.convert_optimizer_state(
        m["states"], m["settings"], m["mapping"], None), StateConversionError,
     r"optimizer NoneType cannot take MXNet 'sgd' states"),
    ("convert_stock_optimizer_state: mapping 7", lambda m, t, o: migrate.convert_stock_optimizer_state(
        m["states"], m["settings"], 7, o), MappingError, r"convert_stock_optimizer_state\(mapping\) .* got int 7"),
    ("control_from_mxnet: model a str", lambda m, t, o: migrate.control_from_mxnet("x", o, m["settings"],
                                                                                    m["mapping"]),
     ModelTypeError, r"control_from_mxnet\(model\) must be a torch.nn.Module instance"),
    ("control_from_mxnet: optimizer a dict", lambda m, t, o: migrate.control_from_mxnet(t, {}, m["settings"],
                                                                                         m["mapping"]),
     ArgumentError, r"control_from_mxnet\(optimizer\) must be a torch.optim.Optimizer, got dict"),
    ("TorchControl: mapping a str", lambda m, t, o: migrate.TorchControl(t, o, "abc"), MappingError,
     r"TorchControl\(mapping\) must be a mapping"),
]


def _snapshot(model, optimizer, folder) -> dict:
    """Everything a refused call must leave alone: weights, requires_grad, optimizer state and groups, files."""
    files = {}
    for base, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(base, name)
            files[path] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return {"weights": {k: v.clone() for k, v in model.state_dict().items()},
            "requires_grad": {k: p.requires_grad for k, p in model.named_parameters()},
            "state": {id(p): {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
                      for p, s in optimizer.state.items()},
            "groups": [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups],
            "files": files}


@pytest.mark.parametrize("description, call, error, pattern", CASES, ids=[c[0] for c in CASES])
def test_refused_before_anything_changes(made, description, call, error, pattern):
    """The call raises the named error (a MigrateError) whose message names the argument, and the model, the
    optimizer and every file are exactly as before."""
    model = _model()
    optimizer = _optimizer(made, model)
    before = _snapshot(model, optimizer, made["folder"])
    with pytest.raises(error, match=pattern) as caught:
        call(made, model, optimizer)
    assert isinstance(caught.value, MigrateError)
    after = _snapshot(model, optimizer, made["folder"])
    assert before["requires_grad"] == after["requires_grad"] and before["files"] == after["files"]
    assert before["groups"] == after["groups"] and before["state"].keys() == after["state"].keys()
    for key, value in before["weights"].items():
        assert torch.equal(value, after["weights"][key]), f"{description}: {key} changed"


def test_valid_arguments_still_work(made):
    """The same entry points with valid arguments of the accepted kinds (a Path, an int rescale_grad, a list shape,
    a plain dict mapping) do their work: the loaded model equals the folder's weights."""
    import pathlib

    from safetensors.torch import load_file
    model = _model()
    optimizer, scheduler = migrate.load_migration(pathlib.Path(made["all"]), model, rescale_grad=1)
    assert all(group["rescale_grad"] == 1.0 for group in optimizer.param_groups)
    saved = load_file(os.path.join(made["all"], "weights.safetensors"))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
    mapping = migrate.name_mapping(made["files"], _model(), [1, 3, 8, 8])
    assert dict((k, mapping[k]) for k in mapping) == dict((k, made["mapping"][k]) for k in made["mapping"])
    plain = {k: made["mapping"][k] for k in made["mapping"]}
    assert migrate.verify(made["files"], _model(), made["mapping"], SHAPE, atol=1e-5).ok
    assert len(migrate.param_groups(_model(), made["settings"], plain)) == 1
