"""The fast path on convolutional networks (CPU): every parameter, convolution weights included, updated by the compiled
kernels, bit-identical to the stock trainer (tolerance 0), with an inference forward between backward and step.

MXNet built with MKLDNN (the pip build) reorders a convolution's weight array in place into a blocked layout during an
inference forward (autograd not recording). The fast path keeps every weight in its own array and asks MXNet for
each array's address at every step, which brings a reordered weight back to the default layout first
(``TestMKLDNNLayout``). The inference forward sits between ``backward`` and ``step``, so the weights are in MKLDNN's
layout when the update reads them; the stock runs have no such forward, so equality also shows it changed nothing.
"""
import numpy as np
import pytest
import mxnet as mx
from mxnet import autograd, gluon, nd
from mxnet.gluon.model_zoo import vision

from gluon_lr import LrTrainer, Rule
from gluon_lr._fused.base import data_pointers

MKLDNN = mx.runtime.Features().is_enabled("MKLDNN")
STEPS = 6


def assert_same(stock: list, fast: list, names: list, context: str = "") -> None:
    """Every array finite and equal bit for bit; the failure names the parameter and the largest difference."""
    broken = [name for a, b, name in zip(stock, fast, names) if not (np.isfinite(a).all() and np.isfinite(b).all())]
    assert broken == [], f"{context}training diverged (NaN or inf) in {broken[:5]}: the comparison means nothing"
    worst = max((float(np.abs(a - b).max()), name) for a, b, name in zip(stock, fast, names))
    assert worst[0] == 0.0, f"{context}{worst[1]} differs from the stock trainer by {worst[0]:.3g}"


def compiled_everywhere(trainer) -> dict:
    """name -> update path of the parameters whose path is not the compiled kernels (``none`` excepted)."""
    return {name: row["update"] for name, row in trainer.explain().to_dict().items()
            if row["update"] not in ("compiled", "none")}


class TestMKLDNNLayout:
    """How the fast path reads a weight that MKLDNN reordered (``gluon_lr._fused.base.data_pointers``)."""

    @pytest.mark.skipif(not MKLDNN, reason="only MXNet's MKLDNN (oneDNN) convolution reorders weights in place")
    def test_inference_forward_reorders_weight_in_place(self):
        """MXNet's behaviour: after an inference forward the weight's memory no longer holds its row-major values."""
        conv = gluon.nn.Conv2D(16, 3, in_channels=16)  # 16 channels: the blocked layout has the same size
        conv.initialize(mx.init.Xavier())
        weight = conv.weight.data()
        values = weight.asnumpy().ravel()
        address = data_pointers([weight])[0]
        conv(nd.ones((1, 16, 6, 6))).wait_to_read()
        nd.waitall()
        raw = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * weight.size).from_address(address)).copy()
        assert not np.array_equal(raw, values), "the weight kept its layout: MKLDNN no longer reorders in place"
        assert np.array_equal(weight.asnumpy().ravel(), values)

    @pytest.mark.parametrize("channels", [16, 5], ids=["same-size", "padded"])
    def test_data_pointers_give_the_default_layout(self, channels):
        """After an inference forward, the memory at the address data_pointers returns holds the row-major values,
        also where the blocked layout is padded (5 output channels)."""
        conv = gluon.nn.Conv2D(channels, 3, in_channels=16)
        conv.initialize(mx.init.Xavier())
        values = conv.weight.data().asnumpy().ravel()
        conv(nd.ones((1, 16, 6, 6))).wait_to_read()
        nd.waitall()
        weight = conv.weight.data()
        address = data_pointers([weight])[0]
        raw = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * weight.size).from_address(address)).copy()
        assert np.array_equal(raw, values)


def _zoo_net(model: str):
    """A seeded model-zoo network, 10 classes, Xavier init."""
    mx.random.seed(0)
    net = getattr(vision, model)(classes=10)
    net.initialize(mx.init.Xavier())
    return net


def _head(name: str) -> bool:
    """Whether a parameter belongs to the classifier head (resnet's dense layer, mobilenet's output convolution)."""
    return "dense" in name or "output" in name


def _train_zoo(model: str, hybridize: bool, make_trainer, validate: bool) -> tuple:
    """6 steps on 2 seeded 32x32 images; with ``validate`` an inference forward after each backward. Returns the
    parameters (weights and running statistics) after each step, the names, and the trainer."""
    net = _zoo_net(model)
    trainer = make_trainer(net)
    if hybridize:
        net.hybridize()
    rs = np.random.RandomState(1)
    x, y = nd.array(rs.normal(size=(2, 3, 32, 32))), nd.array([1, 7])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    history = []
    for _ in range(STEPS):
        with autograd.record():
            loss = loss_fn(net(x), y).sum()
        loss.backward()
        if validate:
            net(x).wait_to_read()
        trainer.step(2)
        history.append([p.data().asnumpy() for p in net.collect_params().values()])
    return history, list(net.collect_params().keys()), trainer


def _stock_zoo(name, hyper):
    """gluon.Trainer with the fine-tuning multipliers on the Parameters: backbone lr_mult 0.1, head 1."""
    def make(net):
        for key, param in net.collect_params().items():
            param.lr_mult = 1.0 if _head(key) else 0.1
        return gluon.Trainer(net.collect_params(), name, dict(hyper))
    return make


def _fast_zoo(name, hyper):
    """LrTrainer with the same multipliers as rules."""
    return lambda net: LrTrainer(net, name, dict(hyper), rules=[Rule("*", lr_mult=0.1), Rule("*dense*", lr_mult=1.0)]
                                 if "resnet" in net.prefix else [Rule("*", lr_mult=0.1), Rule("*output*", lr_mult=1.0)])


ZOO = [("resnet50_v1", True, "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}),
       ("resnet50_v1", False, "adam", {"learning_rate": 1e-3, "wd": 1e-4}),
       ("mobilenet_v2_1_0", True, "adam", {"learning_rate": 1e-3, "wd": 1e-4, "clip_gradient": 1.0}),
       ("mobilenet_v2_1_0", False, "nag", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4})]


class TestZooNets:
    """resnet50_v1 and mobilenet_v2_1.0, hybridized and not: the stock trainer's weights and statistics bit for bit."""

    @pytest.mark.parametrize("model, hybridize, name, hyper", ZOO,
                             ids=[f"{m}-{'hybrid' if h else 'imperative'}-{n}" for m, h, n, _ in ZOO])
    def test_six_steps_with_inference_forwards(self, model, hybridize, name, hyper):
        """After each of 6 steps (inference forward between backward and step on the fast path only), every
        parameter equals the stock trainer's; every trainable parameter takes the compiled kernels."""
        stock, names, _ = _train_zoo(model, hybridize, _stock_zoo(name, hyper), validate=False)
        fast, _, trainer = _train_zoo(model, hybridize, _fast_zoo(name, hyper), validate=True)
        for step, (want, got) in enumerate(zip(stock, fast), 1):
            assert_same(want, got, names, f"{model} {name}, step {step}: ")
        assert compiled_everywhere(trainer) == {}
        convolutions = [n for n, row in trainer.explain().to_dict().items() if len(row["shape"]) == 4]
        assert convolutions and set(convolutions) <= set(trainer.fused_params)


# ---------------------------------------------------------------------------------------- a small CNN, combined
class SmallCNN(gluon.nn.HybridBlock):
    """Convolution, BatchNorm, depthwise convolution (8 channels: MKLDNN pads their blocked layouts), 1x1
    convolution, Dense; optionally a float16 per-class scale (for multi_precision)."""

    def __init__(self, float16_scale: bool = False, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv0 = gluon.nn.Conv2D(8, 3, padding=1, in_channels=3, prefix="conv0_")
            self.bn0 = gluon.nn.BatchNorm(in_channels=8, prefix="bn0_")
            self.dw = gluon.nn.Conv2D(8, 3, padding=1, groups=8, in_channels=8, prefix="dw_")
            self.conv1 = gluon.nn.Conv2D(16, 1, in_channels=8, prefix="conv1_")
            self.dense = gluon.nn.Dense(4, in_units=16, prefix="dense_")
            self.scale = self.params.get("scale", shape=(4,), dtype="float16", init=mx.init.One()) \
                if float16_scale else None

    def hybrid_forward(self, F, x, scale=None):
        x = self.conv1(self.dw(F.relu(self.bn0(self.conv0(x)))))
        out = self.dense(F.mean(x, axis=(2, 3)))
        return out if scale is None else F.broadcast_mul(out, F.cast(scale, "float32").reshape((1, -1)))


def small_cnn(float16_scale: bool = False):
    """A seeded, hybridized SmallCNN."""
    mx.random.seed(0)
    net = SmallCNN(float16_scale, prefix="cnn_")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def train_small(make_trainer, at_step=None, steps: int = STEPS, validate: bool = True, float16_scale=False) -> tuple:
    """Train a fresh SmallCNN; ``at_step(step, trainer, net)`` runs before each step's forward; with ``validate`` an
    inference forward after each backward. Returns ([numpy arrays after the last step], names, trainer)."""
    net = small_cnn(float16_scale)
    trainer = make_trainer(net)
    rs = np.random.RandomState(2)
    for step in range(steps):
        if at_step is not None:
            at_step(step, trainer, net)
        x = nd.array(rs.normal(size=(4, 3, 8, 8)))
        with autograd.record():
            loss = ((net(x) - 1.0) ** 2).mean()
        loss.backward()
        if validate:
            net(x).wait_to_read()
        trainer.step(4)
    params = net.collect_params()
    return [p.data().asnumpy().astype(np.float64) for p in params.values()], list(params.keys()), trainer


OPTIMIZERS = [("sgd", {"learning_rate": 0.1, "wd": 1e-3}),
              ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3, "clip_gradient": 0.1}),
              ("nag", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
              ("adam", {"learning_rate": 0.01, "wd": 1e-3})]


class TestSmallCNN:
    """The small CNN with inference forwards: each optimizer and each feature users combine with the fast path."""

    @pytest.mark.parametrize("name, hyper", OPTIMIZERS, ids=[f"{n}-{len(h)}" for n, h in OPTIMIZERS])
    def test_optimizer_equals_stock(self, name, hyper):
        """sgd, sgd-momentum with clipping, nag and adam: the stock trainer's weights, every parameter compiled."""
        stock, names, _ = train_small(lambda net: gluon.Trainer(net.collect_params(), name, dict(hyper)),
                                      validate=False)
        fast, _, trainer = train_small(lambda net: LrTrainer(net, name, dict(hyper)))
        assert_same(stock, fast, names)
        assert compiled_everywhere(trainer) == {} and len(trainer.fused_params) == 10

    def test_arrays_are_never_replaced(self):
        """Parameters keep their weight and gradient arrays (no views into shared buffers), and those arrays are
        the ones updated."""
        net = small_cnn()
        trainer = LrTrainer(net, "adam", {"learning_rate": 0.01})
        params = [p for p in net.collect_params().values() if p.grad_req != "null"]
        before = [(p.data(), p.grad(), p.data().asnumpy()) for p in params]
        for _ in range(2):
            with autograd.record():
                loss = (net(nd.ones((2, 3, 8, 8))) ** 2).sum()
            loss.backward()
            net(nd.ones((2, 3, 8, 8))).wait_to_read()
            trainer.step(2)
        assert all(p.data() is data and p.grad() is grad for p, (data, grad, _) in zip(params, before))
        assert all(not np.array_equal(p.data().asnumpy(), value) for p, (_, _, value) in zip(params, before))

    def test_lr_mult_groups_change_mid_run(self):
        """Rules give three lr groups; set_lr_mult/set_wd_mult at step 3 move parameters between them: stock
        results, where stock gets the same values on the Parameters."""
        hyper = {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3}
        first = {"cnn_conv0_weight": 0.1, "cnn_conv0_bias": 0.1, "cnn_dw_weight": 0.5, "cnn_dw_bias": 0.5}
        later = ({"cnn_dw_weight": 2.0, "cnn_dense_weight": 0.0}, {"cnn_conv1_weight": 0.0})

        def stock_change(step, trainer, net):
            params = net.collect_params()
            for name, value in (first.items() if step == 0 else later[0].items() if step == 3 else ()):
                params[name].lr_mult = value
            for name, value in (later[1].items() if step == 3 else ()):
                params[name].wd_mult = value

        def fast_change(step, trainer, net):
            if step == 3:
                trainer.set_lr_mult(later[0])
                trainer.set_wd_mult(later[1])

        rules = [Rule("cnn_conv0_*", lr_mult=0.1), Rule("cnn_dw_*", lr_mult=0.5)]
        stock, names, _ = train_small(lambda net: gluon.Trainer(net.collect_params(), "sgd", dict(hyper)),
                                      stock_change, validate=False)
        fast, _, trainer = train_small(lambda net: LrTrainer(net, "sgd", dict(hyper), rules=rules), fast_change)
        assert_same(stock, fast, names)
        assert trainer.lr_mult["cnn_dw_weight"] == 2.0 and compiled_everywhere(trainer) == {}

    def test_freeze_mask_unfreeze_mid_run(self):
        """conv0 frozen at step 1 and unfrozen at step 4, an element mask on the depthwise weight from step 2: the
        stock loop's results (``fused=False``); frozen values unchanged while frozen."""
        mask = (np.arange(72).reshape(8, 1, 3, 3) % 3 == 0).astype(np.float32)
        seen = {}

        def schedule(step, trainer, net):
            if step == 1:
                trainer.freeze(["cnn_conv0_weight", "cnn_conv0_bias"])
            if step == 2:
                trainer.freeze("cnn_dw_weight", mask=mask)
                seen["dw"] = net.collect_params()["cnn_dw_weight"].data().asnumpy()
            if step == 3:
                seen["conv0"] = net.collect_params()["cnn_conv0_weight"].data().asnumpy()
            if step == 4:
                assert np.array_equal(net.collect_params()["cnn_conv0_weight"].data().asnumpy(), seen["conv0"])
                trainer.unfreeze(["cnn_conv0_weight", "cnn_conv0_bias"])

        hyper = {"learning_rate": 0.01, "wd": 1e-3}
        stock, names, _ = train_small(lambda net: LrTrainer(net, "adam", dict(hyper), fused=False), schedule)
        fast, _, trainer = train_small(lambda net: LrTrainer(net, "adam", dict(hyper)), schedule)
        assert_same(stock, fast, names)
        dw = fast[names.index("cnn_dw_weight")].reshape(mask.shape)
        assert np.array_equal(dw[mask == 1], seen["dw"][mask == 1]) and not np.array_equal(dw, seen["dw"])
        assert compiled_everywhere(trainer) == {} and trainer.masked_elements == {"cnn_dw_weight": 24}

    def test_save_load_states_mid_run(self, tmp_path):
        """States and weights saved at step 3, two more steps, both rewound, three more: the stock loop's results."""
        def run(fused):
            saved = {}

            def rewind(step, trainer, net):
                if step == 3:
                    trainer.save_states(str(tmp_path / f"{fused}.states"))
                    saved["weights"] = {k: p.data().copy() for k, p in net.collect_params().items()}
                if step == 5:
                    trainer.load_states(str(tmp_path / f"{fused}.states"))
                    for k, p in net.collect_params().items():
                        p.set_data(saved["weights"][k])
            return train_small(lambda net: LrTrainer(net, "adam", {"learning_rate": 0.01, "wd": 1e-3}, fused=fused),
                               rewind, steps=8)

        stock, names, _ = run(False)
        fast, _, trainer = run(True)
        assert_same(stock, fast, names)
        assert compiled_everywhere(trainer) == {}

    @pytest.mark.parametrize("name, hyper", [("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
                                             ("adam", {"learning_rate": 0.01, "wd": 1e-3})])
    def test_multi_precision(self, name, hyper):
        """multi_precision=True with float32 convolutions and a float16 parameter: the float32 parameters take the
        compiled kernels, the float16 one MXNet's multi-precision operators on its float32 master copy; stock
        results."""
        hyper = dict(hyper, multi_precision=True)
        stock, names, _ = train_small(lambda net: gluon.Trainer(net.collect_params(), name, dict(hyper)),
                                      validate=False, float16_scale=True)
        fast, _, trainer = train_small(lambda net: LrTrainer(net, name, dict(hyper)), float16_scale=True)
        assert_same(stock, fast, names)
        assert compiled_everywhere(trainer) == {"cnn_scale": "mxnet-ops"}
        assert not np.array_equal(fast[names.index("cnn_scale")], np.ones(4))
