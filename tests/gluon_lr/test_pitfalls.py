"""MXNet 1.9.1's multiplier pitfalls, shown on stock gluon.Trainer / mx.optimizer next to LrTrainer.

If a stock assertion here starts failing, MXNet's behaviour changed and LrTrainer's workaround should be revisited.
"""
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from gluon_lr import LrTrainer, Rule
from tests.gluon_lr.conftest import build_mlp, effective_lrs, train_step, weights

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LR = 0.1


class TestSetLrMultOverwrites:
    def test_stock_keeps_only_second_call(self):
        """mx.optimizer: two set_lr_mult calls keep only the second dictionary."""
        opt = mx.optimizer.SGD(learning_rate=LR)
        opt.set_lr_mult({0: 0.1})
        opt.set_lr_mult({1: 0.2})
        assert effective_lrs(opt, [0, 1]) == pytest.approx([LR, LR * 0.2])

    def test_lrtrainer_keeps_both(self):
        """LrTrainer: both calls hold, in the optimizer as well."""
        trainer = LrTrainer(build_mlp(), "sgd", {"learning_rate": LR})
        trainer.set_lr_mult({"mlp_dense0_weight": 0.1})
        trainer.set_lr_mult({"mlp_dense1_weight": 0.2})
        names = list(trainer.lr_mult)
        idx = [names.index("mlp_dense0_weight"), names.index("mlp_dense1_weight")]
        assert effective_lrs(trainer.optimizer, idx) == pytest.approx([LR * 0.1, LR * 0.2])


class TestOptimizerTableIgnoredByGluon:
    def test_stock_optimizer_set_lr_mult_has_no_effect(self):
        """gluon.Trainer: optimizer.set_lr_mult({i: 0}) is ignored (param_dict is consulted first)."""
        net = build_mlp()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR})
        names = sorted(net.collect_params().keys())
        trainer.optimizer.set_lr_mult({names.index("mlp_dense0_weight"): 0.0})
        before = weights(net)
        train_step(net, trainer, [mx.cpu()])
        assert np.abs(weights(net)["mlp_dense0_weight"] - before["mlp_dense0_weight"]).max() > 1e-4

    def test_lrtrainer_zero_holds(self):
        """LrTrainer: set_lr_mult({name: 0}) keeps the weight exactly still."""
        net = build_mlp()
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR})
        trainer.set_lr_mult({"mlp_dense0_weight": 0.0})
        before = weights(net)
        train_step(net, trainer, [mx.cpu()])
        assert np.array_equal(weights(net)["mlp_dense0_weight"], before["mlp_dense0_weight"])


class TestDistServerView:
    def test_stock_server_ignores_parameter_lr_mult(self):
        """gluon.Trainer: the optimizer a dist server unpickles has no param_dict, so Parameter.lr_mult is lost."""
        net = build_mlp()
        for param in net.collect_params().values():
            param.lr_mult = 0.1
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR})
        assert effective_lrs(trainer.optimizer, [0, 1]) == pytest.approx([LR * 0.1, LR * 0.1])
        assert effective_lrs(trainer.optimizer, [0, 1], server=True) == pytest.approx([LR, LR])

    def test_lrtrainer_server_keeps_table(self):
        """LrTrainer: the index-keyed table travels with the pickled optimizer."""
        trainer = LrTrainer(build_mlp(), "sgd", {"learning_rate": LR}, rules=[Rule("*", lr_mult=0.1)])
        assert effective_lrs(trainer.optimizer, [0, 1], server=True) == pytest.approx([LR * 0.1, LR * 0.1])


class TestSaveStatesDropsMultipliers:
    def test_stock_reload_loses_lr_mult(self, tmp_path):
        """gluon.Trainer: states reloaded over fresh Parameters bring back lr_mult 1.0 everywhere."""
        net = build_mlp()
        net.collect_params()["mlp_dense0_weight"].lr_mult = 0.1
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR, "momentum": 0.9})
        train_step(net, trainer, [mx.cpu()])
        trainer.save_states(str(tmp_path / "stock.states"))
        fresh = build_mlp()
        reloaded = gluon.Trainer(fresh.collect_params(), "sgd", {"learning_rate": LR, "momentum": 0.9})
        reloaded.load_states(str(tmp_path / "stock.states"))
        assert fresh.collect_params()["mlp_dense0_weight"].lr_mult == 1.0
        assert effective_lrs(reloaded.optimizer, [1]) == pytest.approx([LR])

    def test_lrtrainer_reload_keeps_lr_mult(self, tmp_path):
        """LrTrainer: the same reload restores 0.1."""
        net = build_mlp()
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR, "momentum": 0.9})
        trainer.set_lr_mult({"mlp_dense0_weight": 0.1})
        train_step(net, trainer, [mx.cpu()])
        trainer.save_states(tmp_path / "lr.states")
        fresh = build_mlp()
        reloaded = LrTrainer(fresh, "sgd", {"learning_rate": LR, "momentum": 0.9})
        reloaded.load_states(tmp_path / "lr.states")
        assert fresh.collect_params()["mlp_dense0_weight"].lr_mult == 0.1
        assert reloaded.lr_mult["mlp_dense0_weight"] == 0.1


class TestWeightDecayDefaults:
    def test_gluon_decays_biases_module_does_not(self):
        """Gluon gives every parameter wd_mult 1; Module-style set_wd_mult gives 0 to non-_weight/_gamma names."""
        params = build_mlp().collect_params()
        assert params["mlp_dense0_bias"].wd_mult == 1.0 and params["mlp_batchnorm0_beta"].wd_mult == 1.0
        names = sorted(params.keys())
        module_opt = mx.optimizer.SGD(param_idx2name=dict(enumerate(names)), wd=1e-4)
        assert module_opt.wd_mult == {"mlp_batchnorm0_beta": 0.0, "mlp_batchnorm0_running_mean": 0.0,
                                      "mlp_batchnorm0_running_var": 0.0, "mlp_dense0_bias": 0.0,
                                      "mlp_dense1_bias": 0.0}

    def test_lrtrainer_rules_make_it_explicit(self):
        """LrTrainer: Rule('bias', wd_mult=0) and Rule('norm', wd_mult=0) reproduce Module's choice visibly."""
        trainer = LrTrainer(build_mlp(), "sgd", rules=[Rule("bias", wd_mult=0.0), Rule("norm", wd_mult=0.0)])
        zero = {name for name, value in trainer.wd_mult.items() if value == 0.0}
        assert zero == {"mlp_dense0_bias", "mlp_dense1_bias"} | {f"mlp_batchnorm0_{s}" for s in
                                                                 ("gamma", "beta", "running_mean", "running_var")}


class TestSingleContextKVStore:
    def test_stock_crashes(self):
        """gluon.Trainer: one context + kvstore='device' + update_on_kvstore=True fails at the first step."""
        net = build_mlp()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR}, kvstore="device",
                                update_on_kvstore=True)
        with pytest.raises(AttributeError, match="is_capable"):
            train_step(net, trainer, [mx.cpu()])

    def test_lrtrainer_updates_on_kvstore(self):
        """LrTrainer: the same configuration updates (on the kvstore) by -lr * lr_mult * grad."""
        net = build_mlp()
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR}, kvstore="device", update_on_kvstore=True,
                            rules=[Rule("*", lr_mult=0.5)])
        before = weights(net)
        grads = train_step(net, trainer, [mx.cpu()])
        after = weights(net)
        worst = max(np.abs(after[n] - (before[n] - LR * 0.5 * g / 4)).max() for n, g in grads.items())
        assert worst < 1e-6


AGGREGATE_SCRIPT = """
import os, sys
os.environ["MXNET_OPTIMIZER_AGGREGATION_SIZE"] = "100"
import mxnet as mx
from mxnet import autograd, gluon
import gluon_lr
net = gluon.nn.HybridSequential()
for _ in range(40):
    net.add(gluon.nn.Dense(2, in_units=2))
net.initialize()
cls = gluon.Trainer if sys.argv[1] == "stock" else gluon_lr.LrTrainer
trainer = cls(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
with autograd.record():
    loss = net(mx.nd.ones((1, 2))).sum()
loss.backward()
trainer.step(1)
mx.nd.waitall()
print("stepped", trainer.optimizer.aggregate_num)
"""


class TestAggregationLimit:
    @pytest.mark.parametrize("which,crashes", [("stock", True), ("lrtrainer", False)])
    def test_more_than_60_tensors(self, which, crashes):
        """80 tensors with MXNET_OPTIMIZER_AGGREGATION_SIZE=100: stock multi_sgd aborts, LrTrainer caps at 60."""
        env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
        done = subprocess.run([sys.executable, "-c", AGGREGATE_SCRIPT, which], env=env, capture_output=True,
                              timeout=120)
        if crashes:  # killed by a signal (SIGABRT), not a Python error
            assert done.returncode < 0, (done.returncode, done.stderr[-1000:])
        else:
            assert done.returncode == 0 and done.stdout.split() == [b"stepped", b"60"], done.stderr[-1000:]
