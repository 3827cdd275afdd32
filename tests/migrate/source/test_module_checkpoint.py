"""Module checkpoints and stock-Trainer settings through migrate: N MXNet steps + N torch steps == 2N MXNet steps."""
import os

import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet import autograd, gluon

import migrate
from gluon_lr import export_settings
from gluon_lr.sources import TRANSLATED_OPTIMIZERS
from migrate.cli.commands import main
from migrate.errors import InputFileError
from migrate.source.checkpoint import cut_loss_heads
from migrate.mapping.weights import convert_weights
from migrate.optim import OPTIMIZERS
from tests.gluon_lr.test_sources import BATCH, module

STEPS, ATOL = 5, 1e-5
RS = np.random.RandomState(0)
DATA = RS.randn(2 * STEPS, BATCH, 5).astype("float32")
LABELS = RS.randint(0, 3, (2 * STEPS, BATCH)).astype("float32")
OPTIMIZER_CASES = {"sgd-momentum": ("sgd", {"momentum": 0.9}), "adam": ("adam", {}),
                   "lars": ("lars", {"momentum": 0.9, "eta": 0.01})}  # a Module names LARS its parameters


def torch_mlp():
    """The torch twin of tests.gluon_lr.test_sources.mlp_symbol (without its loss head)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def train_module(mod, steps):
    """Forward/backward/update the Module on the batches ``steps``."""
    for t in steps:
        mod.forward_backward(mx.io.DataBatch([mx.nd.array(DATA[t])], [mx.nd.array(LABELS[t])]))
        mod.update()


def train_torch(model, optimizer, steps):
    """The same batches in torch: the SUM of cross-entropy (MXNet's SoftmaxOutput gradient; rescale_grad divides)."""
    for t in steps:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.tensor(DATA[t])), torch.tensor(LABELS[t]).long(),
                                                 reduction="sum")
        loss.backward()
        optimizer.step()


def assert_weights(expected: dict, model, mapping, atol=ATOL):
    """Every MXNet array equals its mapped torch tensor within ``atol``; the failure names the worst one."""
    state = model.state_dict()
    diffs = {name: float(np.abs(value - state[mapping[name]].numpy()).max()) for name, value in expected.items()}
    worst = max(diffs, key=diffs.get)
    assert diffs[worst] <= atol, f"{worst}: max |diff| {diffs[worst]:.3g} > {atol}"


def checkpoint(tmp_path, optimizer, params):
    """A Module trained STEPS steps, checkpointed (symbol, params, states) with its settings exported."""
    mod = module(optimizer, **params)
    train_module(mod, range(STEPS))
    mod.save_checkpoint(str(tmp_path / "mlp"), 0)
    mod.save_optimizer_states(str(tmp_path / "mlp.states"))
    export_settings(mod, tmp_path / "settings.json")
    return mod


@pytest.mark.parametrize("case", list(OPTIMIZER_CASES))
def test_module_continues_in_torch(tmp_path, case):
    """Module STEPS steps -> checkpoint, settings, states -> torch STEPS steps == Module 2*STEPS steps (<= 1e-5)."""
    optimizer, params = OPTIMIZER_CASES[case]
    reference = module(optimizer, **params)
    train_module(reference, range(2 * STEPS))
    checkpoint(tmp_path, optimizer, params)
    model = torch_mlp()
    mapping = migrate.name_mapping((tmp_path / "mlp-symbol.json", tmp_path / "mlp-0000.params"), model, (BATCH, 5))
    assert mapping.ok and mapping["fc1_weight"] == "0.weight"
    assert mapping.notes == ["Module checkpoint: loss head SoftmaxOutput 'softmax' and label input ['softmax_label'] "
                             "cut from the graph; matched up to ['fc2']"]
    model.load_state_dict(convert_weights(str(tmp_path / "mlp-0000.params"), mapping, model))
    torch_opt = migrate.torch_optimizer(model, tmp_path / "settings.json", mapping)
    migrate.convert_optimizer_state(tmp_path / "mlp.states", tmp_path / "settings.json", mapping, torch_opt)
    train_torch(model, torch_opt, range(STEPS, 2 * STEPS))
    expected = {n: v.asnumpy() for n, v in reference.get_params()[0].items()}
    assert_weights(expected, model, mapping)
    moved = np.abs(expected["fc2_bias"] - module(optimizer, **params).get_params()[0]["fc2_bias"].asnumpy()).max()
    assert moved > 1e-3  # the check compares weights that training changed


def test_module_cli_all(tmp_path):
    """`migrate all` on a Module checkpoint: exit 0, the report says what was cut, load_migration continues exactly."""
    optimizer, params = OPTIMIZER_CASES["sgd-momentum"]
    reference = module(optimizer, **params)
    train_module(reference, range(2 * STEPS))
    checkpoint(tmp_path, optimizer, params)
    out = tmp_path / "migrated"
    code = main(["all", "--symbol", str(tmp_path / "mlp-symbol.json"), "--params", str(tmp_path / "mlp-0000.params"),
                 "--settings", str(tmp_path / "settings.json"), "--states", str(tmp_path / "mlp.states"),
                 "--torch", "tests.migrate.source.test_module_checkpoint:torch_mlp", "--input-shape", f"{BATCH},5", "--out", str(out)])
    assert code == 0
    report = (out / "report.txt").read_text()
    assert "note: Module checkpoint: loss head SoftmaxOutput 'softmax' and label input ['softmax_label'] cut" in report
    model = torch_mlp()
    torch_opt, _ = migrate.load_migration(out, model)
    train_torch(model, torch_opt, range(STEPS, 2 * STEPS))
    assert_weights({n: v.asnumpy() for n, v in reference.get_params()[0].items()}, model,
                   migrate.NameMapping.load(out / "mapping.json"))


def _head(kind):
    """fc (3 outputs) on data, ending in the loss head ``kind`` with its label input."""
    fc = mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=3, name="fc")
    label = mx.sym.Variable(f"{kind}_label")
    if kind == "makeloss":
        return mx.sym.MakeLoss(mx.sym.mean(mx.sym.square(fc - label)), name="makeloss")
    return getattr(mx.sym, kind)(fc, label, name=kind)


@pytest.mark.parametrize("kind", ["LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput",
                                  "SVMOutput", "makeloss"])
def test_loss_heads_cut(tmp_path, kind):
    """Each loss head and its label are cut: the mapping matches fc to a torch Linear and the note names the head."""
    mx.random.seed(0)
    symbol = _head(kind)
    params = {"arg:fc_weight": mx.nd.random.uniform(shape=(3, 5)), "arg:fc_bias": mx.nd.random.uniform(shape=(3,))}
    symbol.save(str(tmp_path / "h-symbol.json"))
    mx.nd.save(str(tmp_path / "h-0000.params"), params)
    torch.manual_seed(0)
    mapping = migrate.name_mapping((tmp_path / "h-symbol.json", tmp_path / "h-0000.params"), torch.nn.Linear(5, 3),
                                   (2, 5))
    assert mapping.ok and dict(mapping) == {"fc_weight": "weight", "fc_bias": "bias"}
    head = "MakeLoss 'makeloss'" if kind == "makeloss" else f"{kind} '{kind}'"
    assert head in mapping.notes[0] and f"['{kind}_label']" in mapping.notes[0] and "['fc']" in mapping.notes[0]


def test_gluon_export_has_no_note(tmp_path):
    """A Gluon export without a loss head is read as before: no note."""
    net = gluon.nn.Dense(3, in_units=5, prefix="fc_")
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((2, 5)))
    net.export(str(tmp_path / "g"))
    mapping = migrate.name_mapping((tmp_path / "g-symbol.json", tmp_path / "g-0000.params"), torch.nn.Linear(5, 3),
                                   (2, 5))
    assert mapping.ok and mapping.notes == []


def test_label_named_input_without_loss_head_is_kept():
    """A data input named 'label' in a graph with no loss head is not cut."""
    fc = mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=3, name="fc")
    symbol = fc + mx.sym.Variable("label")
    cut, notes = cut_loss_heads(symbol, {"fc_weight": None, "fc_bias": None})
    assert cut is symbol and notes == [] and "label" in cut.list_arguments()


def test_params_missing_a_symbol_argument(tmp_path):
    """A params file without fc2_bias: InputFileError naming it and the fix, in the API and the CLI (exit 2)."""
    mod = checkpoint(tmp_path, "sgd", {"momentum": 0.9})
    arrays = {f"arg:{n}": v for n, v in mod.get_params()[0].items() if n != "fc2_bias"}
    mx.nd.save(str(tmp_path / "bad-0000.params"), arrays)
    with pytest.raises(InputFileError, match=r"lacks 1 array\(s\) the symbol uses: \['fc2_bias'\]; pass the params"):
        migrate.name_mapping((tmp_path / "mlp-symbol.json", tmp_path / "bad-0000.params"), torch_mlp(), (BATCH, 5))
    out = tmp_path / "bad-migrated"
    code = main(["all", "--symbol", str(tmp_path / "mlp-symbol.json"), "--params", str(tmp_path / "bad-0000.params"),
                 "--settings", str(tmp_path / "settings.json"), "--torch", "tests.migrate.source.test_module_checkpoint:torch_mlp",
                 "--input-shape", f"{BATCH},5", "--out", str(out)])
    assert code == 2 and not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["bad-0000.params", "mlp-0000.params", "mlp-symbol.json", "mlp.states",
                                            "settings.json"]


def test_stock_trainer_continues_in_torch(tmp_path):
    """Stock gluon.Trainer (Parameter.lr_mult/wd_mult by hand, adam) -> settings + states -> torch == 2N MXNet steps."""
    def net_and_trainer():
        mx.random.seed(3)
        net = gluon.nn.HybridSequential(prefix="st_")
        with net.name_scope():
            net.add(gluon.nn.Dense(8, in_units=5, activation="relu"), gluon.nn.Dense(3, in_units=8))
        net.initialize(mx.init.Xavier())
        net.collect_params()["st_dense0_weight"].lr_mult = 0.2
        net.collect_params()["st_dense1_bias"].wd_mult = 0.0
        net.hybridize()
        return net, gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01, "wd": 0.01})

    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def train(net, trainer, steps):
        for t in steps:
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(DATA[t])), mx.nd.array(LABELS[t]))
            loss.backward()
            trainer.step(BATCH)

    reference, ref_trainer = net_and_trainer()
    train(reference, ref_trainer, range(2 * STEPS))
    net, trainer = net_and_trainer()
    train(net, trainer, range(STEPS))
    export_settings(trainer, tmp_path / "settings.json")
    trainer.save_states(str(tmp_path / "t.states"))
    net.export(str(tmp_path / "st"))
    model = torch_mlp()
    mapping = migrate.name_mapping((tmp_path / "st-symbol.json", tmp_path / "st-0000.params"), model, (BATCH, 5))
    model.load_state_dict(convert_weights(str(tmp_path / "st-0000.params"), mapping, model))
    torch_opt = migrate.torch_optimizer(model, tmp_path / "settings.json", mapping)
    migrate.convert_optimizer_state(tmp_path / "t.states", tmp_path / "settings.json", mapping, torch_opt)
    train_torch(model, torch_opt, range(STEPS, 2 * STEPS))
    assert_weights({n: p.data().asnumpy() for n, p in reference.collect_params().items()}, model, mapping)


def test_translated_optimizers_match_migrate():
    """gluon_lr's list of optimizers export_settings accepts is migrate's list of translations (ccsgd read as sgd),
    and it is every optimizer MXNet 1.9.1 registers."""
    from mxformats.settings import OPTIMIZER_ALIASES
    assert sorted(TRANSLATED_OPTIMIZERS) == sorted(set(OPTIMIZERS) | set(OPTIMIZER_ALIASES))
    builtin = [name for name, cls in mx.optimizer.Optimizer.opt_registry.items() if cls.__module__.startswith("mxnet.")]
    assert sorted(TRANSLATED_OPTIMIZERS) == sorted(builtin) and len(builtin) == 19
