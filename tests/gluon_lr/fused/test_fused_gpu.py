"""The fast path on a GPU (``mx.gpu(0)``): MXNet's operators (multi-tensor for SGD, per-tensor otherwise, as the stock
optimizers call them) on the same per-tensor tables as on CPU; the stock trainer's results bit for bit (tolerance 0).
Skipped where MXNet sees no GPU (``mx.context.num_gpus() == 0``, e.g. the CPU pip build).

Each test trains two copies of one seeded network: one with the reference trainer, one with the fast path. After each
backward the fast copy's gradients are overwritten with the reference copy's, so both update from the same gradients
(cuDNN and cuBLAS reductions need not repeat bit for bit from run to run) and any difference comes from the update.
Only the parameters a trainer updates are compared (BatchNorm's running statistics come from the forward).
"""
import numpy as np
import pytest
import mxnet as mx
from mxnet import autograd, gluon, nd

from gluon_lr import LrTrainer, Rule

pytestmark = pytest.mark.skipif(mx.context.num_gpus() == 0,
                                reason="needs a GPU and MXNet built with CUDA (mx.context.num_gpus() == 0)")
STEPS = 6


def gpu_mlp(dtype: str = "float32"):
    """Dense-relu, BatchNorm, Dense-relu, Dense on ``mx.gpu(0)``, seeded, hybridized; cast to ``dtype``."""
    mx.random.seed(0)
    net = gluon.nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(gluon.nn.Dense(32, in_units=10, activation="relu", prefix="d0_"),
                gluon.nn.BatchNorm(in_channels=32, prefix="bn_"),
                gluon.nn.Dense(16, in_units=32, activation="relu", prefix="d1_"),
                gluon.nn.Dense(5, in_units=16, prefix="d2_"))
    net.initialize(mx.init.Xavier(), ctx=mx.gpu(0))
    if dtype != "float32":
        net.cast(dtype)
    net.hybridize()
    return net


def updated(net) -> dict:
    """name -> float64 copy of every parameter a trainer updates (running statistics left out)."""
    return {k: p.data().asnumpy().astype(np.float64) for k, p in net.collect_params().items() if "running" not in k}


def train_pair(make_reference, make_fast, at_step=None, dtype: str = "float32") -> object:
    """Train the two copies STEPS steps from the same gradients; assert after every step that the updated parameters
    are equal bit for bit. ``at_step(step, trainer, net, fast)`` runs before each step's forward. Returns the fast
    trainer."""
    nets = gpu_mlp(dtype), gpu_mlp(dtype)
    trainers = make_reference(nets[0]), make_fast(nets[1])
    rs = np.random.RandomState(4)
    for step in range(STEPS):
        for fast, (trainer, net) in enumerate(zip(trainers, nets)):
            if at_step is not None:
                at_step(step, trainer, net, bool(fast))
        x = nd.array(rs.normal(size=(8, 10)), ctx=mx.gpu(0), dtype=dtype)
        y = nd.array(rs.normal(size=(8, 5)), ctx=mx.gpu(0), dtype=dtype)
        for net in nets:
            with autograd.record():
                loss = ((net(x) - y) ** 2).mean()
            loss.backward()
        reference = nets[0].collect_params()
        for name, param in nets[1].collect_params().items():
            if param.grad_req != "null":
                reference[name].grad().copyto(param.grad())
        for trainer in trainers:
            trainer.step(8)
        want, got = updated(nets[0]), updated(nets[1])
        worst = max((float(np.abs(want[k] - got[k]).max()), k) for k in want)
        assert np.isfinite([want[k].sum() for k in want]).all(), f"step {step}: training diverged"
        assert worst[0] == 0.0, f"step {step}: {worst[1]} differs from the reference by {worst[0]:.3g}"
    return trainers[1]


def paths(trainer) -> dict:
    """name -> the ``update`` column of ``explain()``."""
    return {name: row["update"] for name, row in trainer.explain().to_dict().items()}


#: The multipliers used throughout, as the stock trainer reads them (Parameter attributes) and as rules.
LR_MULT = {"mlp_d0_weight": 0.5, "mlp_d0_bias": 0.5, "mlp_d2_weight": 2.0, "mlp_d2_bias": 2.0}
RULES = [Rule("mlp_d0_*", lr_mult=0.5), Rule("mlp_d2_*", lr_mult=2.0)]


def stock_trainer(name, hyper):
    """gluon.Trainer with LR_MULT on the Parameters."""
    def make(net):
        for key, value in LR_MULT.items():
            net.collect_params()[key].lr_mult = value
        return gluon.Trainer(net.collect_params(), name, dict(hyper))
    return make


OPTIMIZERS = [("sgd", {"learning_rate": 0.1, "wd": 1e-3}),
              ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3, "clip_gradient": 0.5}),
              ("nag", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
              ("adam", {"learning_rate": 0.01, "wd": 1e-3, "clip_gradient": 0.5}),
              ("rmsprop", {"learning_rate": 0.01, "centered": True}),
              ("adagrad", {"learning_rate": 0.1, "wd": 1e-3})]


class TestGPUFastPath:
    """Every fused optimizer, multipliers, freezing, masks and float16 on ``mx.gpu(0)``."""

    @pytest.mark.parametrize("name, hyper", OPTIMIZERS, ids=[f"{n}-{len(h)}" for n, h in OPTIMIZERS])
    def test_optimizer_equals_stock(self, name, hyper):
        """lr multipliers by rules: gluon.Trainer's weights after every step; every trainable parameter on MXNet's
        operators (the fast path on a GPU)."""
        trainer = train_pair(stock_trainer(name, hyper), lambda net: LrTrainer(net, name, dict(hyper), rules=RULES))
        trainable = {k for k, row in trainer.explain().to_dict().items() if "running" not in k}
        assert {k: v for k, v in paths(trainer).items() if k in trainable} == dict.fromkeys(trainable, "mxnet-ops")
        assert set(trainer.fused_params) == trainable

    @pytest.mark.parametrize("name, hyper", [("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
                                             ("adam", {"learning_rate": 0.01, "wd": 1e-3})])
    def test_multipliers_change_mid_run(self, name, hyper):
        """set_lr_mult/set_wd_mult at step 3 (one lr_mult 0): as gluon.Trainer with the same Parameter values."""
        lr, wd = {"mlp_d1_weight": 3.0, "mlp_d2_bias": 0.0}, {"mlp_d0_weight": 0.0}

        def change(step, trainer, net, fast):
            if step != 3:
                return
            if fast:
                trainer.set_lr_mult(lr)
                trainer.set_wd_mult(wd)
                return
            for key, value in lr.items():
                net.collect_params()[key].lr_mult = value
            for key, value in wd.items():
                net.collect_params()[key].wd_mult = value

        trainer = train_pair(stock_trainer(name, hyper), lambda net: LrTrainer(net, name, dict(hyper), rules=RULES),
                             change)
        assert trainer.lr_mult["mlp_d1_weight"] == 3.0 and "mlp_d2_bias" in trainer.fused_params

    def test_freeze_mask_unfreeze(self):
        """d0 frozen at step 1 and unfrozen at step 4, an element mask on d1's weight from step 2: the stock loop's
        weights (``fused=False``), and explain() says the frozen parameters are not updated."""
        mask = (np.arange(16 * 32).reshape(16, 32) % 5 == 0).astype(np.float32)
        seen = {}

        def schedule(step, trainer, net, fast):
            if step == 1:
                trainer.freeze("mlp_d0_*")
            if step == 2:
                trainer.freeze("mlp_d1_weight", mask=mask)
                if fast:
                    seen["paths"] = paths(trainer)
            if step == 4:
                trainer.unfreeze("mlp_d0_*")

        hyper = {"learning_rate": 0.01, "wd": 1e-3}
        trainer = train_pair(lambda net: LrTrainer(net, "adam", dict(hyper), fused=False),
                             lambda net: LrTrainer(net, "adam", dict(hyper)), schedule)
        assert seen["paths"]["mlp_d0_weight"] == "none" and seen["paths"]["mlp_d1_weight"] == "mxnet-ops"
        assert trainer.masked_elements == {"mlp_d1_weight": int(mask.sum())}
        assert paths(trainer)["mlp_d0_weight"] == "mxnet-ops"

    @pytest.mark.parametrize("name, hyper", [("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
                                             ("nag", {"learning_rate": 0.1, "momentum": 0.9}),
                                             ("adam", {"learning_rate": 0.01, "wd": 1e-3})])
    def test_float16_multi_precision(self, name, hyper):
        """float16 weights with float32 master copies: gluon.Trainer's float16 weights, on the fast path."""
        hyper = dict(hyper, multi_precision=True)
        trainer = train_pair(stock_trainer(name, hyper), lambda net: LrTrainer(net, name, dict(hyper), rules=RULES),
                             dtype="float16")
        assert paths(trainer)["mlp_d1_weight"] == "mxnet-ops" and len(trainer.fused_params) == 8

    @pytest.mark.filterwarnings("ignore:Accumulating with float16")
    def test_float16_without_multi_precision_takes_stock_path(self):
        """float16 without multi_precision: the stock Updater, gluon.Trainer's weights, and explain() says so."""
        hyper = {"learning_rate": 0.1, "momentum": 0.9}
        trainer = train_pair(stock_trainer("sgd", hyper), lambda net: LrTrainer(net, "sgd", dict(hyper), rules=RULES),
                             dtype="float16")
        assert paths(trainer)["mlp_d1_weight"] == "stock:float16" and trainer.fused_params == ()
