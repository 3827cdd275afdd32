"""Tiny seeded models and a one-step training helper shared by the gluon_lr tests."""
import pickle

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

CPU2 = [mx.cpu(0), mx.cpu(1)]


def build_mlp(ctx=None, dtype="float32", seed=0, prefix="mlp_"):
    """Dense(4) -> BatchNorm -> Dense(2) on 3 inputs, initialised from ``seed`` (parameters sorted by name)."""
    mx.random.seed(seed)
    net = nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(nn.Dense(4, in_units=3), nn.BatchNorm(in_channels=4), nn.Dense(2, in_units=4))
    net.initialize(mx.init.Uniform(0.5), ctx=ctx or mx.cpu())
    if dtype != "float32":
        net.cast(dtype)
    return net


class _Scale(gluon.HybridBlock):
    """out = x * a + b: elementwise only, so it runs in float16 on CPU (FullyConnected does not)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.a = self.params.get("a", shape=(3,), init=mx.init.Uniform(0.5))
            self.b = self.params.get("b", shape=(3,), init=mx.init.Uniform(0.5))

    def hybrid_forward(self, F, x, a, b):
        return F.broadcast_add(F.broadcast_mul(x, a), b)


def build_scale(dtype="float32", seed=0):
    """Two elementwise layers s0 (a, b) and s1 (a, b), float16-capable, seeded."""
    mx.random.seed(seed)
    net = nn.HybridSequential(prefix="sc_")
    with net.name_scope():
        net.add(_Scale(prefix="s0_"), _Scale(prefix="s1_"))
    net.initialize()
    net.cast(dtype)
    return net


def build_kinds_net():
    """One of each layer kind: Embedding, Conv, depthwise Conv, BatchNorm, LayerNorm, InstanceNorm, GroupNorm, Dense."""
    net = nn.HybridSequential(prefix="k_")
    with net.name_scope():
        net.add(nn.Embedding(10, 4), nn.Conv2D(4, 3, in_channels=2), nn.Conv2D(4, 3, groups=4, in_channels=4),
                nn.BatchNorm(in_channels=4), nn.LayerNorm(in_channels=4), nn.InstanceNorm(in_channels=4),
                nn.GroupNorm(num_groups=2), nn.Dense(2, in_units=4))
    net.initialize()
    return net


def batch(ctx, seed=1, dtype="float32"):
    """A fixed (4, 3) input on ``ctx``."""
    data = np.random.RandomState(seed).uniform(-1, 1, size=(4, 3))
    return mx.nd.array(data, ctx=ctx, dtype=dtype)


def weights(net, ctx=None):
    """name -> numpy copy of every parameter on ``ctx`` (default: its first context)."""
    return {name: p.data(ctx or p.list_ctx()[0]).asnumpy().astype("float64")
            for name, p in net.collect_params().items()}


def train_step(net, trainer, ctxs, seed=1, dtype="float32"):
    """Forward/backward the same batch on every context, step, and return the gradients seen on the first."""
    with autograd.record():
        losses = [(net(batch(c, seed, dtype)) ** 2).sum() for c in ctxs]
    autograd.backward(losses)
    grads = {name: p.list_grad()[0].asnumpy().astype("float64")
             for name, p in net.collect_params().items() if p.grad_req != "null"}
    trainer.step(4)
    mx.nd.waitall()
    return grads


def assert_close(actual: dict, expected: dict, atol: float, what: str = ""):
    """Every array in ``expected`` matches ``actual`` within ``atol``; failure names the worst parameter."""
    worst = max(((float(np.abs(actual[k] - expected[k]).max()), k) for k in expected), default=(0.0, None))
    assert worst[0] <= atol, f"{what}: {worst[1]!r} differs by {worst[0]:.3g} > atol {atol}"


def effective_lrs(optimizer, indices, server=False) -> list:
    """The learning rate an SGD optimizer applies to each index, measured through its public updater.

    A copy of the optimizer (pickled, as a dist kvstore server receives it: without ``param_dict`` when
    ``server=True``) updates a zero weight with gradient 1, rescale 1 and wd 0; the first SGD step (momentum or
    not) is then exactly ``-lr * lr_mult``.
    """
    probe = pickle.loads(pickle.dumps(optimizer))
    if not server:
        probe.param_dict = optimizer.param_dict
    probe.rescale_grad, probe.wd = 1.0, 0.0
    updater = mx.optimizer.get_updater(probe)
    found = []
    for index in indices:
        weight = mx.nd.zeros((1,))
        updater(index, mx.nd.ones((1,)), weight)
        found.append(-float(weight.asscalar()))
    return found
