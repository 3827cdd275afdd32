"""Generated modules are made of torch layers: the Gluon block tree holds nn.Conv2d, nn.Linear, MXNet's BatchNorm
(a torch ``_BatchNorm``), nn.ReLU, pooling layers... under the keys MXNet's names map to; forward hooks fire on them;
a new head replaces the old as in torchvision and fine-tunes through load_migration / torch_optimizer; BatchNorm keeps
MXNet's semantics in training (one value per channel, any axis, fix_gamma, use_global_stats, float32 momentum), also
synchronized across two gloo ranks (``convert_sync_batchnorm``); a replaced layer that does not fit is refused by
load_migration naming the key and both shapes."""
import re

import mxnet as mx
import numpy as np
import pytest
import torch
import torchvision
from mxnet import autograd, gluon
from mxnet.gluon.model_zoo import vision
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

import gluon_lr
import migrate
import migrate.cli
from migrate.errors import InputFileError, ModelTypeError
from migrate.generate import convert_sync_batchnorm, generate_torch
from tests.migrate.generate.test_generate import _check, _seeded, generate_module

RTOL = 1e-4


@pytest.fixture(scope="module")
def resnet18(tmp_path_factory):
    """(Gluon resnet18_v1 with 10 classes, seeded, and its generated module)."""
    net = _seeded(vision.resnet18_v1(classes=10))
    model = generate_torch(net, (2, 3, 32, 32), tmp_path_factory.mktemp("r18") / "r18.py")
    return net, model


def _count(model, kind) -> int:
    return sum(isinstance(m, kind) for m in model.modules())


class TestModuleTree:
    def test_layers_as_in_torchvision(self, resnet18):
        """The generated resnet18_v1 holds as many convolutions, batch norms and linear layers as torchvision's
        resnet18, each a torch layer of the right size, max/average pooling layers and an in-place ReLU."""
        _, model = resnet18
        twin = torchvision.models.resnet18()
        for kind in (nn.Conv2d, _BatchNorm, nn.Linear, nn.MaxPool2d):
            assert _count(model, kind) == _count(twin, kind), kind.__name__
        assert _count(model, nn.AdaptiveAvgPool2d) == 1 and _count(model, nn.ReLU) >= 1
        assert model.features[2].inplace  # after a batch norm whose output nothing else reads, as torchvision's
        conv = model.features[0]
        assert (type(conv), conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding) == (
            nn.Conv2d, 3, 64, (7, 7), (2, 2), (3, 3))
        assert "(0): Conv2d(3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)" in str(model)

    def test_keys_and_torch_names(self, resnet18):
        """state_dict keys are the MXNet-named ones (gamma, beta, running_mean, running_var), no num_batches_tracked;
        torch's names read the same tensors (bn.weight is bn.gamma), as tools expect."""
        net, model = resnet18
        assert sorted(model.MXNET_NAMES.values()) == sorted(model.state_dict())
        assert sorted(model.MXNET_NAMES) == sorted(net.collect_params())
        bn = model.features[1]
        assert list(dict(bn.named_parameters())) == ["gamma", "beta"]
        assert bn.weight is bn.gamma and bn.bias is bn.beta and bn.running_var is dict(bn.named_buffers())[
            "running_var"]
        assert not any(k.endswith("num_batches_tracked") for k in model.state_dict())

    def test_forward_hooks_fire(self, resnet18):
        """A forward hook on a layer sees its output (the first convolution: 64 channels at half the size)."""
        _, model = resnet18
        seen = []
        handle = model.features[0].register_forward_hook(lambda m, i, out: seen.append(tuple(out.shape)))
        try:
            model.eval()(torch.zeros(2, 3, 32, 32))
        finally:
            handle.remove()
        assert seen == [(2, 64, 16, 16)]

    def test_forward_reads_like_torch(self, tmp_path):
        """The forward calls the layers by their paths, values named x, x1, ...; no recording calls."""
        net = _seeded(vision.resnet18_v1(classes=4))
        generate_torch(net, (1, 3, 32, 32), tmp_path / "r18.py")
        text = (tmp_path / "r18.py").read_text()
        assert "        x = self.features[0](data)\n        x = self.features[1](x)\n" in text
        assert "_record" not in text and "recorded" not in text


class TestHeadReplaced:
    def test_new_head_fine_tunes_through_load_migration(self, tmp_path):
        """migrate all --torch generate of a trained resnet18_v1 (head lr_mult 2), the module loaded by
        load_migration, its head (``dense0`` from symbol files; ``output`` from the Gluon block) replaced by
        nn.Linear(512, 3) as in torchvision, torch_optimizer built over it:
        the new head trains in the old head's group (its lr) and the first step moves it by -lr * grad
        (SGD, no momentum state yet for it); the backbone holds the migrated weights before the step."""
        net = _seeded(vision.resnet18_v1(classes=5))
        net.output.collect_params().setattr("lr_mult", 2.0)
        trainer = gluon_lr.LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.05}, kvstore=None)
        x = np.random.RandomState(0).randn(4, 3, 32, 32).astype(np.float32)
        with autograd.record():
            loss = net(mx.nd.array(x)).sum()
        loss.backward()
        trainer.step(4)
        net.hybridize()
        net(mx.nd.array(x))
        net.export(str(tmp_path / "r18"))
        trainer.export_settings(str(tmp_path / "settings.json"))
        out = tmp_path / "out"
        code = migrate.cli.main(["all", "--symbol", str(tmp_path / "r18-symbol.json"), "--params",
                                 str(tmp_path / "r18-0000.params"), "--input-shape", "4,3,32,32", "--settings",
                                 str(tmp_path / "settings.json"), "--torch", "generate", "--out", str(out)])
        assert code == 0
        model = generate_module(out / "model.py").R18()
        migrate.load_migration(out, model)
        conv = model.MXNET_NAMES[net.features[0].weight.name]
        assert np.array_equal(model.state_dict()[conv].numpy(), net.features[0].weight.data().asnumpy())
        assert model.MXNET_NAMES[net.output.weight.name] == "dense0.weight"
        model.dense0 = nn.Linear(512, 3)
        optimizer = migrate.torch_optimizer(model, str(tmp_path / "settings.json"), model.MXNET_NAMES)
        group = next(g for g in optimizer.param_groups if any(p is model.dense0.weight for p in g["params"]))
        assert group["lr"] == pytest.approx(0.05 * 2.0)
        before = model.dense0.weight.detach().clone()
        logits = model(torch.from_numpy(x))
        assert logits.shape == (4, 3)
        torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0]), reduction="sum").backward()
        grad = model.dense0.weight.grad.clone() * group.get("rescale_grad", 1.0)
        optimizer.step()
        torch.testing.assert_close(model.dense0.weight.detach(), before - 0.1 * grad, atol=1e-7, rtol=1e-6)

    def test_replaced_layer_that_does_not_fit_is_named(self, tmp_path):
        """load_migration into a module whose head was replaced by one of another size: InputFileError naming the
        key and both shapes, and nothing loaded."""
        net = gluon.nn.HybridSequential(prefix="net_")
        with net.name_scope():
            net.add(gluon.nn.Dense(4, in_units=3), gluon.nn.Dense(2, in_units=4))
        net = _seeded(net)
        net.hybridize()
        net(mx.nd.zeros((1, 3)))
        net.export(str(tmp_path / "n"))
        trainer = gluon_lr.LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=None)
        trainer.export_settings(str(tmp_path / "settings.json"))
        out = tmp_path / "out"
        assert migrate.cli.main(["all", "--symbol", str(tmp_path / "n-symbol.json"), "--params",
                                 str(tmp_path / "n-0000.params"), "--input-shape", "1,3", "--settings",
                                 str(tmp_path / "settings.json"), "--torch", "generate", "--out", str(out)]) == 0
        model = generate_module(out / "model.py").N()
        model.dense1 = nn.Linear(4, 7)
        first = model.dense0.weight.detach().clone()
        with pytest.raises(InputFileError, match=re.escape("'dense1.weight': the folder holds (2, 4), the model "
                                                           "(7, 4)")):
            migrate.load_migration(out, model)
        assert torch.equal(model.dense0.weight, first)


class NormBlock(gluon.HybridBlock):
    """BatchNorm variants in training mode: channels last (axis=-1 of (N, T, C)), fix_gamma with momentum 0.8,
    use_global_stats, and one value per channel (batch 1 after a global pool)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = gluon.nn.Conv2D(6, 3, in_channels=3)
            self.bn_fixed = gluon.nn.BatchNorm(scale=False, momentum=0.8, in_channels=6)
            self.bn_global = gluon.nn.BatchNorm(use_global_stats=True, in_channels=6)
            self.pool = gluon.nn.GlobalAvgPool2D()
            self.bn_one = gluon.nn.BatchNorm(in_channels=6)
            self.dense = gluon.nn.Dense(8, flatten=False, in_units=3)
            self.bn_last = gluon.nn.BatchNorm(axis=-1, in_channels=8)

    def hybrid_forward(self, F, x):
        y = self.bn_one(self.pool(self.bn_global(self.bn_fixed(self.conv(x)))))
        z = self.bn_last(self.dense(F.reshape(x, shape=(0, 0, -1)).transpose((0, 2, 1))))
        return y, z


class TestBatchNormSemantics:
    def test_variants_equal_mxnet_in_training(self, tmp_path):
        """Outputs (eval and train) and running statistics after one training step equal MXNet's within 1e-4 for
        each variant, one value per channel included (torch's own kernel refuses it)."""
        net = _seeded(NormBlock(prefix="norm_"))
        net(mx.nd.zeros((1, 3, 5, 5)))
        for name, param in net.collect_params().items():
            if name.endswith(("running_mean", "running_var", "gamma", "beta")):
                low = 0.5 if name.endswith(("running_var", "gamma")) else -0.5
                param.set_data(mx.nd.array(np.random.RandomState(1).uniform(low, low + 1.0, param.shape)))
        model = _check(net, [np.random.RandomState(2).randn(1, 3, 5, 5).astype(np.float32)], tmp_path / "n.py")
        assert _count(model, _BatchNorm) == 4

    def test_momentum_is_mxnets_float32(self):
        """momentum 0.9 is held as 0.89999998 (MXNet's float32), torch's momentum attribute is 1 - that."""
        from migrate.generate.ops.normalization import BatchNorm
        bn = BatchNorm(3, momentum=0.9)
        assert bn.mx_momentum == float(np.float32(0.9)) and bn.momentum == 1 - float(np.float32(0.9))

    def test_running_variance_is_biased_in_float64(self):
        """One training step in float64: running mean and variance are MXNet's update with the biased batch
        variance, to 1e-14 (the n / (n - 1) held meanwhile rounds only)."""
        from migrate.generate.ops.normalization import BatchNorm
        torch.manual_seed(0)
        bn = BatchNorm(4, momentum=0.9, fix_gamma=False, dtype=torch.float64).train()
        x = torch.randn(3, 4, 2, 5, dtype=torch.float64) * 3 + 1
        mean0, var0 = bn.running_mean.clone(), bn.running_var.clone() + 0.5
        bn.running_var.copy_(var0)
        bn(x)
        m = float(np.float32(0.9))
        var, mean = torch.var_mean(x, (0, 2, 3), correction=0)
        torch.testing.assert_close(bn.running_mean, m * mean0 + (1 - m) * mean, atol=1e-14, rtol=0)
        torch.testing.assert_close(bn.running_var, m * var0 + (1 - m) * var, atol=1e-14, rtol=0)

    def test_loads_a_plain_state_dict(self):
        """A state dict without torch's metadata (as read from safetensors) loads strictly: no num_batches_tracked
        is asked for (torch's _BatchNorm would add one)."""
        from migrate.generate.ops.normalization import BatchNorm
        bn = BatchNorm(2, stats=("moving_mean", "moving_var"))
        state = {"gamma": torch.ones(2), "beta": torch.zeros(2), "moving_mean": torch.tensor([1.0, 2.0]),
                 "moving_var": torch.ones(2)}
        bn.load_state_dict(state)
        assert bn.running_mean.tolist() == [1.0, 2.0] and list(bn.state_dict()) == list(state)


class TestSyncBatchNorm:
    def test_torch_batch_norms_are_refused(self):
        """convert_sync_batchnorm converts generated layers only: torch's own is a ModelTypeError naming torch's
        converter."""
        with pytest.raises(ModelTypeError, match=r"BatchNorm2d is a torch batch norm layer.*torch\.nn\.SyncBatchNorm"):
            convert_sync_batchnorm(nn.Sequential(nn.BatchNorm2d(3)))

    def test_two_ranks_equal_one_process(self, tmp_path):
        """Two gloo ranks, each half of the batch, after convert_sync_batchnorm: together the outputs, the summed
        gradients and the running statistics equal one process's on the whole batch (float64, 1e-10), with
        fix_gamma, MXNet's momentum and the state_dict keys kept."""
        from devtools.local_cluster import run_torch_ddp
        block = gluon.nn.HybridSequential(prefix="s_")
        with block.name_scope():
            block.add(gluon.nn.Conv2D(6, 3, in_channels=3), gluon.nn.BatchNorm(in_channels=6, momentum=0.8),
                      gluon.nn.Activation("relu"), gluon.nn.BatchNorm(scale=False, in_channels=6))
        block.initialize(mx.init.Xavier())
        block.cast("float64")
        model = generate_torch(block, (4, 3, 5, 5), tmp_path / "model.py", input_dtypes=np.float64)
        torch.save(model.state_dict(), tmp_path / "weights.pt")
        rng = np.random.RandomState(0)
        x, head = rng.randn(4, 3, 5, 5), rng.randn(4, 6, 3, 3)
        np.savez(tmp_path / "data.npz", x=x, head=head)
        run_torch_ddp(["-m", "tests.migrate.generate.sync_bn_worker", str(tmp_path)], tmp_path / "logs",
                      timeout=120.0)
        model.train()
        out = model(torch.from_numpy(x))
        (out * torch.from_numpy(head)).sum().backward()
        ranks = [np.load(tmp_path / f"rank{r}.npz") for r in (0, 1)]
        np.testing.assert_allclose(np.concatenate([r["out"] for r in ranks]), out.detach().numpy(), atol=1e-10)
        for key, param in model.named_parameters():
            np.testing.assert_allclose(ranks[0][f"grad:{key}"] + ranks[1][f"grad:{key}"], param.grad.numpy(),
                                       atol=1e-10, err_msg=key)
        for key, value in model.state_dict().items():
            for rank in ranks:
                np.testing.assert_allclose(rank[f"state:{key}"], value.numpy(), atol=1e-10, err_msg=key)
