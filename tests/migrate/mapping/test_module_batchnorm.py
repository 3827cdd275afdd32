"""Module checkpoints with BatchNorm and PReLU through migrate, to a torch twin and to a generated module.

N Module steps, then the checkpoint, settings and optimizer states, then N torch steps == the Module's own next N
steps (1e-5), for BatchNorm ``fix_gamma`` True (the op's default) and False, sgd-momentum and adam, and
``use_global_stats`` once. A BatchNorm scale under ``fix_gamma=True`` is held at 1 in torch (MXNet reads it as 1 and
resets it to 1 in every forward, so its stored value only shows the last weight-decay step); the auxiliary states
are carried and never trained.
"""
import json

import mxnet as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import migrate
from gluon_lr import export_settings
from migrate.cli.commands import main
from migrate.mapping.weights import convert_weights
from tests.migrate.generate.test_generate import generate_module

STEPS, BATCH, ATOL = 3, 4, 1e-5
SHAPE = (BATCH, 2, 6, 6)
RS = np.random.RandomState(0)
DATA = RS.randn(2 * STEPS, *SHAPE).astype("float32")
LABELS = RS.randint(0, 3, (2 * STEPS, BATCH)).astype("float32")
OPTIMIZERS = {"sgd-momentum": ("sgd", {"momentum": 0.9}), "adam": ("adam", {})}


def bn_symbol(fix_gamma=True, use_global_stats=False):
    """data -> conv1 (no bias) -> bn1 -> PReLU relu1 -> global average pool -> fc -> SoftmaxOutput; ``fix_gamma``
    True is left to the op's default (no attribute in the symbol file)."""
    conv = mx.sym.Convolution(mx.sym.Variable("data"), kernel=(3, 3), pad=(1, 1), num_filter=4, no_bias=True,
                              name="conv1")
    options = dict({} if fix_gamma else {"fix_gamma": False}, **({"use_global_stats": True} if use_global_stats
                                                                  else {}))
    act = mx.sym.LeakyReLU(mx.sym.BatchNorm(conv, name="bn1", **options), act_type="prelu", name="relu1")
    pool = mx.sym.Pooling(act, global_pool=True, kernel=(1, 1), pool_type="avg", name="pool")
    return mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.flatten(pool), num_hidden=3, name="fc"), name="softmax")


class TwinNet(torch.nn.Module):
    """The torch twin of ``bn_symbol``: BatchNorm2d with MXNet's eps, a per-channel PReLU."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(4, eps=1e-3, momentum=0.1)
        self.relu1 = torch.nn.PReLU(4)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.relu1(self.bn1(self.conv1(x))), 1).flatten(1))


def bound_module(symbol, shape, optimizer, params, seed=0):
    """A Module of ``symbol`` (seeded Xavier), its norm scales, shifts, PReLU slopes and running statistics drawn at
    random (so a scale held at 1 and carried statistics show), its optimizer at lr 0.1 and wd 0.01."""
    mx.random.seed(seed)
    mod = mx.mod.Module(symbol, context=mx.cpu())
    mod.bind(data_shapes=[("data", shape)], label_shapes=[("softmax_label", (shape[0],))])
    mod.init_params(mx.init.Xavier())
    args, aux = mod.get_params()
    rs = np.random.RandomState(seed + 1)
    draws = {"_gamma": lambda s: rs.uniform(0.2, 0.8, s), "_beta": lambda s: 0.1 * rs.randn(*s),
             "_moving_mean": lambda s: 0.1 * rs.randn(*s), "_moving_var": lambda s: rs.uniform(0.5, 1.5, s)}
    for arrays in (args, aux):
        for name, array in arrays.items():
            draw = next((f for suffix, f in draws.items() if name.endswith(suffix)), None)
            if draw is not None:
                array[:] = draw(array.shape)
    mod.set_params(args, aux)
    mod.init_optimizer(optimizer=optimizer, optimizer_params=dict({"learning_rate": 0.1, "wd": 0.01}, **params))
    return mod


def module_steps(mod, data, labels, steps):
    """Forward/backward/update the Module on the batches ``steps``."""
    for t in steps:
        mod.forward_backward(mx.io.DataBatch([mx.nd.array(data[t])], [mx.nd.array(labels[t])]))
        mod.update()


def torch_steps(model, optimizer, data, labels, steps, scheduler=None):
    """The same batches in torch: the SUM of cross-entropy (SoftmaxOutput's gradient; rescale_grad divides)."""
    model.train()
    for t in steps:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.tensor(data[t])), torch.tensor(labels[t]).long(),
                                          reduction="sum").backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def checkpoint(mod, folder, prefix) -> dict:
    """``save_checkpoint`` + ``save_optimizer_states`` + ``export_settings``; the paths, and the arrays saved.

    Without ``mx.nd.waitall()`` first, ``get_params`` right after ``update`` was seen (in some runs, not all: a race)
    returning BatchNorm running statistics from before the last step, while the training itself had them right.
    """
    mx.nd.waitall()
    mod.save_checkpoint(str(folder / prefix), 0)
    mod.save_optimizer_states(str(folder / f"{prefix}.states"))
    export_settings(mod, folder / "settings.json")
    args, aux = mod.get_params()
    return {"symbol": folder / f"{prefix}-symbol.json", "params": folder / f"{prefix}-0000.params",
            "states": folder / f"{prefix}.states", "settings": folder / "settings.json",
            "saved": {name: array.asnumpy() for name, array in {**args, **aux}.items()}}


def module_arrays(mod) -> dict:
    """The Module's parameters and auxiliary states as numpy arrays (after ``mx.nd.waitall()``: see ``checkpoint``)."""
    mx.nd.waitall()
    args, aux = mod.get_params()
    return {name: array.asnumpy() for name, array in {**args, **aux}.items()}


def assert_close(expected: dict, model, mapping, atol=ATOL):
    """Every array of ``expected`` equals its mapped torch tensor within ``atol``; the failure names the worst."""
    state = model.state_dict()
    diffs = {name: float(np.abs(value - state[mapping[name]].numpy()).max()) for name, value in expected.items()}
    worst = max(diffs, key=diffs.get)
    assert diffs[worst] <= atol, f"{worst}: max |diff| {diffs[worst]:.3g} > {atol}"


def migrate_all(files, out, torch_source) -> int:
    """``migrate all`` in process on a Module checkpoint."""
    return main(["all", "--symbol", str(files["symbol"]), "--params", str(files["params"]), "--settings",
                 str(files["settings"]), "--states", str(files["states"]), "--torch", torch_source,
                 "--input-shape", ",".join(map(str, SHAPE)), "--out", str(out)])


def trained_pair(tmp_path, optimizer_case, **bn_options):
    """A Module trained STEPS steps and checkpointed, then STEPS more (MXNet's own continuation): (files, arrays
    at the hand-over, arrays after 2*STEPS)."""
    optimizer, params = OPTIMIZERS[optimizer_case]
    mod = bound_module(bn_symbol(**bn_options), SHAPE, optimizer, params)
    module_steps(mod, DATA, LABELS, range(STEPS))
    files = checkpoint(mod, tmp_path, "bnnet")
    module_steps(mod, DATA, LABELS, range(STEPS, 2 * STEPS))
    return files, files["saved"], module_arrays(mod)


def expected_params(final: dict, fix_gamma: bool, aux: bool) -> dict:
    """The arrays torch must reproduce: the held scale is compared on its own; the running variance only where torch
    updates it as MXNet does (a twin BatchNorm2d adds the unbiased batch variance, MXNet the biased one)."""
    skip = ({"bn1_gamma"} if fix_gamma else set()) | ({"bn1_moving_var"} if not aux else set())
    return {name: value for name, value in final.items() if name not in skip}


@pytest.mark.parametrize("case", list(OPTIMIZERS))
@pytest.mark.parametrize("fix_gamma", [True, False], ids=["fix_gamma", "trained_gamma"])
def test_twin_continues_in_torch(tmp_path, fix_gamma, case):
    """Twin: name_mapping, convert_weights, torch_optimizer, convert_optimizer_state; STEPS torch steps equal the
    Module's next STEPS steps (1e-5); PReLU slopes pair with nn.PReLU; fix_gamma holds bn1.weight at 1, frozen."""
    files, saved, final = trained_pair(tmp_path, case, fix_gamma=fix_gamma)
    model = TwinNet()
    mapping = migrate.name_mapping((files["symbol"], files["params"]), model, SHAPE)
    assert mapping.ok and mapping["relu1_gamma"] == "relu1.weight" and mapping["bn1_moving_var"] == "bn1.running_var"
    assert mapping.held == ({"bn1_gamma": 1.0} if fix_gamma else {})
    model.load_state_dict(convert_weights(str(files["params"]), mapping, model))
    assert torch.equal(model.bn1.running_var, torch.from_numpy(saved["bn1_moving_var"]))  # carried as saved
    optimizer = migrate.torch_optimizer(model, files["settings"], mapping)
    migrate.convert_optimizer_state(files["states"], files["settings"], mapping, optimizer)
    torch_steps(model, optimizer, DATA, LABELS, range(STEPS, 2 * STEPS))
    assert_close(expected_params(final, fix_gamma, aux=False), model, mapping)
    if fix_gamma:
        assert torch.equal(model.bn1.weight, torch.ones(4)) and not model.bn1.weight.requires_grad
    if fix_gamma and case == "sgd-momentum":  # MXNet writes 1 back in each forward, then decays 1 (lr*wd = 0.001)
        decayed = 1 - 0.001 * sum(0.9 ** k for k in range(STEPS))
        assert np.allclose(saved["bn1_gamma"], decayed, atol=1e-6), saved["bn1_gamma"]
    assert np.abs(final["relu1_gamma"] - saved["relu1_gamma"]).max() > 1e-3  # the slopes trained


@pytest.mark.parametrize("case", list(OPTIMIZERS))
@pytest.mark.parametrize("fix_gamma", [True, False], ids=["fix_gamma", "trained_gamma"])
def test_generated_continues_in_torch(tmp_path, fix_gamma, case):
    """`migrate all --torch generate` exits 0 on the checkpoint; load_migration and STEPS torch steps equal the
    Module's next STEPS steps (1e-5), running statistics included; the report says the scale is held at 1."""
    files, saved, final = trained_pair(tmp_path, case, fix_gamma=fix_gamma)
    out = tmp_path / "migrated"
    assert migrate_all(files, out, "generate") == 0
    report = (out / "report.txt").read_text()
    assert ("bn1.gamma (held at 1: MXNet fix_gamma=True)" in report) == fix_gamma
    assert ("held at 1, frozen (MXNet fix_gamma=True)" in report) == fix_gamma
    model = generate_module(out / "model.py").Bnnet()
    optimizer, scheduler = migrate.load_migration(out, model)
    mapping = migrate.NameMapping.load(out / "mapping.json")
    assert mapping["relu1_gamma"] == "relu1.gamma" and torch.equal(
        model.bn1.moving_mean, torch.from_numpy(saved["bn1_moving_mean"]))
    torch_steps(model, optimizer, DATA, LABELS, range(STEPS, 2 * STEPS), scheduler)
    assert_close(expected_params(final, fix_gamma, aux=True), model, mapping)
    if fix_gamma:
        assert torch.equal(model.bn1.gamma, torch.ones(4)) and not model.bn1.gamma.requires_grad
    assert np.abs(final["relu1_gamma"] - saved["relu1_gamma"]).max() > 1e-3  # the slopes trained


def test_use_global_stats(tmp_path):
    """use_global_stats=True, generated: torch normalises with the carried statistics and leaves them as saved, as
    MXNet does; STEPS torch steps equal the Module's next STEPS steps (1e-5)."""
    files, saved, final = trained_pair(tmp_path, "sgd-momentum", fix_gamma=False, use_global_stats=True)
    out = tmp_path / "migrated"
    assert migrate_all(files, out, "generate") == 0
    model = generate_module(out / "model.py").Bnnet()
    optimizer, scheduler = migrate.load_migration(out, model)
    torch_steps(model, optimizer, DATA, LABELS, range(STEPS, 2 * STEPS), scheduler)
    mapping = migrate.NameMapping.load(out / "mapping.json")
    assert_close(final, model, mapping)
    for name in ("bn1_moving_mean", "bn1_moving_var"):
        assert np.array_equal(final[name], saved[name])
        assert torch.equal(model.state_dict()[mapping[name]], torch.from_numpy(saved[name]))
    assert np.abs(final["bn1_gamma"] - saved["bn1_gamma"]).max() > 1e-3  # the scale trained


def test_settings_list_aux_states_frozen(tmp_path):
    """export_settings(Module) lists moving_mean/moving_var after the parameters, frozen; settings written
    without them (before they were listed) still give param groups: auxiliary states map to buffers."""
    files, _, _ = trained_pair(tmp_path, "sgd-momentum", fix_gamma=False)
    document = json.loads(files["settings"].read_text())
    records = {name: (entry["index"], entry["frozen"]) for name, entry in document["params"].items()}
    assert records == {"conv1_weight": (0, False), "bn1_gamma": (1, False), "bn1_beta": (2, False),
                       "relu1_gamma": (3, False), "fc_weight": (4, False), "fc_bias": (5, False),
                       "bn1_moving_mean": (6, True), "bn1_moving_var": (7, True)}
    document["params"] = {n: e for n, e in document["params"].items() if not n.endswith(("_mean", "_var"))}
    model = TwinNet()
    mapping = migrate.name_mapping((files["symbol"], files["params"]), model, SHAPE)
    groups = migrate.param_groups(model, document, mapping)
    assert sorted(n for g in groups for n in g["mx_names"]) == sorted(document["params"])


def test_trained_scale_never_pairs_with_a_held_one(tmp_path):
    """MXNet fix_gamma=False against a generated module that holds its scale at 1: a difference naming fix_gamma."""
    files, _, _ = trained_pair(tmp_path, "sgd-momentum", fix_gamma=False)
    bn_symbol(fix_gamma=True).save(str(files["symbol"]))
    held = migrate.generate_torch((files["symbol"], files["params"]), SHAPE, tmp_path / "held.py")
    bn_symbol(fix_gamma=False).save(str(files["symbol"]))
    mapping = migrate.name_mapping((files["symbol"], files["params"]), held, SHAPE)
    assert not mapping.ok and mapping.held == {}
    assert any("fix_gamma 0 vs 1" in d for d in mapping.differences), mapping.differences
