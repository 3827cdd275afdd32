"""The fast path against MXNet's MKLDNN convolution: an inference forward (autograd not recording)
reorders a convolution weight in place, and on a view into a flat buffer it reordered the whole buffer, corrupting
every parameter packed there (found: conv weights and their neighbours changed by a validation forward, training
then diverged by 3e27, and ``net.export`` failed with "Check failed: !is_view"). No parameter is a view now: every
weight keeps its own array and the compiled kernels walk a table of per-tensor addresses, each asked of MXNet at the
step, which brings a reordered weight back to the default layout first; convolution weights are on the fast path."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_lr import LrTrainer


def _net(kind, seed=0):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        if kind == "conv2d":
            net.add(gluon.nn.Conv2D(8, 3, in_channels=3), gluon.nn.BatchNorm(in_channels=8),
                    gluon.nn.Conv2D(5, 3, in_channels=8), gluon.nn.Flatten(), gluon.nn.Dense(4, in_units=20))
        elif kind == "conv1d":
            net.add(gluon.nn.Conv1D(6, 3, in_channels=3), gluon.nn.Flatten(), gluon.nn.Dense(4, in_units=48))
        else:  # deconvolution
            net.add(gluon.nn.Conv2DTranspose(4, 3, in_channels=3), gluon.nn.Flatten(), gluon.nn.Dense(4, in_units=256))
    net.initialize(mx.init.Xavier())
    return net


_INPUT = {"conv2d": (2, 3, 6, 6), "conv1d": (2, 3, 10), "deconv": (2, 3, 6, 6)}


def _weights(net):
    return {k: p.data().asnumpy().copy() for k, p in net.collect_params().items()}


def _train(kind, make_trainer, hybridize, validate):
    """3 steps; with ``validate`` an inference forward before training and after each step."""
    net = _net(kind)
    trainer = make_trainer(net)
    if hybridize:
        net.hybridize()
    rng = np.random.RandomState(0)
    x = mx.nd.array(rng.randn(*_INPUT[kind]))
    for _ in range(3):
        if validate:
            net(x).wait_to_read()
        with autograd.record():
            loss = (net(x) ** 2).sum()
        loss.backward()
        trainer.step(2)
    if validate:
        net(x).wait_to_read()
    return net, trainer


@pytest.mark.parametrize("kind", list(_INPUT))
@pytest.mark.parametrize("hybridize", [False, True])
def test_inference_forward_leaves_every_weight(kind, hybridize):
    """A trainer built, then inference forwards: every parameter reads as before, bit for bit."""
    net = _net(kind)
    LrTrainer(net, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    if hybridize:
        net.hybridize()
    before = _weights(net)
    for _ in range(2):
        net(mx.nd.ones(_INPUT[kind])).wait_to_read()
    after = _weights(net)
    assert [k for k in before if not np.array_equal(before[k], after[k])] == []


@pytest.mark.parametrize("optimizer, hyper", [("sgd", {"learning_rate": 0.05, "momentum": 0.9}),
                                              ("adam", {"learning_rate": 0.01})])
@pytest.mark.parametrize("kind", list(_INPUT))
def test_training_with_validation_equals_stock(kind, optimizer, hyper, tmp_path):
    """3 steps with a validation forward around each: the fast path equals gluon.Trainer bit for bit (as without the
    forwards), every parameter (convolution weights included) is on the fast path, and the net exports."""
    stock, _ = _train(kind, lambda n: gluon.Trainer(n.collect_params(), optimizer, dict(hyper)), True, True)
    fast, trainer = _train(kind, lambda n: LrTrainer(n, optimizer, dict(hyper)), True, True)
    plain, _ = _train(kind, lambda n: LrTrainer(n, optimizer, dict(hyper)), True, False)
    expected, got, unvalidated = _weights(stock), _weights(fast), _weights(plain)
    for name in expected:
        assert np.array_equal(expected[name], got[name]), f"{name} differs from gluon.Trainer"
        assert np.array_equal(unvalidated[name], got[name]), f"{name} moved by the validation forwards"
    trainable = {k for k, p in fast.collect_params().items() if p.grad_req != "null"}
    convolution_weights = {k for k in trainable if len(fast.collect_params()[k].shape) >= 3}
    assert convolution_weights and set(trainer.fused_params) == trainable
    fast.export(str(tmp_path / "net"))
    loaded = mx.nd.load(str(tmp_path / "net-0000.params"))
    assert all(np.array_equal(loaded[f"arg:{k}"].asnumpy(), got[k]) for k in got if f"arg:{k}" in loaded)
