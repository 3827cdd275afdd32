"""LrTrainer: the resolved table is what every optimizer, kvstore, context and precision actually applies."""
import pickle

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_lr import LrTrainer, Rule
from tests.gluon_lr.conftest import (CPU2, assert_close, build_mlp, build_scale, effective_lrs, train_step,
                                     weights)

LR = 0.1


def _line_net(lr_mult=1.0):
    """y = w . x with w = [1, 1] (no bias), so d(sum y)/dw = x exactly."""
    net = gluon.nn.Dense(1, in_units=2, use_bias=False, prefix="line_")
    net.initialize(mx.init.One())
    net.weight.lr_mult = lr_mult
    return net


def _sum_step(net, trainer, x=(1.0, 2.0)):
    with autograd.record():
        loss = net(mx.nd.array([x])).sum()
    loss.backward()
    trainer.step(1)
    return net.weight.data().asnumpy()[0]


class TestSgdExact:
    def test_hand_checked_delta(self):
        """lr 0.1, lr_mult 0.5, grad [1, 2]: w goes from [1, 1] to exactly [0.95, 0.9]."""
        net = _line_net()
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR})
        trainer.set_lr_mult({"line_weight": 0.5})
        np.testing.assert_allclose(_sum_step(net, trainer), [0.95, 0.9], rtol=0, atol=1e-7)

    def test_delta_is_lr_times_mult_times_grad(self):
        """With plain SGD every parameter moves by exactly -lr * lr_mult * grad."""
        net = build_mlp()
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR}, rules=[Rule("*", lr_mult=0.3)])
        trainer.set_lr_mult({"mlp_dense1_weight": 2.0, "mlp_dense0_bias": 0.0})
        before = weights(net)
        grads = train_step(net, trainer, [mx.cpu()])
        after = weights(net)
        expected = {n: before[n] - LR * trainer.lr_mult[n] * g / 4 for n, g in grads.items()}
        assert_close(after, expected, atol=1e-6, what="sgd delta")
        assert np.array_equal(after["mlp_dense0_bias"], before["mlp_dense0_bias"])


class TestSetMult:
    def test_two_calls_keep_both(self):
        """set_lr_mult({'a'}) then set_lr_mult({'b'}) keeps both entries; replace=True clears the first."""
        trainer = LrTrainer(build_mlp(), "sgd", {"learning_rate": LR})
        trainer.set_lr_mult({"mlp_dense0_weight": 0.1})
        trainer.set_lr_mult({"mlp_dense1_weight": 0.2})
        assert (trainer.lr_mult["mlp_dense0_weight"], trainer.lr_mult["mlp_dense1_weight"]) == (0.1, 0.2)
        trainer.set_lr_mult({"mlp_dense1_weight": 0.3}, replace=True)
        assert (trainer.lr_mult["mlp_dense0_weight"], trainer.lr_mult["mlp_dense1_weight"]) == (1.0, 0.3)

    def test_table_reaches_optimizer_and_params(self):
        """Both calls arrive index-keyed in the optimizer and on the Parameters."""
        net = build_mlp()
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR})
        trainer.set_wd_mult({"mlp_dense0_bias": 0.0})
        trainer.set_wd_mult({"mlp_dense1_bias": 0.5})
        names = list(trainer.wd_mult)
        opt = trainer.optimizer
        assert opt.wd_mult[names.index("mlp_dense0_bias")] == 0.0
        assert opt.wd_mult[names.index("mlp_dense1_bias")] == 0.5
        assert net.collect_params()["mlp_dense1_bias"].wd_mult == 0.5

    def test_mappings_are_read_only(self):
        """trainer.lr_mult cannot be written."""
        trainer = LrTrainer(build_mlp(), "sgd")
        with pytest.raises(TypeError):
            trainer.lr_mult["mlp_dense0_weight"] = 3.0


class TestPrecedence:
    def test_attribute_then_rules_then_explicit(self):
        """Parameter attribute < rules in order (later wins) < set_lr_mult."""
        net = build_mlp()
        params = net.collect_params()
        params["mlp_dense0_weight"].lr_mult = 7.0
        params["mlp_dense1_weight"].lr_mult = 7.0
        params["mlp_dense0_bias"].lr_mult = 7.0
        rules = [Rule("mlp_dense*", lr_mult=0.5), Rule("mlp_dense1_*", lr_mult=0.25)]
        trainer = LrTrainer(net, "sgd", rules=rules)
        trainer.set_lr_mult({"mlp_dense0_bias": 3.0})
        got = trainer.lr_mult
        assert got["mlp_batchnorm0_gamma"] == 1.0
        assert (got["mlp_dense0_weight"], got["mlp_dense1_weight"], got["mlp_dense0_bias"]) == (0.5, 0.25, 3.0)

    def test_attribute_is_lowest(self):
        """With no rule or call, the Parameter's own attribute is used."""
        net = _line_net(lr_mult=0.5)
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR})
        np.testing.assert_allclose(_sum_step(net, trainer), [0.95, 0.9], rtol=0, atol=1e-7)

    def test_second_trainer_sees_own_attribute(self):
        """A second LrTrainer on the same params reads the user's attribute, not what the first one applied."""
        net = _line_net(lr_mult=0.5)
        LrTrainer(net, "sgd", rules=[Rule("*", lr_mult=0.1)])
        assert LrTrainer(net, "sgd").lr_mult["line_weight"] == 0.5


# Optimizers MXNet 1.9.1 registers, with the hyperparameters the test uses. Each LrTrainer run with
# Rule('*', lr_mult=M, wd_mult=W) must equal a stock Trainer whose optimizer has learning_rate*M and wd*W baked in,
# except AdaDelta, which ignores the learning rate entirely (so lr_mult must have NO effect on it).
OPTIMIZERS = [
    ("sgd", {"momentum": 0.9}), ("nag", {"momentum": 0.9}), ("adam", {}), ("rmsprop", {}),
    ("rmsprop", {"centered": True}), ("adagrad", {}), ("adadelta", {}), ("adamax", {}), ("nadam", {}),
    ("ftrl", {}), ("signum", {"momentum": 0.9}), ("lamb", {}), ("lars", {"momentum": 0.9}), ("ftml", {}),
    ("dcasgd", {}), ("sgld", {}), ("ccsgd", {"momentum": 0.9}), ("lbsgd", {"momentum": 0.9}),
]
# Not here: DCASGD with momentum != 0 (MXNet 1.9.1's DCASGD.update tests an NDArray's truth value and fails, stock
# Trainer too); 'test' (a dummy that ignores lr); groupadagrad (2-D weights only: its own test below). FTRL, FTML
# and SGLD refuse lr_mult 0 (see test_errors).
ZERO_BREAKS = ("ftrl", "ftml", "sgld")
IGNORES_LR = {"adadelta"}
M, W, WD = 0.5, 0.25, 0.01


def _run(trainer_cls, name, hyper, lr, wd, rules=None, steps=2):
    """Train build_mlp() for ``steps`` steps and return its weights (SGLD's noise is re-seeded per step)."""
    net = build_mlp(seed=3)
    kwargs = {"rules": rules} if rules else {}
    trainer = trainer_cls(net.collect_params(), name, dict(hyper, learning_rate=lr, wd=wd), **kwargs)
    for step in range(steps):
        mx.random.seed(100 + step)
        train_step(net, trainer, [mx.cpu()], seed=step)
    return weights(net)


class TestOptimizers:
    @pytest.mark.parametrize("name,hyper", OPTIMIZERS, ids=[n + ("-c" if h.get("centered") else "")
                                                             for n, h in OPTIMIZERS])
    def test_multipliers_match_baked_in_values(self, name, hyper):
        """Rule('*', lr_mult, wd_mult) gives the weights of stock Trainer with lr*lr_mult, wd*wd_mult."""
        got = _run(LrTrainer, name, hyper, LR, WD, rules=[Rule("*", lr_mult=M, wd_mult=W)])
        ref_lr = LR if name in IGNORES_LR else LR * M
        expected = _run(gluon.Trainer, name, hyper, ref_lr, WD * W)
        assert_close(got, expected, atol=1e-6, what=name)
        moved = _run(gluon.Trainer, name, hyper, LR, WD)
        if name not in IGNORES_LR:
            assert max(np.abs(moved[k] - got[k]).max() for k in got) > 1e-4, f"{name}: lr_mult had no effect"

    @pytest.mark.parametrize("name,hyper", [o for o in OPTIMIZERS if o[0] not in ZERO_BREAKS + ("adadelta",)],
                             ids=[n + ("-c" if h.get("centered") else "") for n, h in OPTIMIZERS
                                  if n not in ZERO_BREAKS + ("adadelta",)])
    def test_zero_mult_holds_still(self, name, hyper):
        """lr_mult 0 keeps a parameter exactly still while the others move (AdaDelta ignores lr, so not there)."""
        net = build_mlp(seed=3)
        trainer = LrTrainer(net, name, dict(hyper, learning_rate=LR, wd=WD), rules=[Rule("mlp_dense0_*", lr_mult=0)])
        before = weights(net)
        train_step(net, trainer, [mx.cpu()])
        after = weights(net)
        assert_close(after, {k: before[k] for k in ("mlp_dense0_weight", "mlp_dense0_bias")}, 0.0, name)
        assert np.abs(after["mlp_dense1_weight"] - before["mlp_dense1_weight"]).max() > 1e-5


def test_groupadagrad_on_2d_weights():
    """GroupAdaGrad (2-D weights only, no wd) with lr_mult 0.5 equals stock GroupAdaGrad at half the lr."""
    def run(trainer_cls, lr, **kwargs):
        mx.random.seed(5)
        net = gluon.nn.HybridSequential(prefix="g_")
        with net.name_scope():
            net.add(gluon.nn.Dense(3, in_units=3, use_bias=False), gluon.nn.Dense(2, in_units=3, use_bias=False))
        net.initialize(mx.init.Uniform(0.5))
        trainer = trainer_cls(net.collect_params(), "groupadagrad", {"learning_rate": lr}, **kwargs)
        for step in range(2):
            train_step(net, trainer, [mx.cpu()], seed=step)
        return weights(net)
    got = run(LrTrainer, LR, rules=[Rule("*", lr_mult=0.5)])
    assert_close(got, run(gluon.Trainer, LR * 0.5), atol=1e-6, what="groupadagrad")
    assert max(np.abs(got[k] - v).max() for k, v in run(gluon.Trainer, LR).items()) > 1e-4


KVSTORES = [(kv, uok, n) for n in (1, 2) for kv in (None, "local", "device")
            for uok in ((None, False) if kv is None else (None, True, False))]


class TestKVStoreAndContexts:
    @pytest.mark.parametrize("kvstore,update_on_kvstore,n_ctx", KVSTORES)
    def test_sgd_delta(self, kvstore, update_on_kvstore, n_ctx):
        """Every kvstore x update_on_kvstore x context count applies -lr * lr_mult * (reduced) grad."""
        ctxs = CPU2[:n_ctx]
        net = build_mlp(ctx=ctxs)
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR}, kvstore=kvstore, update_on_kvstore=update_on_kvstore,
                            rules=[Rule("mlp_dense1_*", lr_mult=0.2)])
        trainer.set_lr_mult({"mlp_dense0_weight": 0.5})
        before = weights(net)
        grads = train_step(net, trainer, ctxs)
        reduced = n_ctx if (kvstore and n_ctx > 1) else 1
        expected = {n: before[n] - LR * trainer.lr_mult[n] * reduced * g / 4 for n, g in grads.items()}
        for ctx in ctxs:
            assert_close(weights(net, ctx), expected, atol=1e-6, what=f"{kvstore}/{update_on_kvstore}/{ctx}")

    def test_index_table_holds_without_param_dict(self):
        """The optimizer as a dist server gets it (pickled, no param_dict) still applies the table."""
        trainer = LrTrainer(build_mlp(), "sgd", {"learning_rate": LR}, rules=[Rule("mlp_dense0_*", lr_mult=0.1)])
        indices = list(range(len(trainer.lr_mult)))
        expected = [LR * m for m in trainer.lr_mult.values()]
        np.testing.assert_allclose(effective_lrs(trainer.optimizer, indices, server=True), expected, rtol=1e-6)
        assert sorted(set(expected)) == pytest.approx([LR * 0.1, LR])
        assert pickle.loads(pickle.dumps(trainer.optimizer)).param_dict == {}


class TestMultiPrecision:
    @pytest.mark.parametrize("update_on_kvstore", [False, True])
    def test_float16_with_float32_master(self, update_on_kvstore):
        """float16 weights move by -lr*lr_mult*grad (fp16 rounding) and lr_mult 0 keeps them exactly still."""
        net = build_scale(dtype="float16")
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR, "multi_precision": True, "momentum": 0.9},
                            kvstore="device", update_on_kvstore=update_on_kvstore,
                            rules=[Rule("sc_s0_*", lr_mult=0.0), Rule("sc_s1_*", lr_mult=0.5)])
        before = weights(net)
        grads = train_step(net, trainer, [mx.cpu()], dtype="float16")
        after = weights(net)
        expected = {n: before[n] - LR * trainer.lr_mult[n] * g / 4 for n, g in grads.items()}
        assert_close(after, expected, atol=2e-3, what="float16")
        assert np.array_equal(after["sc_s0_a"], before["sc_s0_a"])
        assert net.collect_params()["sc_s1_a"].data().dtype == np.float16

    def test_master_weights_accumulate_small_steps(self):
        """100 steps each below float16 resolution move the weight (float32 master copy), at lr_mult 1e-4."""
        net = build_scale(dtype="float16")
        param = net.collect_params()["sc_s1_b"]
        param.set_data(mx.nd.ones((3,), dtype="float16"))
        trainer = LrTrainer(net, "sgd", {"learning_rate": 1.0, "multi_precision": True}, rules=[Rule("*", lr_mult=0.0),
                            Rule("sc_s1_b", lr_mult=1e-4)])
        for _ in range(100):
            with autograd.record():
                loss = net(mx.nd.ones((1, 3), dtype="float16")).sum()
            loss.backward()
            trainer.step(1)
        # each step is -1e-4 (grad of b is 1): under half float16's 2**-11 spacing below 1.0, so a float16-only
        # update would stay at 1.0; the float32 master sums the steps to 0.99
        np.testing.assert_allclose(param.data().asnumpy().astype("float64"), 0.99, atol=5e-4)


class TestLrScheduler:
    def test_effective_lr_is_schedule_times_mult(self):
        """FactorScheduler(step=1, factor=0.5): step k moves w by -0.1 * 0.5**(k-1) * lr_mult * grad."""
        net = _line_net()
        schedule = mx.lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=LR)
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR, "lr_scheduler": schedule},
                            rules=[Rule("*", lr_mult=0.4)])
        w, grad = np.ones(2), np.array([1.0, 2.0])
        for k in range(1, 4):
            w = w - LR * 0.5 ** (k - 1) * 0.4 * grad
            np.testing.assert_allclose(_sum_step(net, trainer), w, rtol=0, atol=1e-6, err_msg=f"step {k}")


class TestAggregation:
    def test_aggregate_num_capped(self, monkeypatch):
        """MXNET_OPTIMIZER_AGGREGATION_SIZE=100 is capped at 60 (above that multi_sgd aborts)."""
        monkeypatch.setenv("MXNET_OPTIMIZER_AGGREGATION_SIZE", "100")
        trainer = LrTrainer(build_mlp(), "sgd", {"learning_rate": LR, "momentum": 0.9})
        assert trainer.optimizer.aggregate_num == 60


class TestConstructorForms:
    def test_optimizer_instance(self):
        """An Optimizer object gets the table too (set_lr_mult through the trainer reaches it)."""
        net = _line_net()
        optimizer = mx.optimizer.SGD(learning_rate=LR)
        trainer = LrTrainer(net, optimizer)
        trainer.set_lr_mult({"line_weight": 0.5})
        assert trainer.optimizer is optimizer and optimizer.lr_mult == {0: 0.5}
        np.testing.assert_allclose(_sum_step(net, trainer), [0.95, 0.9], rtol=0, atol=1e-7)

    def test_deferred_initialization(self):
        """Parameters whose shapes are inferred at the first forward pass train with their multipliers."""
        net = gluon.nn.Dense(1, use_bias=False, prefix="lazy_")
        net.initialize(mx.init.One())
        trainer = LrTrainer(net, "sgd", {"learning_rate": LR}, rules=[Rule("lazy_*", lr_mult=0.5)])
        np.testing.assert_allclose(_sum_step(net, trainer), [0.95, 0.9], rtol=0, atol=1e-7)
        assert trainer.explain().to_dict()["lazy_weight"]["shape"] == [1, 2]
