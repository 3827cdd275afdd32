"""Partially frozen layers: the unfrozen sibling (a bias) gets exactly the gradient and update it would get anyway.

MXNet 1.9.1's oneDNN FullyConnected backward writes the bias gradient only when the weight needs a gradient, so
``trainer.freeze('<dense>_weight')`` keeps that weight's gradient buffer and hides it from the update (see
``gluon_lr/freeze.py``). The reference here is a twin network that is never frozen: it trains every parameter and
gets the frozen weight's value written back after each step, so its bias follows the true trajectory. Optimizer
state and update counts are read from MXNet's Updater objects (no public accessor), as in ``test_freeze.py``.
"""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn

from gluon_lr import LrTrainer

from .test_freeze import assert_same, snapshot

OPTIMIZERS = {"sgd_momentum": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}),
              "adam": ("adam", {"learning_rate": 0.01, "wd": 0.01})}
MKLDNN = mx.runtime.Features().is_enabled("MKLDNN")


def build_net(ctx, seed=0):
    """Conv2D(3, 3x3) -> relu -> Dense(4) -> relu -> Dense(2) on (N, 2, 5, 5) inputs, seeded; prefix ``p_``."""
    mx.random.seed(seed)
    net = nn.HybridSequential(prefix="p_")
    with net.name_scope():
        net.add(nn.Conv2D(3, 3, in_channels=2, activation="relu"), nn.Dense(4, in_units=27, activation="relu"),
                nn.Dense(2, in_units=4))
    net.initialize(mx.init.Uniform(0.5), ctx=ctx)
    return net


def batches(n, seed=1):
    """``n`` fixed input batches of shape (4, 2, 5, 5)."""
    rng = np.random.RandomState(seed)
    return [rng.uniform(-1, 1, size=(4, 2, 5, 5)).astype(np.float32) for _ in range(n)]


def backward(net, data, ctx):
    """Forward in train mode and backward of sum(out ** 2), the batch split over ``ctx``."""
    parts = np.array_split(data, len(ctx))
    with autograd.record(train_mode=True):
        losses = [(net(nd.array(part, ctx=c)) ** 2).sum() for part, c in zip(parts, ctx)]
    for loss in losses:
        loss.backward()


def assert_equal_arrays(got, want, what):
    """Bit-exact equality, naming ``what`` and the largest difference on failure."""
    assert np.array_equal(got, want), f"{what}: max |diff| {np.abs(got - want).max():.3g}"


def assert_twins_equal(net, twin, what):
    """Every parameter of ``net`` equals its twin's, bit for bit, on every context."""
    for (name, param), other in zip(net.collect_params().items(), twin.collect_params().values()):
        for k, (got, want) in enumerate(zip(param.list_data(), other.list_data())):
            assert_equal_arrays(got.asnumpy(), want.asnumpy(), f"{what}: {name} on context {k}")


class TestPartialFreeze:
    """trainer.freeze of one parameter of a layer: the other parameters train exactly as in a never-frozen twin."""

    @pytest.mark.parametrize("opt", list(OPTIMIZERS))
    @pytest.mark.parametrize("hybrid", ["imperative", "hybridized", "static_alloc"])
    @pytest.mark.parametrize("layer", ["conv0", "dense0"])
    def test_sibling_gradient_and_update_match_never_frozen_twin(self, layer, hybrid, opt):
        """Frozen weight, live bias: bias gradient, every update and the frozen weight's state are exact."""
        self._check_against_twin(layer, hybrid, opt, n_ctx=1, update_on_kvstore=None)

    @pytest.mark.parametrize("update_on_kvstore", [False, True], ids=["workers", "kvstore"])
    def test_two_contexts(self, update_on_kvstore):
        """The same with two contexts, updating on the workers and on the kvstore (nothing pushed for the weight).

        On the kvstore the twin cannot have its weight written back (``set_data`` resets the kvstore and its
        states), so there it trains from the start with the weight's ``lr_mult`` 0, which under SGD with momentum
        leaves a weight exactly in place while its momentum starts at zero.
        """
        self._check_against_twin("dense0", "hybridized", "sgd_momentum", n_ctx=2, update_on_kvstore=update_on_kvstore,
                                 pre_steps=0 if update_on_kvstore else 1)

    @staticmethod
    def _check_against_twin(layer, hybrid, opt, n_ctx, update_on_kvstore, pre_steps=1):
        """Train ``pre_steps``, freeze ``<layer>_weight``, train 3 more; compare with the twin after each step."""
        ctx = [mx.cpu(i) for i in range(n_ctx)]
        name, kwargs = OPTIMIZERS[opt]
        nets = build_net(ctx), build_net(ctx)
        if hybrid != "imperative":
            for net in nets:
                net.hybridize(static_alloc=hybrid == "static_alloc", static_shape=hybrid == "static_alloc")
        kvstore = "device" if n_ctx > 1 else None
        net, twin = nets
        trainer, twin_trainer = (LrTrainer(n, name, dict(kwargs), kvstore=kvstore, update_on_kvstore=update_on_kvstore)
                                 for n in nets)
        data = batches(pre_steps + 3)
        weight, bias = f"p_{layer}_weight", f"p_{layer}_bias"
        if not pre_steps:
            twin_trainer.set_lr_mult({weight: 0.0})
        for x in data[:pre_steps]:
            for model, tr in ((net, trainer), (twin, twin_trainer)):
                backward(model, x, ctx)
                tr.step(len(x))
        trainer.freeze(weight)
        held, frozen_before = [a.copy() for a in twin.collect_params()[weight].list_data()], snapshot(trainer, [weight])
        for step, x in enumerate(data[pre_steps:]):
            what = f"{layer}/{hybrid}/{opt}/{n_ctx}ctx step {step}"
            backward(net, x, ctx)
            backward(twin, x, ctx)
            for k in range(n_ctx):
                want = twin.collect_params()[bias].grad(ctx[k]).asnumpy()
                assert np.abs(want).max() > 0, f"{what}: the twin's bias gradient is 0, the test would prove nothing"
                assert_equal_arrays(net.collect_params()[bias].grad(ctx[k]).asnumpy(), want, f"{what}: {bias} grad")
            trainer.step(len(x))
            twin_trainer.step(len(x))
            if pre_steps:
                twin.collect_params()[weight].set_data(held[0])
            assert_twins_equal(net, twin, what)
        assert_same(frozen_before, snapshot(trainer, [weight]), f"{layer}/{hybrid}/{opt}: frozen {weight}")


class TestGradReq:
    """Which frozen parameters keep a gradient buffer: only FullyConnected weights whose bias trains."""

    def test_grad_req_follows_the_bias(self):
        """conv weight: 'null'; dense weight: 'write' while its bias trains, 'null' once the bias is frozen too."""
        net = build_net([mx.cpu()])
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, kvstore=None)
        params = net.collect_params()
        trainer.freeze(["p_conv0_weight", "p_dense0_weight"])
        dense_req = "write" if MKLDNN else "null"
        assert (params["p_conv0_weight"].grad_req, params["p_dense0_weight"].grad_req) == ("null", dense_req)
        assert trainer.frozen == {"p_conv0_weight", "p_dense0_weight"}
        trainer.freeze("p_dense0_bias")
        assert (params["p_dense0_weight"].grad_req, params["p_dense0_bias"].grad_req) == ("null", "null")
        trainer.unfreeze("p_dense0_bias")
        assert (params["p_dense0_weight"].grad_req, params["p_dense0_bias"].grad_req) == (dense_req, "write")
        trainer.unfreeze("p_dense0_weight")
        assert params["p_dense0_weight"].grad_req == "write" and trainer.frozen == {"p_conv0_weight"}

    def test_settings_and_explain_show_the_kept_weight_frozen(self, tmp_path):
        """A frozen weight that keeps its gradient buffer is reported frozen in explain() and the settings file."""
        net = build_net([mx.cpu()])
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, kvstore=None)
        trainer.freeze("p_dense0_weight")
        document = trainer.export_settings(tmp_path / "settings.json")
        frozen = {name for name, record in document["params"].items() if record["frozen"]}
        assert frozen == {"p_dense0_weight"}, f"settings file marks {frozen} frozen"
        assert trainer.explain().to_dict()["p_dense0_weight"]["frozen"]


@pytest.mark.skipif(not MKLDNN, reason="the bug is in MXNet's oneDNN (MKLDNN) FullyConnected backward")
@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_mxnet_drops_dense_bias_gradient_when_weight_is_null(hybridize):
    """MXNet itself (no gluon_lr): weight grad_req='null' leaves the bias gradient at its old value [4, 4].

    If a later MXNet fixes this, this test fails: the workaround in ``gluon_lr/freeze.py`` can then go.
    """
    dense = gluon.nn.Dense(2, in_units=3)
    dense.initialize()
    if hybridize:
        dense.hybridize()
    x = mx.nd.ones((4, 3))
    with autograd.record():
        dense(x).sum().backward()
    dense.weight.grad_req = "null"
    with autograd.record():
        (dense(x) * 3).sum().backward()
    assert_equal_arrays(dense.bias.grad().asnumpy(), np.array([4.0, 4.0], np.float32), "stale bias gradient")
