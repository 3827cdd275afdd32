"""Which path each parameter's update takes (``explain()``'s ``update`` column, ``trainer.fused_params``), and
parameters the compiled kernels cannot take (float16 without multi_precision, sparse gradients): those get the stock
update in the same step, with the stock trainer's results (tolerance 0)."""
import sys

import numpy as np
import pytest
import mxnet as mx
from mxnet import autograd, gluon, nd

from gluon_lr import LrTrainer, Rule


class MixedNet(gluon.nn.HybridBlock):
    """An Embedding (sparse gradient optional), a Dense layer, and a float16 per-output scale."""

    def __init__(self, sparse_grad: bool, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = gluon.nn.Embedding(20, 6, sparse_grad=sparse_grad, prefix="embed_")
            self.dense = gluon.nn.Dense(3, in_units=6, prefix="dense_")
            self.scale = self.params.get("scale", shape=(3,), dtype="float16", init=mx.init.One())

    def hybrid_forward(self, F, tokens, scale):
        out = self.dense(F.mean(self.embed(tokens), axis=1))
        return F.broadcast_mul(out, F.cast(scale, "float32").reshape((1, -1)))


def train_mixed(make_trainer, sparse_grad: bool, steps: int = 5) -> tuple:
    """Train a seeded MixedNet (imperative: sparse gradients need it); returns ({name: float64 array}, trainer)."""
    mx.random.seed(0)
    net = MixedNet(sparse_grad, prefix="mixed_")
    net.initialize(mx.init.Xavier())
    trainer = make_trainer(net)
    rs = np.random.RandomState(3)
    for _ in range(steps):
        tokens = nd.array(rs.randint(0, 20, size=(4, 5)))
        with autograd.record():
            loss = ((net(tokens) - 1.0) ** 2).mean()
        loss.backward()
        trainer.step(4)
    return {k: p.data().asnumpy().astype(np.float64) for k, p in net.collect_params().items()}, trainer


def paths(trainer) -> dict:
    """name -> the ``update`` column of ``explain()``."""
    return {name: row["update"] for name, row in trainer.explain().to_dict().items()}


class TestStockPathForWhatKernelsCannotTake:
    """float16 without multi_precision and sparse gradients go to the stock Updater, silently and exactly."""

    @pytest.mark.parametrize("name, hyper", [("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
                                             ("adam", {"learning_rate": 0.01, "wd": 1e-3})])
    @pytest.mark.filterwarnings("ignore:Accumulating with float16")
    def test_float16_and_sparse_beside_compiled(self, name, hyper):
        """Sparse embedding gradient and a float16 weight (no multi_precision) beside a float32 Dense: the stock
        trainer's weights; the paths say which parameter went where."""
        stock, _ = train_mixed(lambda net: gluon.Trainer(net.collect_params(), name, dict(hyper)), True)
        fast, trainer = train_mixed(lambda net: LrTrainer(net, name, dict(hyper)), True)
        worst = max((float(np.abs(stock[k] - fast[k]).max()), k) for k in stock)
        assert worst[0] == 0.0, f"{worst[1]} differs by {worst[0]:.3g}"
        assert paths(trainer) == {"mixed_embed_weight": "stock:sparse", "mixed_dense_weight": "compiled",
                                  "mixed_dense_bias": "compiled", "mixed_scale": "stock:float16"}
        assert set(trainer.fused_params) == {"mixed_dense_weight", "mixed_dense_bias"}
        assert not np.array_equal(fast["mixed_scale"], np.ones(3))

    def test_float16_with_multi_precision_takes_fast_path(self):
        """The same float16 weight with multi_precision=True: MXNet's multi-precision operators on the fast path."""
        hyper = {"learning_rate": 0.1, "momentum": 0.9, "multi_precision": True}
        stock, _ = train_mixed(lambda net: gluon.Trainer(net.collect_params(), "sgd", dict(hyper)), False)
        fast, trainer = train_mixed(lambda net: LrTrainer(net, "sgd", dict(hyper)), False)
        assert all(np.array_equal(stock[k], fast[k]) for k in stock)
        assert paths(trainer)["mixed_scale"] == "mxnet-ops" and paths(trainer)["mixed_embed_weight"] == "compiled"


def _mlp():
    """A seeded two-layer MLP, initialized."""
    mx.random.seed(0)
    net = gluon.nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(gluon.nn.Dense(4, in_units=3, prefix="d0_"), gluon.nn.Dense(2, in_units=4, prefix="d1_"))
    net.initialize(mx.init.Xavier())
    return net


def _deferred():
    """An MLP whose first layer waits for deferred initialization."""
    net = gluon.nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(gluon.nn.Dense(4, prefix="d0_"), gluon.nn.Dense(2, in_units=4, prefix="d1_"))
    net.initialize(mx.init.Xavier())
    return net


def _frozen(trainer):
    trainer.freeze("mlp_d0_*")
    return trainer


PATHS = [  # (description, trainer factory, name, expected path)
    ("sgd-momentum on CPU", lambda: LrTrainer(_mlp(), "sgd", {"momentum": 0.9}), "mlp_d0_weight", "compiled"),
    ("nag", lambda: LrTrainer(_mlp(), "nag", {"momentum": 0.9}), "mlp_d1_bias", "compiled"),
    ("rmsprop: MXNet's operator", lambda: LrTrainer(_mlp(), "rmsprop"), "mlp_d0_weight", "mxnet-ops"),
    ("adagrad: MXNet's expressions", lambda: LrTrainer(_mlp(), "adagrad"), "mlp_d1_weight", "mxnet-ops"),
    ("frozen: not updated", lambda: _frozen(LrTrainer(_mlp(), "adam")), "mlp_d0_bias", "none"),
    ("frozen beside trainable", lambda: _frozen(LrTrainer(_mlp(), "adam")), "mlp_d1_weight", "compiled"),
    ("fused=False", lambda: LrTrainer(_mlp(), "adam", fused=False), "mlp_d0_weight", "stock:fused=False"),
    ("optimizer without kernel", lambda: LrTrainer(_mlp(), "adamax"), "mlp_d0_weight", "stock:optimizer=adamax"),
    ("kvstore updates", lambda: LrTrainer(_mlp(), "sgd", kvstore="device", update_on_kvstore=True),
     "mlp_d1_weight", "stock:update_on_kvstore"),
    ("deferred initialization", lambda: LrTrainer(_deferred(), "sgd"), "mlp_d0_weight", "stock:uninitialized"),
    ("initialized beside deferred", lambda: LrTrainer(_deferred(), "sgd"), "mlp_d1_weight", "compiled"),
    ("lr scheduler, unequal counts", lambda: _unequal_counts(), "mlp_d1_weight", "stock:lr-scheduler"),
]


def _unequal_counts():
    """An sgd trainer with a scheduler whose parameters have different update counts (d0 frozen for one step)."""
    net = _mlp()
    trainer = LrTrainer(net, "sgd", {"lr_scheduler": mx.lr_scheduler.FactorScheduler(2, 0.5)})
    trainer.freeze("mlp_d0_*")
    with autograd.record():
        loss = net(nd.ones((1, 3))).sum()
    loss.backward()
    trainer.step(1)
    trainer.unfreeze("mlp_d0_*")
    return trainer


class TestPaths:
    """explain()'s update column names each parameter's path before and after steps."""

    @pytest.mark.parametrize("description, make, name, path", PATHS, ids=[row[0] for row in PATHS])
    def test_path(self, description, make, name, path):
        """The path explain() reports, as in the table."""
        assert paths(make())[name] == path

    def test_table_text_and_fused_params_agree(self):
        """The printed table has the update column; fused_params lists exactly the parameters on a fast path."""
        trainer = _frozen(LrTrainer(_mlp(), "adam"))
        lines = {line.split()[0]: line for line in str(trainer.explain()).splitlines()[2:]}
        assert " compiled " in lines["mlp_d1_weight"] and " none " in lines["mlp_d0_weight"]
        assert set(trainer.fused_params) == {"mlp_d1_weight", "mlp_d1_bias"}

    def test_without_numba_both_implementations_are_timed(self, monkeypatch):
        """numba missing: float32 adam shows 'numpy|mxnet-ops' until both were timed, then the one kept."""
        monkeypatch.setitem(sys.modules, "numba", None)
        monkeypatch.delitem(sys.modules, "mxupdate.kernels", raising=False)
        net = _mlp()
        with pytest.warns(UserWarning, match="compiled update kernels need numba"):
            trainer = LrTrainer(net, "adam", rules=[Rule("mlp_d1_*", lr_mult=0.5)])
            before = paths(trainer)["mlp_d0_weight"]
        for _ in range(4):
            with autograd.record():
                loss = net(nd.ones((2, 3))).sum()
            loss.backward()
            trainer.step(2)
        assert before == "numpy|mxnet-ops" and paths(trainer)["mlp_d0_weight"] in ("numpy", "mxnet-ops")
