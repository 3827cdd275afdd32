"""Small paired models (Gluon and torch) for the mapping tests, and torch factories the CLI test imports.

Each Gluon block gives its layers explicit prefixes so the expected names are known; each torch module declares
its layers in an order that differs from the order of use, so declaration order cannot be what maps them.
"""
import mxnet as mx
import numpy as np
import torch
from mxnet.gluon import nn

# ---------------------------------------------------------------- Gluon side


class MxResidual(nn.HybridBlock):
    """conv-bn-relu, then a residual block whose shortcut has its own conv+bn, then pool and dense."""

    def __init__(self, stride1=2, stride2=1, **kw):
        super().__init__(**kw)
        self.stem = nn.Conv2D(8, 3, padding=1, use_bias=False, in_channels=3, prefix="stem_")
        self.stem_bn = nn.BatchNorm(in_channels=8, prefix="stembn_")
        self.body1 = nn.Conv2D(8, 3, strides=stride1, padding=1, use_bias=False, in_channels=8, prefix="body1_")
        self.body1_bn = nn.BatchNorm(in_channels=8, prefix="body1bn_")
        self.body2 = nn.Conv2D(8, 3, strides=stride2, padding=1, use_bias=False, in_channels=8, prefix="body2_")
        self.body2_bn = nn.BatchNorm(in_channels=8, prefix="body2bn_")
        self.short = nn.Conv2D(8, 1, strides=stride1 * stride2, use_bias=False, in_channels=8, prefix="short_")
        self.short_bn = nn.BatchNorm(in_channels=8, prefix="shortbn_")
        self.fc = nn.Dense(5, in_units=8, prefix="fc_")

    def hybrid_forward(self, F, x):
        x = F.relu(self.stem_bn(self.stem(x)))
        body = self.body2_bn(self.body2(F.relu(self.body1_bn(self.body1(x)))))
        x = F.relu(self.short_bn(self.short(x)) + body)  # shortcut first: torch adds the body first
        return self.fc(F.contrib.AdaptiveAvgPooling2D(x, output_size=1).flatten())


class MxConcat(nn.HybridBlock):
    """Three conv branches of identical shape concatenated as concat(concat(a, b), c), then a 1x1 conv."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.a = nn.Conv2D(4, 3, padding=1, in_channels=3, prefix="a_")
        self.b = nn.Conv2D(4, 3, padding=1, in_channels=3, prefix="b_")
        self.c = nn.Conv2D(4, 3, padding=1, in_channels=3, prefix="c_")
        self.mix = nn.Conv2D(6, 1, in_channels=12, prefix="mix_")

    def hybrid_forward(self, F, x):
        return self.mix(F.concat(F.concat(self.a(x), self.b(x), dim=1), self.c(x), dim=1))


class MxDepthwise(nn.HybridBlock):
    """Depthwise 3x3 + BN + relu6, pointwise 1x1 with a bias folded into BN on the torch side, 1x1 conv head."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.dw = nn.Conv2D(6, 3, padding=1, groups=6, use_bias=False, in_channels=6, prefix="dw_")
        self.dw_bn = nn.BatchNorm(in_channels=6, prefix="dwbn_")
        self.pw = nn.Conv2D(10, 1, use_bias=True, in_channels=6, prefix="pw_")
        self.pw_bn = nn.BatchNorm(in_channels=10, prefix="pwbn_")
        self.head = nn.Conv2D(3, 1, use_bias=False, in_channels=10, prefix="head_")

    def hybrid_forward(self, F, x):
        x = F.clip(self.dw_bn(self.dw(x)), 0, 6)
        x = F.relu(self.pw_bn(self.pw(x)))
        return self.head(F.contrib.AdaptiveAvgPooling2D(x, output_size=1)).flatten()


class MxDenseStack(nn.HybridBlock):
    """Four Dense(16 -> 16) in a row with tanh, then Dropout and a Dense(16 -> 3) without bias."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.layers = [nn.Dense(16, in_units=16, activation="tanh", prefix=f"d{i}_") for i in range(4)]
        for i, layer in enumerate(self.layers):
            self.register_child(layer, f"d{i}")
        self.drop = nn.Dropout(0.5)
        self.out = nn.Dense(3, in_units=16, use_bias=False, prefix="out_")

    def hybrid_forward(self, F, x):
        for layer in self.layers:
            x = layer(x)
        return self.out(self.drop(x))


class MxEmbedding(nn.HybridBlock):
    """Embedding(20, 8) -> Dense(8 -> 6, flatten=False) -> flatten -> Dense(30 -> 4)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.emb = nn.Embedding(20, 8, prefix="emb_")
        self.proj = nn.Dense(6, in_units=8, flatten=False, prefix="proj_")
        self.out = nn.Dense(4, in_units=30, prefix="out_")

    def hybrid_forward(self, F, x):
        return self.out(F.relu(self.proj(self.emb(x))))


class MxExtraLayer(nn.HybridBlock):
    """conv -> conv -> dense: the torch twin has one more layer in the middle."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.c1 = nn.Conv2D(4, 3, padding=1, in_channels=3, prefix="c1_")
        self.c2 = nn.Conv2D(4, 3, padding=1, in_channels=4, prefix="c2_")
        self.fc = nn.Dense(2, in_units=4 * 8 * 8, prefix="fc_")

    def hybrid_forward(self, F, x):
        return self.fc(F.relu(self.c2(F.relu(self.c1(x)))))


class MxTwoInputs(nn.HybridBlock):
    """Two inputs: Dense(4 -> 5) on x and Dense(6 -> 5) on y, summed."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.fx = nn.Dense(5, in_units=4, prefix="fx_")
        self.fy = nn.Dense(5, in_units=6, prefix="fy_")

    def hybrid_forward(self, F, x, y):
        return self.fx(x) + self.fy(y)


def gluon(cls, *args, seed=0, **kw):
    """Return an initialized ``cls`` with seeded weights and perturbed BatchNorm statistics."""
    mx.random.seed(seed)
    net = cls(*args, **kw)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    rng = np.random.default_rng(seed)
    for p in net.collect_params().values():
        shape = p.shape
        if p.name.endswith(("running_var", "gamma")):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, shape)))
        elif p.name.endswith(("running_mean", "beta", "bias")):
            p.set_data(mx.nd.array(rng.normal(0.0, 0.3, shape)))
    return net


# ---------------------------------------------------------------- torch side


class TorchResidual(torch.nn.Module):
    """The twin of ``MxResidual``: body added first (unless ``body_first=False``), layers declared shortcut-first
    and fc before the stem."""

    def __init__(self, stride1=2, stride2=1, body_first=True):
        super().__init__()
        self.body_first = body_first
        self.fc = torch.nn.Linear(8, 5)
        self.short = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1, stride1 * stride2, bias=False),
                                         torch.nn.BatchNorm2d(8))
        self.conv2, self.bn2 = torch.nn.Conv2d(8, 8, 3, stride2, 1, bias=False), torch.nn.BatchNorm2d(8)
        self.conv1, self.bn1 = torch.nn.Conv2d(8, 8, 3, stride1, 1, bias=False), torch.nn.BatchNorm2d(8)
        self.stem, self.stem_bn = torch.nn.Conv2d(3, 8, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(8)

    def forward(self, x):
        x = torch.relu(self.stem_bn(self.stem(x)))
        body = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        x = torch.relu(body + self.short(x) if self.body_first else self.short(x) + body)
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


class TorchConcat(torch.nn.Module):
    """The twin of ``MxConcat`` with one flat ``torch.cat([a, b, c])``, branches declared c, a, b."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.mix = torch.nn.Conv2d(12, 6, 1)

    def forward(self, x):
        return self.mix(torch.cat([self.a(x), self.b(x), self.c(x)], 1))


class TorchDepthwise(torch.nn.Module):
    """The twin of ``MxDepthwise``: pointwise conv without bias (MXNet's bias folds into BN), Linear head."""

    def __init__(self):
        super().__init__()
        self.dw = torch.nn.Sequential(torch.nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False),
                                      torch.nn.BatchNorm2d(6), torch.nn.ReLU6())
        self.pw = torch.nn.Sequential(torch.nn.Conv2d(6, 10, 1, bias=False), torch.nn.BatchNorm2d(10),
                                      torch.nn.ReLU())
        self.head = torch.nn.Linear(10, 3, bias=False)

    def forward(self, x):
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(self.pw(self.dw(x)), 1), 1))


class TorchDenseStack(torch.nn.Module):
    """The twin of ``MxDenseStack``: layers declared in reverse order of use; the head has a bias (zero-filled)."""

    def __init__(self, act="tanh"):
        super().__init__()
        self.act = getattr(torch, act)
        self.head = torch.nn.Linear(16, 3)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(4)])
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        for layer in reversed(self.layers):
            x = self.act(layer(x))
        return self.head(self.drop(x))


class TorchEmbedding(torch.nn.Module):
    """The twin of ``MxEmbedding``."""

    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(30, 4)
        self.proj = torch.nn.Linear(8, 6)
        self.emb = torch.nn.Embedding(20, 8)

    def forward(self, x):
        return self.out(torch.flatten(torch.relu(self.proj(self.emb(x))), 1))


class TorchExtraLayer(torch.nn.Module):
    """``MxExtraLayer`` with one more layer (a BatchNorm, ``extra``) between c1 and c2."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.extra = torch.nn.BatchNorm2d(4)
        self.extra.running_mean.fill_(0.5)  # not an identity in eval mode
        self.extra.running_var.fill_(2.0)
        self.c2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 2)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.c2(torch.relu(self.extra(torch.relu(self.c1(x)))))), 1))


class TorchTwoInputs(torch.nn.Module):
    """The twin of ``MxTwoInputs``, summing in the other order."""

    def __init__(self):
        super().__init__()
        self.fy = torch.nn.Linear(6, 5)
        self.fx = torch.nn.Linear(4, 5)

    def forward(self, x, y):
        return self.fy(y) + self.fx(x)


def torch_residual(stride1=2, stride2=1):
    """Factory the CLI test names as ``tests.migrate.models:torch_residual``."""
    torch.manual_seed(0)
    return TorchResidual(stride1, stride2)


def torch_too_big():
    """A factory whose model cannot be allocated (2**50 float32 weights): ``tests.migrate.models:torch_too_big``."""
    return torch.nn.Linear(2 ** 25, 2 ** 25)


def residual_files(folder, **optimizer_params) -> None:
    """``MxResidual`` trained 2 LrTrainer steps (sgd, lr 0.05, momentum 0.9, plus ``optimizer_params``) on seeded
    (2, 3, 8, 8) batches, then written into ``folder``: ``res-symbol.json``, ``res-0000.params``, ``settings.json``
    and ``trainer.states`` (what ``migrate`` reads)."""
    from gluon_lr import LrTrainer
    net = gluon(MxResidual)
    net.hybridize()
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.05, "momentum": 0.9, **optimizer_params})
    rng = np.random.RandomState(0)
    for _ in range(2):
        with mx.autograd.record():
            loss = (net(mx.nd.array(rng.randn(2, 3, 8, 8))) ** 2).sum()
        loss.backward()
        trainer.step(2)
    net.export(str(folder / "res"))
    trainer.export_settings(str(folder / "settings.json"))
    trainer.save_states(str(folder / "trainer.states"))
