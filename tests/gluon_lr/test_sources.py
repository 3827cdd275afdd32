"""gluon_lr.export_settings on a Module, a stock Trainer and an LrTrainer; LrTrainer on SymbolBlock.imports."""
import json
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import gluon_lr
from gluon_lr import LrTrainer, SettingsSourceError, export_settings
from tests.gluon_lr.conftest import build_mlp, train_step

BATCH = 4


def mlp_symbol():
    """data -> fc1 (weight lr_mult 0.1 and bias wd_mult 2.0 as symbol attributes) -> relu -> fc2 -> SoftmaxOutput."""
    data = mx.sym.Variable("data")
    weight, bias = mx.sym.Variable("fc1_weight", lr_mult=0.1), mx.sym.Variable("fc1_bias", wd_mult=2.0)
    hidden = mx.sym.Activation(mx.sym.FullyConnected(data, weight=weight, bias=bias, num_hidden=8, name="fc1"),
                               act_type="relu")
    return mx.sym.SoftmaxOutput(mx.sym.FullyConnected(hidden, num_hidden=3, name="fc2"), name="softmax")


def module(optimizer="sgd", bind=True, init_optimizer=True, **optimizer_params):
    """The Module of ``mlp_symbol`` (seeded), bound for batches of 4, its optimizer given two set_lr_mult calls."""
    mx.random.seed(1)
    mod = mx.mod.Module(mlp_symbol(), context=mx.cpu())
    if bind:
        mod.bind(data_shapes=[("data", (BATCH, 5))], label_shapes=[("softmax_label", (BATCH,))])
        mod.init_params(mx.init.Xavier())
    if init_optimizer:
        mod.init_optimizer(optimizer=optimizer, optimizer_params=dict({"learning_rate": 0.1, "wd": 0.01},
                                                                      **optimizer_params))
        mod._optimizer.set_lr_mult({"fc2_weight": 3.0})  # the pitfall: the next call drops this
        mod._optimizer.set_lr_mult({"fc2_bias": 0.5})
        mod._optimizer.set_wd_mult({"fc2_weight": 0.5})
    return mod


class TestExportSettingsModule:
    """export_settings(Module)."""

    def test_effective_multipliers(self, tmp_path):
        """Symbol attributes + the LAST set_lr_mult dict; wd 0 for non-weights unless an attribute says otherwise."""
        doc = export_settings(module(momentum=0.9), tmp_path / "s.json")
        got = {name: (p["index"], p["lr_mult"], p["wd_mult"]) for name, p in doc["params"].items()}
        assert got == {"fc1_weight": (0, 0.1, 1.0), "fc1_bias": (1, 1.0, 2.0),
                       "fc2_weight": (2, 1.0, 0.5), "fc2_bias": (3, 0.5, 0.0)}
        assert "data" not in doc["params"] and "softmax_label" not in doc["params"]
        assert doc["optimizer"]["rescale_grad"] == 1.0 / BATCH
        assert doc["optimizer"]["hyperparameters"]["momentum"] == 0.9
        assert gluon_lr.load_settings(tmp_path / "s.json")["params"]["fc2_weight"]["shape"] == [3, 8]

    def test_multipliers_are_what_mxnet_applies(self, tmp_path):
        """Each exported lr_mult/wd_mult equals the optimizer's own _get_lr/_get_wd divided by lr/wd."""
        mod = module(momentum=0.9)
        doc = export_settings(mod, tmp_path / "s.json")
        opt = mod._optimizer
        for name, record in doc["params"].items():
            assert opt._get_lr(record["index"]) == pytest.approx(0.1 * record["lr_mult"]), name
            assert opt._get_wd(record["index"]) == pytest.approx(0.01 * record["wd_mult"]), name

    def test_one_device(self, tmp_path):
        """A Module (exported on one context only) records num_devices 1."""
        assert export_settings(module(), tmp_path / "s.json")["num_devices"] == 1

    def test_num_update_and_scheduler(self, tmp_path):
        """After 3 updates num_update is 3; a FactorScheduler is written with its base_lr."""
        mod = module(momentum=0.9, lr_scheduler=mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1))
        rs = np.random.RandomState(0)
        for _ in range(3):
            mod.forward_backward(mx.io.DataBatch([mx.nd.array(rs.randn(BATCH, 5))], [mx.nd.array([0, 1, 2, 0])]))
            mod.update()
        doc = export_settings(mod, tmp_path / "s.json")
        assert doc["num_update"] == 3
        assert doc["lr_scheduler"]["type"] == "FactorScheduler" and doc["lr_scheduler"]["base_lr"] == 0.1

    def test_fixed_params_are_frozen(self, tmp_path):
        """fixed_param_names -> frozen True for exactly those names."""
        mod = mx.mod.Module(mlp_symbol(), context=mx.cpu(), fixed_param_names=["fc1_weight"])
        mod.bind(data_shapes=[("data", (BATCH, 5))], label_shapes=[("softmax_label", (BATCH,))])
        mod.init_params()
        mod.init_optimizer()
        doc = export_settings(mod, tmp_path / "s.json")
        assert [name for name, p in doc["params"].items() if p["frozen"]] == ["fc1_weight"]

    def test_two_set_lr_mult_pitfall(self, tmp_path):
        """Two set_lr_mult calls: fc2_weight's 3.0 from the first is gone; its weight moves 3x less than asked."""
        asked = module(momentum=0.0)
        asked._optimizer.set_lr_mult({"fc2_weight": 3.0, "fc2_bias": 0.5})
        doc_once = export_settings(asked, tmp_path / "once.json")
        doc_twice = export_settings(module(momentum=0.0), tmp_path / "twice.json")
        assert (doc_once["params"]["fc2_weight"]["lr_mult"], doc_twice["params"]["fc2_weight"]["lr_mult"]) == (3.0, 1.0)
        steps = []
        for mod in (asked, module(momentum=0.0)):
            before = mod.get_params()[0]["fc2_weight"].asnumpy()
            mod.forward_backward(mx.io.DataBatch([mx.nd.ones((BATCH, 5))], [mx.nd.array([0, 1, 2, 0])]))
            mod.update()
            steps.append(np.abs(mod.get_params()[0]["fc2_weight"].asnumpy() - before).sum())
        assert steps[0] / steps[1] == pytest.approx(3.0, rel=1e-3)  # plain SGD, wd 0.01*0.5 on the same weights


class TestExportSettingsTrainer:
    """export_settings(gluon.Trainer) and export_settings(LrTrainer)."""

    def test_stock_trainer_reads_parameter_attributes(self, tmp_path):
        """Parameter.lr_mult/wd_mult set by hand are in the file, in the Trainer's index order."""
        net = build_mlp()
        params = net.collect_params()
        params["mlp_dense0_weight"].lr_mult, params["mlp_dense1_bias"].wd_mult = 0.25, 0.0
        trainer = gluon.Trainer(params, "adam", {"learning_rate": 0.01})
        train_step(net, trainer, [mx.cpu()])
        doc = export_settings(trainer, tmp_path / "s.json")
        assert list(doc["params"]) == [p.name for p in trainer._params]
        assert doc["params"]["mlp_dense0_weight"]["lr_mult"] == 0.25
        assert doc["params"]["mlp_dense1_bias"]["wd_mult"] == 0
        assert doc["params"]["mlp_dense1_weight"]["lr_mult"] == 1.0 and doc["num_update"] == 1

    @pytest.mark.parametrize("kind", ["gluon.Trainer", "LrTrainer"])
    @pytest.mark.parametrize("contexts", [1, 2])
    def test_num_devices_is_the_contexts(self, tmp_path, kind, contexts):
        """``num_devices`` is the number of contexts whose gradients a step adds (a torch job's world size)."""
        ctxs = [mx.cpu(i) for i in range(contexts)]
        net = build_mlp(ctx=ctxs)
        trainer = (gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}) if kind == "gluon.Trainer"
                   else LrTrainer(net, "sgd", {"learning_rate": 0.1}))
        train_step(net, trainer, ctxs)
        assert export_settings(trainer, tmp_path / "s.json")["num_devices"] == contexts
        assert json.loads((tmp_path / "s.json").read_text())["num_devices"] == contexts

    def test_lr_trainer_same_as_method(self, tmp_path):
        """For an LrTrainer the function writes what its export_settings method writes."""
        trainer = LrTrainer(build_mlp(), "sgd", {"learning_rate": 0.1}, rules=[gluon_lr.Rule("*bias", lr_mult=2.0)])
        assert export_settings(trainer, tmp_path / "a.json") == trainer.export_settings(tmp_path / "b.json")


def _unbound():
    return module(bind=False, init_optimizer=False)


def _no_optimizer():
    return module(init_optimizer=False)


def _two_contexts():
    mod = mx.mod.Module(mlp_symbol(), context=[mx.cpu(0), mx.cpu(1)])
    mod.bind(data_shapes=[("data", (BATCH, 5))], label_shapes=[("softmax_label", (BATCH,))])
    mod.init_params()
    mod.init_optimizer()
    return mod


@mx.optimizer.register
class HomeMadeSGD(mx.optimizer.SGD):
    """A user's own optimizer: migrate cannot know its rule."""


def _untranslated():
    return gluon.Trainer(build_mlp().collect_params(), "homemadesgd", {"learning_rate": 0.1})


ERROR_CASES = [
    ("unbound Module", _unbound, r"Module is not bound.*call module.bind"),
    ("Module before init_optimizer", _no_optimizer, r"Module has no optimizer yet.*init_optimizer"),
    ("Module on two contexts", _two_contexts, r"Module runs on 2 contexts.*bind it to one context"),
    ("Trainer optimizer without translation", _untranslated, r"optimizer 'homemadesgd'.*no translation.*one of"),
    ("not a trainer", lambda: build_mlp(), r"got HybridSequential; pass the object that trains"),
]


@pytest.mark.parametrize("desc,make,pattern", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_bad_sources(tmp_path, desc, make, pattern):
    """Each bad source raises SettingsSourceError naming it and the fix, and writes nothing."""
    with pytest.raises(SettingsSourceError, match=pattern):
        export_settings(make(), tmp_path / "s.json")
    assert os.listdir(tmp_path) == []


class TestSymbolBlock:
    """LrTrainer on gluon.SymbolBlock.imports with the default fast path."""

    def test_bit_identical_to_stock_trainer(self, tmp_path):
        """3 sgd-momentum steps with an lr_mult: every weight equal bit for bit, and the parameters were packed."""
        mx.random.seed(0)
        net = gluon.nn.HybridSequential(prefix="sb_")
        with net.name_scope():
            net.add(gluon.nn.Dense(8, activation="relu"), gluon.nn.Dense(3))
        net.initialize(mx.init.Xavier())
        net.hybridize()
        net(mx.nd.ones((2, 5)))
        net.export(str(tmp_path / "net"))
        x = mx.nd.array(np.random.RandomState(1).randn(4, 5))
        results = []
        for cls in (gluon.Trainer, LrTrainer):
            block = gluon.SymbolBlock.imports(str(tmp_path / "net-symbol.json"), ["data"],
                                              str(tmp_path / "net-0000.params"))
            assert block.collect_params()["sb_dense0_weight"].shape is None  # known only after the first forward
            block.collect_params()["sb_dense0_weight"].lr_mult = 0.5
            trainer = cls(block.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3})
            for _ in range(3):
                with autograd.record():
                    loss = (block(x) ** 2).sum()
                loss.backward()
                trainer.step(4)
            results.append({n: p.data().asnumpy() for n, p in block.collect_params().items()})
        assert len(trainer.fused_params) == 4
        doc = trainer.export_settings(tmp_path / "s.json")  # shapes from the arrays: param.shape is still None
        assert doc["params"]["sb_dense0_weight"]["shape"] == [8, 5] and doc["params"]["sb_dense1_bias"]["shape"] == [3]
        for name, value in results[0].items():
            assert np.array_equal(value, results[1][name]), (name, np.abs(value - results[1][name]).max())
        initial = net.collect_params()["sb_dense0_weight"].data().asnumpy()
        assert not np.array_equal(results[1]["sb_dense0_weight"], initial)  # training moved it
