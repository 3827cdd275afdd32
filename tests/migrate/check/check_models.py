"""Small paired models for ``migrate.check_training``: a conv net with BatchNorm and padded average pooling, and an
MLP, each with a torch twin whose one setting can be made wrong; settings and states from one LrTrainer step."""
import os
import tempfile

import mxnet as mx
import numpy as np
import torch
from mxnet import autograd
from mxnet.gluon import nn

import gluon_lr

BATCH = 4
CONV_SHAPE = (BATCH, 3, 4, 4)
MLP_SHAPE = (BATCH, 6)


class MxConvNet(nn.HybridBlock):
    """conv-bn-relu, a 3x3 average pooling over padding (MXNet counts the padded zeros), conv-bn-relu, pool, dense."""

    def __init__(self, scale=True, **kw):
        super().__init__(**kw)
        self.conv1 = nn.Conv2D(8, 3, padding=1, use_bias=False, in_channels=3, prefix="conv1_")
        self.bn1 = nn.BatchNorm(in_channels=8, scale=scale, prefix="bn1_")  # scale=False: MXNet's fix_gamma=True
        self.pool = nn.AvgPool2D(3, strides=1, padding=1)
        self.conv2 = nn.Conv2D(8, 3, padding=1, use_bias=False, in_channels=8, prefix="conv2_")
        self.bn2 = nn.BatchNorm(in_channels=8, prefix="bn2_")
        self.fc = nn.Dense(5, in_units=8, prefix="fc_")

    def hybrid_forward(self, F, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(F.contrib.AdaptiveAvgPooling2D(x, output_size=1).flatten())


class TorchConvNet(torch.nn.Module):
    """The twin of ``MxConvNet`` (stock torch layers); each argument can make one setting differ from MXNet's."""

    def __init__(self, momentum=0.1, eps2=1e-5, count_include_pad=True):
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8,
                                                                                                     momentum=momentum)
        self.pool = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=count_include_pad)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8, eps=eps2, momentum=momentum)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def mx_mlp():
    """Dense(6 -> 12, tanh) -> Dense(12 -> 10, tanh) -> Dense(10 -> 4), seeded, prefixes mlp_fcK_."""
    mx.random.seed(2)
    net = nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        for i, (units, act) in enumerate([(12, "tanh"), (10, "tanh"), (4, None)]):
            net.add(nn.Dense(units, in_units=(6, 12, 10)[i], activation=act, prefix=f"fc{i}_"))
    net.initialize(mx.init.Xavier(magnitude=2.0))
    rng = np.random.default_rng(2)
    for name, param in net.collect_params().items():
        if name.endswith("bias"):
            param.set_data(mx.nd.array(rng.normal(0.0, 0.3, param.shape)))
    return net


def torch_mlp():
    """The twin of ``mx_mlp``: ``torch.nn.Sequential`` of Linear and Tanh."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 10), torch.nn.Tanh(),
                               torch.nn.Linear(10, 4))


def gluon_conv_net(scale=True):
    """An initialized ``MxConvNet`` with seeded weights and BatchNorm statistics away from 0 and 1."""
    mx.random.seed(0)
    net = MxConvNet(scale=scale)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    rng = np.random.default_rng(0)
    for name, param in net.collect_params().items():
        if name.endswith(("running_var", "gamma")):
            param.set_data(mx.nd.array(rng.uniform(0.5, 1.5, param.shape)))
        elif name.endswith(("running_mean", "beta", "bias")):
            param.set_data(mx.nd.array(rng.normal(0.0, 0.3, param.shape)))
    return net


def trained_once(net, shape, optimizer, params, rules=(), freeze=None):
    """One LrTrainer step (summed squared loss, ``trainer.step(BATCH)``) on a seeded batch; returns (settings
    document, states bytes): rescale_grad is then 1/BATCH, and the states hold the step."""
    trainer = gluon_lr.LrTrainer(net, optimizer, params, rules=list(rules), kvstore=None)
    if freeze:
        trainer.freeze(freeze)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    with autograd.record():
        loss = (net(mx.nd.array(x)) ** 2).sum()
    loss.backward()
    trainer.step(shape[0])
    with tempfile.TemporaryDirectory() as folder:
        trainer.export_settings(os.path.join(folder, "settings.json"))
        trainer.save_states(os.path.join(folder, "trainer.states"))
        with open(os.path.join(folder, "trainer.states"), "rb") as handle:
            states = handle.read()
        return gluon_lr.load_settings(os.path.join(folder, "settings.json")), states


class MxPReLUNet(nn.HybridBlock):
    """conv-bn-PReLU (4 slopes at 0.25) -> dense: the net of MXNet's PReLU gradient bug (insightface's blocks)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.conv = nn.Conv2D(4, 3, padding=1, in_channels=3, prefix="conv_")
        self.bn = nn.BatchNorm(in_channels=4, prefix="bn_")
        self.act = nn.PReLU(alpha_initializer=mx.init.Constant(0.25), in_channels=4, prefix="prelu_")
        self.fc = nn.Dense(5, in_units=4 * 4 * 4, prefix="fc_")

    def hybrid_forward(self, F, x):
        return self.fc(self.act(self.bn(self.conv(x))))


class TorchPReLUNet(torch.nn.Module):
    """The twin of ``MxPReLUNet``."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
        self.act, self.fc = torch.nn.PReLU(4, 0.25), torch.nn.Linear(64, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.act(self.bn(self.conv(x))), 1))


def gluon_prelu_net():
    """An initialized, seeded ``MxPReLUNet``."""
    mx.random.seed(0)
    net = MxPReLUNet()
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros(CONV_SHAPE))
    return net


class MxDropoutMLP(nn.HybridBlock):
    """Dense(6 -> 12, tanh) -> Dropout(0.5) -> Dense(12 -> 4)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.fc0 = nn.Dense(12, in_units=6, activation="tanh", prefix="fc0_")
            self.drop = nn.Dropout(0.5, prefix="dropout_")
            self.fc1 = nn.Dense(4, in_units=12, prefix="fc1_")

    def hybrid_forward(self, F, x):
        return self.fc1(self.drop(self.fc0(x)))


class TorchDropoutMLP(torch.nn.Module):
    """The twin of ``MxDropoutMLP``: its dropout a ``torch.nn.Dropout`` module, or (``functional``) a call of
    ``F.dropout`` in ``forward``, as generated modules and many hand-written models drop."""

    def __init__(self, functional=False):
        super().__init__()
        self.fc0, self.fc1, self.functional = torch.nn.Linear(6, 12), torch.nn.Linear(12, 4), functional
        self.drop = None if functional else torch.nn.Dropout(0.5)

    def forward(self, x):
        x = torch.tanh(self.fc0(x))
        x = torch.nn.functional.dropout(x, 0.5, self.training) if self.functional else self.drop(x)
        return self.fc1(x)


def gluon_dropout_mlp():
    """An initialized, seeded ``MxDropoutMLP``."""
    mx.random.seed(4)
    net = MxDropoutMLP(prefix="drop_")
    net.initialize(mx.init.Xavier(magnitude=2.0))
    return net
