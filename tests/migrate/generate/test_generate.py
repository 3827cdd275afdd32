"""Tests of migrate.generate_torch: generated modules compute what MXNet computes, in eval and training mode, and
continue an MXNet training run exactly."""
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet import autograd, gluon
from mxnet.gluon.model_zoo import vision

import gluon_lr
import migrate
import migrate.cli
from migrate.errors import InputShapeError, ModelTypeError, UnsupportedOpError
from migrate.generate import generate_torch, known_ops
from migrate.generate.registry import register, translator
from tests.migrate.mapping.test_gluoncv import model_zoo  # noqa: F401  (fixture: gluoncv's zoo next to torch >= 2)

RTOL = 1e-4  # largest |torch - mxnet| over largest |mxnet|, per output


def _relative(mx_out, torch_out) -> float:
    mx_out, torch_out = mx_out.asnumpy(), torch_out.detach().numpy()
    assert mx_out.shape == torch_out.shape, f"shapes differ: MXNet {mx_out.shape}, torch {torch_out.shape}"
    return float(np.abs(mx_out - torch_out).max() / max(np.abs(mx_out).max(), 1e-12))


def _outputs(result) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _check(net, inputs, path, train=True):
    """Generate ``net``; its eval outputs (and train outputs, running statistics after one backward) equal MXNet's."""
    model = generate_torch(net, [x.shape for x in inputs], path, input_dtypes=[x.dtype for x in inputs])
    model.eval()
    with torch.no_grad():
        got = _outputs(model(*[torch.from_numpy(x) for x in inputs]))
    for i, (want, have) in enumerate(zip(_outputs(net(*[mx.nd.array(x, dtype=x.dtype) for x in inputs])), got)):
        assert _relative(want, have) <= RTOL, f"eval output {i}: relative difference {_relative(want, have):.3g}"
    if not train:
        return model
    model.train()
    got = _outputs(model(*[torch.from_numpy(x) for x in inputs]))
    with autograd.record(train_mode=True):
        want = _outputs(net(*[mx.nd.array(x, dtype=x.dtype) for x in inputs]))
        total = sum(w.sum() for w in want)
    total.backward()  # MXNet updates BatchNorm's running statistics in the backward
    for i, (w, h) in enumerate(zip(want, got)):
        assert _relative(w, h) <= RTOL, f"train output {i}: relative difference {_relative(w, h):.3g}"
    state = model.state_dict()
    for name, param in net.collect_params().items():  # MXNet's MKLDNN BatchNorm may overwrite a fixed gamma with 1
        if name.endswith(("running_mean", "running_var")):
            diff = _relative(param.data(), state[model.MXNET_NAMES[name]])
            assert diff <= RTOL, f"{name}: relative difference {diff:.3g} after one training step"
    return model


def _assert_same_weights(net, model, when: str, atol=1e-10) -> None:
    """Every MXNet parameter equals its generated twin (by ``MXNET_NAMES``) within ``atol``."""
    state = model.state_dict()
    for name, param in net.collect_params().items():
        diff = float(np.abs(param.data().asnumpy() - state[model.MXNET_NAMES[name]].numpy()).max())
        assert diff <= atol, f"{name}: differs by {diff:.3g} after {when}"


def _seeded(net, seed=0):
    mx.random.seed(seed)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    return net


def _perturb_stats(net, seed=1):
    """Give BatchNorm non-trivial running statistics (random init leaves them 0 and 1, which hides mistakes)."""
    rng = np.random.RandomState(seed)
    for name, param in net.collect_params().items():
        if name.endswith(("running_mean", "running_var", "gamma", "beta")):
            low = 0.5 if name.endswith(("running_var", "gamma")) else -0.5
            param.set_data(mx.nd.array(rng.uniform(low, low + 1.0, param.shape)))


class OpsBlock(gluon.HybridBlock):
    """Exercises grouped/depthwise convolutions, BatchNorm variants, pooling conventions, reshape codes,
    slice_axis, broadcast ops, clip, activations, Concat, transpose, expand_dims, FullyConnected(flatten=False),
    softmax and log_softmax."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.grouped = gluon.nn.Conv2D(8, 3, groups=2, in_channels=4)
            self.depthwise = gluon.nn.Conv2D(8, 3, padding=1, groups=8, in_channels=8, use_bias=False)
            self.bn_global = gluon.nn.BatchNorm(use_global_stats=True, in_channels=8)
            self.bn_fixed = gluon.nn.BatchNorm(scale=False, momentum=0.8, epsilon=1e-3, in_channels=8)
            self.prelu = gluon.nn.PReLU()
            self.dense = gluon.nn.Dense(5, flatten=False, in_units=15)

    def hybrid_forward(self, F, x):
        y = self.bn_fixed(self.depthwise(self.bn_global(self.grouped(x))))  # (2, 8, 7, 7)
        pools = [F.Pooling(y, kernel=(2, 2), stride=(2, 2), pool_type="max", pooling_convention="full"),
                 F.Pooling(y, kernel=(2, 2), stride=(2, 2), pool_type="avg", pooling_convention="full"),
                 F.Pooling(y, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg",
                           pooling_convention="full", count_include_pad=True),
                 F.Pooling(y, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg",
                           pooling_convention="full", count_include_pad=False),
                 F.Pooling(y, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg", count_include_pad=False),
                 F.contrib.AdaptiveAvgPooling2D(y, output_size=4)]
        z = F.concat(*pools, dim=1)  # (2, 48, 4, 4)
        z = F.broadcast_add(F.broadcast_mul(z, F.mean(z, axis=(2, 3), keepdims=True)),
                            F.Pooling(z, global_pool=True, kernel=(1, 1), pool_type="max"))
        z = F.clip(z, a_min=-1.0, a_max=1.5) + F.Activation(z, act_type="softrelu") - F.LeakyReLU(z, slope=0.1)
        z = F.reshape(z, shape=(0, -4, 4, -1, -3))  # (2, 4, 12, 16)
        z = F.slice_axis(z, axis=3, begin=1, end=None) + F.Activation(F.slice_axis(z, axis=3, begin=0, end=-1),
                                                                      act_type="tanh")  # (2, 4, 12, 15)
        z = F.reshape(z, shape=(-1, 3, 5), reverse=True)  # (96, 3, 5)
        z = self.prelu(F.LeakyReLU(z, act_type="elu", slope=0.3)) + F.LeakyReLU(z, act_type="gelu")
        z = F.transpose(F.expand_dims(z, axis=1), axes=(0, 1, 3, 2))  # (96, 1, 5, 3)
        z = F.reshape(z, shape=(0, -2))  # codes that keep the shape
        w = self.dense(F.reshape(F.sigmoid(z), shape=(-1, 15)) - F.Activation(F.reshape(z, shape=(-1, 15)),
                                                                                act_type="softsign"))
        return F.softmax(w, axis=0, temperature=2.0), F.log_softmax(F.broadcast_div(w, F.abs(w) + 1.0), axis=-1)


class MiscBlock(gluon.HybridBlock):
    """Transposed convolution, split/stack, slice, squeeze, dot, broadcast_to, SoftmaxActivation, sum/max, the
    scalar ops and elemwise ops."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.up = gluon.nn.Conv2DTranspose(4, 3, strides=2, padding=1, output_padding=1, in_channels=3)
            self.proj = self.params.get("proj", shape=(6, 5))

    def hybrid_forward(self, F, x, proj):
        y = self.up(x)  # (2, 4, 8, 8)
        a, b = F.split(y, num_outputs=2, axis=1)
        s = F.stack(F.elemwise_mul(a, b), F.elemwise_sub(a, b), axis=0)  # (2, 2, 2, 8, 8)
        s = F.squeeze(F.slice(s, begin=(0, None, 1), end=(1, None, 2)), axis=(0, 2))  # (2, 8, 8)
        t = F.dot(F.slice_axis(F.reshape(s, shape=(-1, 8)), axis=1, begin=0, end=6), proj)  # (16, 5)
        t = F.broadcast_to(F.expand_dims(F.sum(t, axis=1), axis=1), shape=(0, 5)) * 0.1 + F.rsqrt(t * t + 1.0)
        flat = F.reshape(y, shape=(2, 4, -1))
        u = F.broadcast_add(F.SoftmaxActivation(flat, mode="channel"), 2.0 / (F.max(flat, axis=1, keepdims=True) + 3.0))
        return t - 1.5, F.elemwise_add(u, F.exp(-F.square(flat)))


class TransformerBlock(gluon.HybridBlock):
    """Embedding, two-head self-attention by batch_dot, LayerNorm, GELU feed-forward, residuals."""

    def __init__(self, vocab=20, units=8, heads=2, **kwargs):
        super().__init__(**kwargs)
        self.heads = heads
        with self.name_scope():
            self.embed = gluon.nn.Embedding(vocab, units)
            self.qkv = gluon.nn.Dense(3 * units, flatten=False, in_units=units)
            self.proj = gluon.nn.Dense(units, flatten=False, in_units=units)
            self.norm1 = gluon.nn.LayerNorm(in_channels=units)
            self.norm2 = gluon.nn.LayerNorm(in_channels=units)
            self.ffn = gluon.nn.HybridSequential()
            self.ffn.add(gluon.nn.Dense(16, flatten=False, in_units=units), gluon.nn.GELU(),
                         gluon.nn.Dense(units, flatten=False, in_units=16), gluon.nn.Dropout(0.0))

    def hybrid_forward(self, F, tokens):
        x = self.embed(tokens)  # (B, T, C)
        q, k, v = F.split(self.qkv(self.norm1(x)), num_outputs=3, axis=-1)

        def heads(t):  # (B, T, C) -> (B * H, T, C / H)
            return F.reshape(F.transpose(F.reshape(t, shape=(0, 0, -4, self.heads, -1)), axes=(0, 2, 1, 3)),
                             shape=(-3, -2))
        scores = F.softmax(F.batch_dot(heads(q), heads(k), transpose_b=True) / 2.0, axis=-1)
        att = F.reshape(F.batch_dot(scores, heads(v)), shape=(-4, -1, self.heads, -2))
        att = F.reshape(F.transpose(att, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
        x = x + self.proj(att)
        return x + self.ffn(self.norm2(x))


class TestGenerateTorch:
    def test_resnet50_v1(self, tmp_path):
        """Model-zoo resnet50_v1 (stride on the 1x1 conv: no torchvision twin): eval and train outputs match."""
        net = _seeded(vision.resnet50_v1(classes=10))
        net(mx.nd.zeros((2, 3, 64, 64)))
        _perturb_stats(net)
        _check(net, [np.random.RandomState(0).randn(2, 3, 64, 64).astype(np.float32)], tmp_path / "r50.py")

    def test_mobilenet_v2(self, tmp_path):
        """Model-zoo mobilenet_v2_1.0 (depthwise convolutions, relu6 as clip): eval and train outputs match."""
        net = _seeded(vision.mobilenet_v2_1_0(classes=10))
        net(mx.nd.zeros((2, 3, 64, 64)))
        _perturb_stats(net)
        net.hybridize()
        _check(net, [np.random.RandomState(0).randn(2, 3, 64, 64).astype(np.float32)], tmp_path / "mnv2.py")

    def test_ops_block(self, tmp_path):
        """A custom block exercising the translated ops gives both outputs as MXNet does, eval and train."""
        net = _seeded(OpsBlock(prefix="ops_"))
        net(mx.nd.zeros((2, 4, 9, 9)))
        _perturb_stats(net)
        _check(net, [np.random.RandomState(2).randn(2, 4, 9, 9).astype(np.float32)], tmp_path / "ops.py")

    def test_misc_block(self, tmp_path):
        """Transposed convolution, split, stack, slice, squeeze, dot, broadcast_to and scalar ops match MXNet."""
        net = _seeded(MiscBlock(prefix="misc_"))
        _check(net, [np.random.RandomState(4).randn(2, 3, 4, 4).astype(np.float32)], tmp_path / "misc.py")

    def test_transformer_block(self, tmp_path):
        """Embedding, LayerNorm, batch_dot attention and GELU: outputs match with integer token inputs."""
        net = _seeded(TransformerBlock(prefix="tf_"))
        tokens = np.random.RandomState(3).randint(0, 20, (2, 5)).astype(np.float32)
        _check(net, [tokens], tmp_path / "tf.py")

    def test_names_mirror_the_block_tree(self, tmp_path):
        """state_dict keys follow the Gluon attribute tree and MXNET_NAMES maps every parameter to one of them."""
        net = _seeded(vision.resnet18_v1(classes=4))
        model = generate_torch(net, (1, 3, 32, 32), tmp_path / "r18.py")
        names = model.MXNET_NAMES
        assert names[net.features[0].weight.name] == "features.0.weight"
        assert names[net.features[5][0].downsample[0].weight.name] == "features.5.0.downsample.0.weight"
        assert names[net.features[1].running_var.name] == "features.1.running_var"
        assert sorted(model.MXNET_NAMES) == sorted(net.collect_params())
        assert "self.features[4][0].body[0](" in (tmp_path / "r18.py").read_text()  # the layer called by its path

    def test_training_continues_exactly(self, tmp_path):
        """3 MXNet steps + 3 torch steps (exact SGD, converted momentum) == 6 MXNet steps, BatchNorm stats too
        (float64, to 1e-10: measured ~6e-14; in float32 the frameworks' rounding alone drifts by ~1e-4 over 6 steps)."""
        net = _small_net()
        net.cast("float64")
        net.collect_params(".*dense.*").setattr("lr_mult", 2.0)
        trainer = gluon_lr.LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9,
                                                                   "wd": 1e-3}, kvstore=None)
        rng = np.random.RandomState(0)
        data = [(rng.randn(4, 2, 6, 6), rng.randn(4, 3)) for _ in range(6)]
        for x, y in data[:3]:
            with autograd.record():
                loss = ((net(mx.nd.array(x, dtype=x.dtype)) - mx.nd.array(y, dtype=y.dtype)) ** 2).sum()
            loss.backward()
            trainer.step(4)
        trainer.export_settings(str(tmp_path / "settings.json"))
        trainer.save_states(str(tmp_path / "trainer.states"))
        model = generate_torch(net, (4, 2, 6, 6), tmp_path / "net.py", input_dtypes=np.float64)
        optimizer = migrate.torch_optimizer(model, str(tmp_path / "settings.json"), model.MXNET_NAMES)
        migrate.convert_optimizer_state(str(tmp_path / "trainer.states"), str(tmp_path / "settings.json"),
                                        model.MXNET_NAMES, optimizer)
        for x, y in data[3:]:
            with autograd.record():
                loss = ((net(mx.nd.array(x, dtype=x.dtype)) - mx.nd.array(y, dtype=y.dtype)) ** 2).sum()
            loss.backward()
            trainer.step(4)
            optimizer.zero_grad()
            ((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum().backward()
            optimizer.step()
        _assert_same_weights(net, model, "3 + 3 steps")

    def test_name_mapping_accepts_generated(self, tmp_path):
        """migrate.name_mapping matches the MXNet model to its generated twin, every name to its MXNET_NAMES key."""
        net = _seeded(vision.resnet18_v1(classes=4))
        model = generate_torch(net, (1, 3, 32, 32), tmp_path / "r18.py")
        mapping = migrate.name_mapping(net, model, (2, 3, 32, 32))
        assert mapping.ok, mapping.differences
        wrong = {n: (mapping[n], k) for n, k in model.MXNET_NAMES.items() if mapping[n] != k}
        assert not wrong, f"name_mapping disagrees with MXNET_NAMES: {list(wrong.items())[:5]}"

    def test_module_checkpoint_files(self, tmp_path):
        """A Module checkpoint (arg:/aux: prefixes, SoftmaxOutput head): the head is cut, the module returns the
        logits, whose softmax is the Module's output."""
        data = mx.sym.var("data")
        net = mx.sym.FullyConnected(data, num_hidden=6, name="fc1")
        net = mx.sym.BatchNorm(mx.sym.Activation(net, act_type="relu", name="relu1"), name="bn1", fix_gamma=False)
        net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(net, num_hidden=3, name="fc2"), name="softmax")
        module = mx.mod.Module(net, data_names=["data"], label_names=["softmax_label"])
        module.bind(data_shapes=[("data", (2, 5))], label_shapes=[("softmax_label", (2,))])
        mx.random.seed(0)
        module.init_params(mx.init.Xavier())
        module.save_checkpoint(str(tmp_path / "ckpt"), 3)
        model = generate_torch((tmp_path / "ckpt-symbol.json", tmp_path / "ckpt-0003.params"), (2, 5),
                               tmp_path / "ckpt.py")
        x = np.random.RandomState(0).randn(2, 5).astype(np.float32)
        module.forward(mx.io.DataBatch([mx.nd.array(x)]), is_train=False)
        model.eval()
        diff = _relative(module.get_outputs()[0], torch.softmax(model(torch.from_numpy(x)), dim=1))
        assert diff <= RTOL, f"relative difference {diff:.3g}"
        assert type(model).__name__ == "Ckpt" and model.MXNET_NAMES["fc1_weight"] == "fc1.weight"
        assert model.MXNET_NAMES["bn1_moving_var"] == "bn1.moving_var"
        assert "bn1.moving_var" in dict(model.named_buffers())

    def test_generated_file_stands_alone(self, tmp_path):
        """The file imports in a fresh python that has no migrate on its path, and its class loads the weights."""
        net = _seeded(TransformerBlock(prefix="tf_"))
        model = generate_torch(net, (2, 5), tmp_path / "tf.py")
        torch.save(model.state_dict(), tmp_path / "w.pt")
        code = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import tf; m = tf.TransformerBlock(); "
                "m.load_state_dict(torch.load(sys.argv[1] + '/w.pt')); m.eval(); "
                "print(float(m(torch.arange(10.).reshape(2, 5)).sum()))")
        out = subprocess.run([sys.executable, "-I", "-c", code, str(tmp_path)], capture_output=True, text=True,
                             timeout=120, cwd=str(tmp_path))
        assert out.returncode == 0, out.stderr[-2000:]
        model.eval()
        want = float(model(torch.arange(10.).reshape(2, 5)).sum().detach())
        assert abs(float(out.stdout.strip()) - want) <= 1e-5 * max(1.0, abs(want))
        assert "import migrate" not in (tmp_path / "tf.py").read_text()

    def test_dropout_follows_train_mode(self, tmp_path):
        """Dropout(0.5) is the identity in eval() and drops about half the values, scaled by 2, in train()."""
        net = gluon.nn.HybridSequential(prefix="d_")
        with net.name_scope():
            net.add(gluon.nn.Dense(4, in_units=3), gluon.nn.Dropout(0.5))
        net.initialize()
        model = generate_torch(net, (1, 3), tmp_path / "d.py")
        x = torch.ones(1000, 3)
        torch.manual_seed(0)
        model.eval()
        full = model(x)
        model.train()
        dropped = model(x)
        kept = dropped != 0
        assert 0.45 <= float(kept.float().mean()) <= 0.55
        torch.testing.assert_close(dropped[kept], 2 * full[kept])


class TestErrors:
    def test_unsupported_op_writes_nothing(self, tmp_path):
        """An op without a translation is an UnsupportedOpError naming the op, the node, MXNet's documentation name
        and the nearest known ops; no file is written."""
        class KhatriRao(gluon.HybridBlock):
            def hybrid_forward(self, F, x):
                return F.khatri_rao(x, x)
        with pytest.raises(UnsupportedOpError, match=r"node 'kr_khatri_rao0' uses op 'khatri_rao' \(documented "
                                                     r"as mxnet.symbol.khatri_rao\).*nearest known ops"):
            generate_torch(KhatriRao(prefix="kr_"), (2, 5), tmp_path / "t.py")
        assert not (tmp_path / "t.py").exists()

    def test_none_output_is_named(self, tmp_path):
        """A block returning None among its outputs (GluonTS MQCNN's sampler gives ((x,), None, None)) is a
        ModelTypeError naming the position; nothing is written. Nested outputs without None come out flat."""
        class Sampler(gluon.HybridBlock):
            def __init__(self, with_none, **kwargs):
                super().__init__(**kwargs)
                self.with_none = with_none

            def hybrid_forward(self, F, x):
                return ((x * 2,), None, None) if self.with_none else ((x * 2,), x + 1)
        with pytest.raises(ModelTypeError, match=r"block Sampler returns None as its output\[1\].*wrap the block"):
            generate_torch(Sampler(True), (2, 3), tmp_path / "s.py")
        assert not (tmp_path / "s.py").exists()
        model = generate_torch(Sampler(False), (2, 3), tmp_path / "s.py")
        doubled, plus_one = model(torch.ones(2, 3))
        assert torch.equal(doubled, torch.full((2, 3), 2.0)) and torch.equal(plus_one, torch.full((2, 3), 2.0))

    @pytest.mark.parametrize("description, call, error, pattern", [
        ("duplicate registration", lambda: register("Convolution")(lambda node: ""), ValueError,
         r"'Convolution' is registered twice"),
        ("unknown op names the nearest", lambda: translator("Convolutio", "n1"), UnsupportedOpError,
         r"node 'n1' uses op 'Convolutio'.*Convolution"),
    ])
    def test_registry(self, description, call, error, pattern):
        """The registry refuses duplicates and names the nearest ops of an unknown one."""
        with pytest.raises(error, match=pattern):
            call()

    def test_wrong_input_count(self, tmp_path):
        """Two shapes for a one-input model is an InputShapeError naming the graph's inputs; nothing written."""
        net = _seeded(gluon.nn.Dense(2, in_units=3, prefix="d_"))
        net.hybridize()
        net(mx.nd.zeros((1, 3)))
        net.export(str(tmp_path / "d"))
        with pytest.raises(InputShapeError, match=r"1 data input\(s\) \['data'\]; received 2 shape"):
            generate_torch((tmp_path / "d-symbol.json", tmp_path / "d-0000.params"), [(1, 3), (1, 3)],
                           tmp_path / "x.py")
        assert not os.path.exists(tmp_path / "x.py")

    def test_known_ops_cover_the_brief(self):
        """The ops the issue lists all have translators."""
        wanted = {"Convolution", "BatchNorm", "Dropout", "Pooling", "slice_axis", "Reshape", "broadcast_add", "clip",
                  "FullyConnected", "LayerNorm", "Embedding", "LeakyReLU", "softmax", "log_softmax", "batch_dot",
                  "Activation", "elemwise_add", "Concat", "Flatten", "transpose", "expand_dims", "SoftmaxOutput",
                  "RNN", "_rnn_param_concat", "_zeros"}
        assert wanted <= set(known_ops()), sorted(wanted - set(known_ops()))


def _small_net():
    mx.random.seed(0)
    net = gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(gluon.nn.Conv2D(4, 3, in_channels=2), gluon.nn.BatchNorm(in_channels=4),
                gluon.nn.Activation("relu"), gluon.nn.Dense(3, in_units=64))
    net.initialize(mx.init.Xavier())
    return net


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small float32 net trained 3 steps by LrTrainer, exported (symbol, params, settings, states), then 3 more."""
    folder = tmp_path_factory.mktemp("generate_cli")
    net = _small_net()
    net.hybridize()
    trainer = gluon_lr.LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3},
                                 kvstore=None)
    rng = np.random.RandomState(0)
    data = [(rng.randn(4, 2, 6, 6).astype(np.float32), rng.randn(4, 3).astype(np.float32)) for _ in range(6)]
    for step, (x, y) in enumerate(data):
        if step == 3:
            net.export(str(folder / "net"))
            trainer.export_settings(str(folder / "settings.json"))
            trainer.save_states(str(folder / "trainer.states"))
        with autograd.record():
            loss = ((net(mx.nd.array(x)) - mx.nd.array(y)) ** 2).sum()
        loss.backward()
        trainer.step(4)
    final = {name: p.data().asnumpy() for name, p in net.collect_params().items()}
    return {"folder": folder, "data": data, "final": final}


def _files(folder):
    return ["--symbol", str(folder / "net-symbol.json"), "--params", str(folder / "net-0000.params"),
            "--input-shape", "4,2,6,6"]


class TestCli:
    def test_generate_subcommand(self, trained, tmp_path, capsys):
        """`migrate generate` writes an importable model.py (exit 0); again without --force is exit 2."""
        out = tmp_path / "model.py"
        assert migrate.cli.main(["generate", *_files(trained["folder"]), "--out", str(out)]) == 0
        module = generate_module(out)
        assert module.MXNET_NAMES["net_conv0_weight"] == "conv0.weight"
        assert migrate.cli.main(["generate", *_files(trained["folder"]), "--out", str(out)]) == 2
        assert "--force" in capsys.readouterr().err

    def test_all_torch_generate_continues_training(self, trained, tmp_path):
        """`migrate all --torch generate` writes model.py beside the weights and optimizer; loading them and
        training 3 torch steps equals 3 more MXNet steps (float32, 1e-5)."""
        out = tmp_path / "out"
        folder = trained["folder"]
        code = migrate.cli.main(["all", *_files(folder), "--settings", str(folder / "settings.json"), "--states",
                                 str(folder / "trainer.states"), "--torch", "generate", "--out", str(out)])
        assert code == 0 and (out / "model.py").is_file() and (out / "weights.safetensors").is_file()
        model = generate_module(out / "model.py").Net()
        optimizer, scheduler = migrate.load_migration(out, model)
        for x, y in trained["data"][3:]:
            optimizer.zero_grad()
            ((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum().backward()
            optimizer.step()
            scheduler.step()
        state = model.state_dict()
        for name, value in trained["final"].items():
            diff = float(np.abs(value - state[model.MXNET_NAMES[name]].numpy()).max())
            assert diff <= 1e-5, f"{name}: differs by {diff:.3g}"

    def test_unsupported_op_exit_2_nothing_written(self, tmp_path, capsys):
        """An op without translation: exit 2, the error names the op, no file is written."""
        fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, no_bias=True, name="fc")
        mx.sym.khatri_rao(fc, fc, name="kr").save(str(tmp_path / "t-symbol.json"))
        mx.nd.save(str(tmp_path / "t-0000.params"), {"arg:fc_weight": mx.nd.ones((3, 5))})
        args = ["generate", "--symbol", str(tmp_path / "t-symbol.json"), "--params", str(tmp_path / "t-0000.params"),
                "--input-shape", "2,5", "--out", str(tmp_path / "t.py")]
        assert migrate.cli.main(args) == 2
        assert "op 'khatri_rao'" in capsys.readouterr().err and not (tmp_path / "t.py").exists()


def generate_module(path):
    """The module of a generated file, imported from its path."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"generated_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RecurrentNet(gluon.HybridBlock):
    """An optional Embedding, then gluon.rnn.LSTM/GRU/RNN, then a Dense on each step's output."""

    def __init__(self, cell, layout="TNC", embed=True, layers=2, bidirectional=True, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = gluon.nn.Embedding(11, 4) if embed else None
            self.rnn = cell(5, num_layers=layers, bidirectional=bidirectional, layout=layout,
                            input_size=0 if embed else 3)
            self.head = gluon.nn.Dense(2, flatten=False)

    def hybrid_forward(self, F, x):
        return self.head(self.rnn(self.embed(x) if self.embed is not None else x))


class StatefulLSTM(gluon.HybridBlock):
    """An LSTM given its initial states as inputs, returning its output and final states (state_outputs)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.rnn = gluon.rnn.LSTM(4, num_layers=2, bidirectional=True, input_size=3)

    def hybrid_forward(self, F, x, h, c):
        out, (h_n, c_n) = self.rnn(x, [h, c])
        return out, h_n, c_n


def _rnn_inputs(layout, embed, seed=0, batch=2, steps=3):
    rng = np.random.RandomState(seed)
    shape = (batch, steps) if layout == "NTC" else (steps, batch)
    if embed:
        return rng.randint(0, 11, shape).astype(np.float32)
    return rng.uniform(-1, 1, shape + (3,)).astype(np.float32)


RNN_RTOL = 1e-5


class TestRecurrent:
    """gluon.rnn LSTM/GRU/RNN hybridize to MXNet's fused RNN op; the generated module runs torch's kernels on
    MXNet's parameters, eval and train mode (dropout 0), outputs and gradients within 1e-5 relative."""

    @pytest.mark.parametrize("cell, layout, embed, layers, bidirectional", [
        (gluon.rnn.LSTM, "TNC", True, 2, True), (gluon.rnn.LSTM, "NTC", False, 1, False),
        (gluon.rnn.LSTM, "NTC", True, 2, True), (gluon.rnn.GRU, "TNC", False, 2, True),
        (gluon.rnn.GRU, "NTC", True, 1, True), (gluon.rnn.RNN, "TNC", False, 2, False)])
    def test_outputs_and_gradients_equal_mxnet(self, tmp_path, cell, layout, embed, layers, bidirectional):
        net = RecurrentNet(cell, layout, embed, layers, bidirectional)
        mx.random.seed(0)
        net.initialize(mx.init.Uniform(0.5))
        net.hybridize()
        x = _rnn_inputs(layout, embed)
        model = generate_torch(net, x.shape, tmp_path / "rnn.py")
        for train in (False, True):
            model.train(train)
            with autograd.record(train_mode=train):
                want = net(mx.nd.array(x))
            if train:
                want.backward()
            got = model(torch.from_numpy(x))
            assert _relative(want, got) <= RNN_RTOL, f"train={train}: relative {_relative(want, got):.3g}"
        model.zero_grad()
        got.sum().backward()
        params = dict(model.named_parameters())
        for name, param in net.collect_params().items():
            grad = params[model.MXNET_NAMES[name]].grad
            assert _relative(param.grad(), grad) <= RNN_RTOL, f"gradient of {name}"
        other = _rnn_inputs(layout, embed, seed=1, batch=4, steps=5)  # zero states follow the batch at run time
        model.eval()
        assert _relative(net(mx.nd.array(other)), model(torch.from_numpy(other))) <= RNN_RTOL

    def test_names_cover_the_rnn_parameters(self, tmp_path):
        """Each MXNet RNN parameter is its own torch parameter, named after the Gluon attribute tree."""
        net = RecurrentNet(gluon.rnn.LSTM, embed=True, layers=2, bidirectional=True, prefix="net_")
        net.initialize()
        net.hybridize()
        model = generate_torch(net, (3, 2), tmp_path / "rnn.py")
        assert set(model.MXNET_NAMES) == set(net.collect_params())
        assert model.MXNET_NAMES["net_lstm0_l1_h2h_weight"] == "rnn.l1_h2h_weight"
        assert model.MXNET_NAMES["net_lstm0_r0_i2h_bias"] == "rnn.r0_i2h_bias"
        assert set(dict(model.named_parameters())) == set(model.MXNET_NAMES.values())

    def test_given_states_and_state_outputs(self, tmp_path):
        net = StatefulLSTM()
        net.initialize(mx.init.Uniform(0.5))
        net.hybridize()
        rng = np.random.RandomState(0)
        x, h, c = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((3, 2, 3), (4, 2, 4), (4, 2, 4)))
        model = generate_torch(net, [x.shape, h.shape, c.shape], tmp_path / "stateful.py").eval()
        got = model(*[torch.from_numpy(v) for v in (x, h, c)])
        want = net(*[mx.nd.array(v) for v in (x, h, c)])
        assert len(got) == 3
        for i, (w, g) in enumerate(zip(want, got)):
            assert _relative(w, g) <= RNN_RTOL, f"output {i}"

    def test_name_mapping_accepts_generated(self, tmp_path):
        net = RecurrentNet(gluon.rnn.GRU, embed=True)
        net.initialize(mx.init.Uniform(0.5))
        net.hybridize()
        model = generate_torch(net, (3, 2), tmp_path / "rnn.py")
        mapping = migrate.name_mapping(net, model, (3, 2))
        assert mapping.ok, mapping.differences
        wrong = {n: (mapping[n], k) for n, k in model.MXNET_NAMES.items() if mapping[n] != k}
        assert not wrong, f"name_mapping disagrees with MXNET_NAMES: {list(wrong.items())[:5]}"

    def test_projection_is_a_typed_error(self, tmp_path):
        net = gluon.rnn.LSTM(4, projection_size=2, input_size=3)
        net.initialize()
        net.hybridize()
        with pytest.raises(UnsupportedOpError, match="projection_size"):
            generate_torch(net, (3, 2, 3), tmp_path / "proj.py")
        assert not (tmp_path / "proj.py").exists()

    def test_packed_parameter_blob_from_symbol_files(self, tmp_path):
        """A symbol file whose RNN reads one packed ``..._rnn_param`` vector (weights of every layer and direction,
        then the biases) and given states: the vector stays one parameter, cut in the forward."""
        layers, dirs, hidden, width = 2, 2, 4, 3
        data, h0, c0 = mx.sym.var("data"), mx.sym.var("h0"), mx.sym.var("c0")
        out = mx.sym.RNN(data, mx.sym.var("lstm_rnn_param"), h0, c0, state_size=hidden, num_layers=layers,
                         bidirectional=True, mode="lstm", state_outputs=True, name="lstm")
        sym = mx.sym.Group([out[0], out[2]])
        size = sum(4 * hidden * (w + hidden + 2) for w in [width] * dirs + [hidden * dirs] * dirs)
        rng = np.random.RandomState(0)
        blob = mx.nd.array(rng.uniform(-0.5, 0.5, size))
        sym.save(str(tmp_path / "packed-symbol.json"))
        mx.nd.save(str(tmp_path / "packed-0000.params"), {"arg:lstm_rnn_param": blob})
        shapes = [(5, 2, width), (layers * dirs, 2, hidden), (layers * dirs, 2, hidden)]
        model = generate_torch((tmp_path / "packed-symbol.json", tmp_path / "packed-0000.params"), shapes,
                               tmp_path / "packed.py").eval()
        assert list(model.MXNET_NAMES) == ["lstm_rnn_param"]
        inputs = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
        exe = sym.bind(mx.cpu(), {"data": mx.nd.array(inputs[0]), "h0": mx.nd.array(inputs[1]),
                                  "c0": mx.nd.array(inputs[2]), "lstm_rnn_param": blob})
        want = exe.forward(is_train=False)
        got = model(*[torch.from_numpy(x) for x in inputs])
        for i, (w, g) in enumerate(zip(want, got)):
            assert _relative(w, g) <= RNN_RTOL, f"output {i}: relative {_relative(w, g):.3g}"

    def test_dropout_between_layers_follows_train_mode(self, tmp_path):
        net = RecurrentNet(gluon.rnn.LSTM, embed=False, layers=2, bidirectional=False)
        net.rnn._dropout = 0.5
        mx.random.seed(0)
        net.initialize(mx.init.Uniform(0.5))
        net.hybridize()
        x = _rnn_inputs("TNC", False)
        model = generate_torch(net, x.shape, tmp_path / "drop.py")
        assert "p=0.5" in (tmp_path / "drop.py").read_text()
        model.eval()
        assert _relative(net(mx.nd.array(x)), model(torch.from_numpy(x))) <= RNN_RTOL
        model.train()
        torch.manual_seed(0)
        assert _relative(net(mx.nd.array(x)), model(torch.from_numpy(x))) > 1e-3

    def test_verify_and_training_continue(self, tmp_path):
        """verify passes on the generated twin; 2 MXNet steps + 2 torch steps == 4 MXNet steps (float64)."""
        net = RecurrentNet(gluon.rnn.GRU, embed=True, prefix="net_")
        mx.random.seed(0)
        net.initialize(mx.init.Uniform(0.5))
        model = generate_torch(net, (3, 2), tmp_path / "check.py")
        mapping = migrate.name_mapping(net, model, (3, 2))
        report = migrate.verify(net, model, mapping, (3, 2))
        assert report.ok and report.max_abs_diff <= 1e-5, report.first_divergence
        net.cast("float64")
        net.hybridize()
        trainer = gluon_lr.LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                                     kvstore=None)
        rng = np.random.RandomState(0)
        data = [(rng.randint(0, 11, (3, 2)).astype(np.float64), rng.randn(3, 2, 2)) for _ in range(4)]

        def mx_step(x, y):
            with autograd.record():
                loss = ((net(mx.nd.array(x, dtype=x.dtype)) - mx.nd.array(y, dtype=y.dtype)) ** 2).sum()
            loss.backward()
            trainer.step(2)
        for x, y in data[:2]:
            mx_step(x, y)
        trainer.export_settings(str(tmp_path / "settings.json"))
        trainer.save_states(str(tmp_path / "trainer.states"))
        model = generate_torch(net, (3, 2), tmp_path / "rnn.py", input_dtypes=np.float64)
        optimizer = migrate.torch_optimizer(model, str(tmp_path / "settings.json"), model.MXNET_NAMES)
        migrate.convert_optimizer_state(str(tmp_path / "trainer.states"), str(tmp_path / "settings.json"),
                                        model.MXNET_NAMES, optimizer)
        for x, y in data[2:]:
            mx_step(x, y)
            optimizer.zero_grad()
            ((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum().backward()
            optimizer.step()
        _assert_same_weights(net, model, "2 + 2 steps")


class TestGluonCV:
    """GluonCV networks with no torch twin generate modules whose outputs equal MXNet's: mobilenetv3_small (other
    BatchNorm epsilon and activations than torchvision's; eval mode: its head's Dropout draws torch's random numbers
    in train mode) and cifar_resnet20_v1 (eval and train mode)."""

    def test_mobilenetv3_small(self, tmp_path, model_zoo):
        """GluonCV's mobilenetv3_small, random init, 64x64: eval outputs within 1e-4 relative; hard-swish kept."""
        from tests.migrate.mapping.test_gluoncv import _gluon
        net = _gluon(model_zoo, "mobilenetv3_small")
        x = np.random.RandomState(0).randn(2, 3, 64, 64).astype(np.float32)
        model = _check(net, [x], tmp_path / "mbv3.py", train=False)
        assert len(model.MXNET_NAMES) == len(list(net.collect_params().keys()))

    def test_cifar_resnet20_train_mode(self, tmp_path, model_zoo):
        """GluonCV's cifar_resnet20_v1 (no torchvision twin, no dropout), random init, 32x32: eval and train
        outputs and the running statistics after one step within 1e-4 relative."""
        from tests.migrate.mapping.test_gluoncv import _gluon
        net = _gluon(model_zoo, "cifar_resnet20_v1")
        x = np.random.RandomState(0).randn(4, 3, 32, 32).astype(np.float32)
        _check(net, [x], tmp_path / "cifar20.py")

