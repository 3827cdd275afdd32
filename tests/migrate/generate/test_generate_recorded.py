"""Plain ``gluon.Block`` models generated from the graph MXNet records while they run (``RecordedBlockSource``).

``Seq2Seq`` is built the way Sockeye 2.3's ``SockeyeModel`` is (plain mxnet.gluon, no Sockeye): a plain Block whose
training forward takes (source, source_length, target, target_length) and returns ``{"logits": ...}``; hybridized
HybridBlock children (embeddings scaled and summed with fixed positional encodings, multi-head attention with the
source lengths as a softmax mask and a causal mask on the target, LayerNorm, a feed-forward block) called from Python
loops over the layers and an ``if`` on the configuration (weight tying). It generates without a wrapper and matches
MXNet within RTOL = 1e-4 of the largest MXNet value (the generate tests' tolerance): logits in eval and train mode and
the gradient of every parameter (seeded random head gradients).
"""
import math

import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet import autograd, gluon

import migrate
from migrate.generate import generate_torch
from migrate.source import record_block

RTOL = 1e-4
VOCAB, UNITS, HEADS, LAYERS, MAX_LEN = 23, 16, 2, 2, 12


class Attention(gluon.HybridBlock):
    """Multi-head dot-product attention: queries from ``x``, keys and values from ``memory`` (one packed
    projection), scores masked past each sequence's length and, for self-attention in the decoder, above the
    diagonal (a bias added before the softmax)."""

    def __init__(self, units, heads, **kwargs):
        super().__init__(**kwargs)
        self.units, self.heads = units, heads
        with self.name_scope():
            self.query = gluon.nn.Dense(units, flatten=False, use_bias=False, in_units=units)
            self.key_value = gluon.nn.Dense(2 * units, flatten=False, use_bias=False, in_units=units)
            self.out = gluon.nn.Dense(units, flatten=False, in_units=units)

    def _split_heads(self, F, x):  # (B, T, C) -> (B * H, T, C / H)
        x = F.transpose(F.reshape(x, shape=(0, 0, self.heads, -1)), axes=(0, 2, 1, 3))
        return F.reshape(x, shape=(-3, 0, 0))

    def hybrid_forward(self, F, x, memory, memory_length, bias=None):
        query = self._split_heads(F, self.query(x)) / math.sqrt(self.units // self.heads)
        key, value = F.split(self.key_value(memory), num_outputs=2, axis=2)
        scores = F.batch_dot(query, self._split_heads(F, key), transpose_b=True)  # (B * H, Tq, Tk)
        if bias is not None:
            scores = F.broadcast_add(scores, bias)
        lengths = F.repeat(memory_length, repeats=self.heads, axis=0)
        lengths = F.broadcast_like(F.expand_dims(lengths, axis=1), scores, lhs_axes=(1,), rhs_axes=(1,))
        weights = F.softmax(scores, length=lengths.astype("int32"), use_length=True, axis=-1)
        context = F.batch_dot(weights, self._split_heads(F, value))
        context = F.reshape(F.transpose(F.reshape(context, shape=(-4, -1, self.heads, 0, 0)), axes=(0, 2, 1, 3)),
                            shape=(0, 0, -1))
        return self.out(context)


class FeedForward(gluon.HybridBlock):
    def __init__(self, units, hidden, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.ff1 = gluon.nn.Dense(hidden, flatten=False, activation="relu", in_units=units)
            self.ff2 = gluon.nn.Dense(units, flatten=False, in_units=hidden)

    def hybrid_forward(self, F, x):
        return self.ff2(self.ff1(x))


class EncoderLayer(gluon.HybridBlock):
    def __init__(self, units, heads, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.norm_attention = gluon.nn.LayerNorm(in_channels=units)
            self.attention = Attention(units, heads)
            self.norm_ff = gluon.nn.LayerNorm(in_channels=units)
            self.ff = FeedForward(units, 2 * units)

    def hybrid_forward(self, F, x, length):
        normed = self.norm_attention(x)
        x = x + self.attention(normed, normed, length)
        return x + self.ff(self.norm_ff(x))


class DecoderLayer(gluon.HybridBlock):
    def __init__(self, units, heads, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.norm_self = gluon.nn.LayerNorm(in_channels=units)
            self.self_attention = Attention(units, heads)
            self.norm_source = gluon.nn.LayerNorm(in_channels=units)
            self.source_attention = Attention(units, heads)
            self.norm_ff = gluon.nn.LayerNorm(in_channels=units)
            self.ff = FeedForward(units, 2 * units)

    def hybrid_forward(self, F, x, length, encoded, source_length, causal):
        normed = self.norm_self(x)
        x = x + self.self_attention(normed, normed, length, causal)
        x = x + self.source_attention(self.norm_source(x), encoded, source_length)
        return x + self.ff(self.norm_ff(x))


def _positions(length, units) -> np.ndarray:
    """Sockeye's fixed sinusoidal positional encodings, (length, units)."""
    steps = np.arange(length)[:, None] / np.power(10000, np.arange(0, units, 2) / units)[None, :]
    return np.concatenate([np.sin(steps), np.cos(steps)], axis=1).astype(np.float32)


class PositionalEmbedding(gluon.HybridBlock):
    """Adds Sockeye's fixed positional encodings (a constant parameter) to embedded tokens."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.weight = self.params.get_constant("weight", _positions(MAX_LEN, UNITS))

    def hybrid_forward(self, F, x, weight):
        steps = F.contrib.arange_like(x, axis=1)
        return F.broadcast_add(x, F.expand_dims(F.Embedding(steps, weight, input_dim=MAX_LEN, output_dim=UNITS), 0))


class OutputLayer(gluon.HybridBlock):
    """Sockeye's output layer: logits from a weight given (tied to the embedding) or its own, and its bias."""

    def __init__(self, own_weight, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.bias = self.params.get("bias", shape=(VOCAB,), init="zeros")
            self.weight = self.params.get("weight", shape=(VOCAB, UNITS)) if own_weight else None

    def hybrid_forward(self, F, x, tied=None, bias=None, weight=None):
        return F.FullyConnected(x, tied if weight is None else weight, bias, num_hidden=VOCAB, flatten=False)


class Seq2Seq(gluon.Block):
    """A Sockeye-style translation model: a plain Block over HybridBlock parts, as ``SockeyeModel`` is."""

    def __init__(self, tie_weights=True, **kwargs):
        super().__init__(**kwargs)
        self.tie_weights = tie_weights
        with self.name_scope():
            self.embed_source = gluon.nn.Embedding(VOCAB, UNITS)
            self.embed_target = gluon.nn.Embedding(VOCAB, UNITS, params=self.embed_source.params)  # shared, tied
            self.source_positions = PositionalEmbedding()
            self.target_positions = PositionalEmbedding()
            self.encoder = gluon.nn.HybridSequential()
            self.decoder = gluon.nn.HybridSequential()
            for _ in range(LAYERS):
                self.encoder.add(EncoderLayer(UNITS, HEADS))
                self.decoder.add(DecoderLayer(UNITS, HEADS))
            self.final_norm = gluon.nn.LayerNorm(in_channels=UNITS)
            self.output = OutputLayer(own_weight=not tie_weights)

    def forward(self, source, source_length, target, target_length):
        encoded = self.source_positions(self.embed_source(source.squeeze(axis=2)) * math.sqrt(UNITS))
        for layer in self.encoder:
            encoded = layer(encoded, source_length)
        steps = mx.nd.contrib.arange_like(target.squeeze(axis=2), axis=1)
        causal = mx.nd.broadcast_greater(steps.expand_dims(0), steps.expand_dims(1)).expand_dims(0) * -1e9
        decoded = self.target_positions(self.embed_target(target.squeeze(axis=2)) * math.sqrt(UNITS))
        for layer in self.decoder:
            decoded = layer(decoded, target_length, encoded, source_length, causal)
        decoded = self.final_norm(decoded)
        if self.tie_weights:
            return {"logits": self.output(decoded, self.embed_source.weight.data())}
        return {"logits": self.output(decoded)}


def seq2seq(tie_weights=True, hybridize=True, seed=0):
    mx.random.seed(seed)
    net = Seq2Seq(tie_weights, prefix="seq2seq_")
    net.initialize(mx.init.Xavier(magnitude=2.0))
    if hybridize:  # Sockeye trains hybridized; the recording runs the children op by op
        net.hybridize()
    return net


def seq2seq_inputs(batch=2, source_steps=7, target_steps=6, seed=0) -> list:
    rng = np.random.RandomState(seed)
    return [rng.randint(1, VOCAB, (batch, source_steps, 1)).astype(np.float32),
            np.array([source_steps, source_steps - 3][:batch], np.float32),
            rng.randint(1, VOCAB, (batch, target_steps, 1)).astype(np.float32),
            np.array([target_steps, target_steps - 2][:batch], np.float32)]


def _relative(want: np.ndarray, got: np.ndarray, what: str) -> float:
    assert want.shape == got.shape, f"{what}: shape {got.shape}, MXNet {want.shape}"
    return float(np.abs(want - got).max() / max(np.abs(want).max(), 1e-12))


def _mxnet_logits_and_gradients(net, inputs, train: bool):
    with autograd.record(train_mode=train):
        logits = net(*[mx.nd.array(x) for x in inputs])["logits"]
    head = np.random.RandomState(5).standard_normal(logits.shape).astype(np.float32)
    logits.backward(mx.nd.array(head))
    grads = {name: p.grad().asnumpy() for name, p in net.collect_params().items() if p.grad_req != "null"}
    return logits.asnumpy(), head, grads


def _largest_differences(net, model, inputs) -> dict:
    """Largest relative difference of the logits and of each parameter gradient, eval and train mode."""
    out = {}
    for train in (False, True):
        want, head, want_grads = _mxnet_logits_and_gradients(net, inputs, train)
        model.train(train)
        model.zero_grad()
        got = model(*[torch.from_numpy(x) for x in inputs])
        got = got[0] if isinstance(got, tuple) else got
        got.backward(torch.from_numpy(head))
        mode = "train" if train else "eval"
        out[f"{mode} logits"] = _relative(want, got.detach().numpy(), "logits")
        named = dict(model.named_parameters())
        for name, grad in want_grads.items():
            mine = named[model.MXNET_NAMES[name]].grad
            out[f"{mode} gradient {name}"] = _relative(grad, np.zeros_like(grad) if mine is None else mine.numpy(),
                                                       name)
    return out


class TestSockeyeStyle:
    """A Sockeye-style plain Block generates without a wrapper and computes what MXNet computes."""

    @pytest.mark.parametrize("tie_weights", [True, False])
    def test_logits_and_every_gradient(self, tmp_path, tie_weights):
        """Logits (eval and train) and every parameter gradient within 1e-4 of MXNet; the module takes the four
        inputs by the forward's names."""
        net, inputs = seq2seq(tie_weights), seq2seq_inputs()
        model = generate_torch(net, [x.shape for x in inputs], tmp_path / "seq2seq.py")
        diffs = _largest_differences(net, model, inputs)
        worst = max(diffs, key=diffs.get)
        assert diffs[worst] <= RTOL, f"{worst}: relative difference {diffs[worst]:.3g}"
        trained = [n for n, p in net.collect_params().items() if p.grad_req != "null"]
        assert len([k for k in diffs if k.startswith("train gradient")]) == len(trained) == 64 + (not tie_weights)
        text = (tmp_path / "seq2seq.py").read_text()
        assert "def forward(self, source, source_length, target, target_length):" in text

    def test_recorded_on_other_inputs_runs_any_input(self, tmp_path):
        """Recorded on one batch, the module computes MXNet's logits on another batch of the same shapes (no
        data-dependent path: the notes say only that the graph was recorded, and target_length is read)."""
        net = seq2seq()
        source = record_block(net, [mx.nd.array(x) for x in seq2seq_inputs(seed=1)])
        assert len(source.notes) == 1 and source.notes[0].startswith("recorded: Gluon Block Seq2Seq ran once")
        inputs = seq2seq_inputs(seed=2)
        model = generate_torch(source, [x.shape for x in inputs], tmp_path / "seq2seq.py").eval()
        want = net(*[mx.nd.array(x) for x in inputs])["logits"].asnumpy()
        with torch.no_grad():
            got = model(*[torch.from_numpy(x) for x in inputs]).numpy()
        assert _relative(want, got, "logits") <= RTOL

    def test_name_mapping_and_verify(self, tmp_path):
        """name_mapping of the recorded Block onto its generated module maps every parameter; verify compares every
        matched node (none skipped) within 1e-5. (Untied output weights: the tied output layer's bias is read by a
        function call of the generated forward, no layer whose output a hook can see.)"""
        net, inputs = seq2seq(tie_weights=False), seq2seq_inputs()
        shapes = [x.shape for x in inputs]
        model = generate_torch(net, shapes, tmp_path / "seq2seq.py")
        mapping = migrate.name_mapping(net, model, shapes)
        assert mapping.ok and not mapping.unmatched_mx and not mapping.unmatched_torch
        assert set(mapping) == set(net.collect_params().keys())
        report = migrate.verify(net, model, mapping, shapes)
        assert report.verified and report.max_abs_diff <= 1e-5, report.first_divergence
        assert len(report.rows) >= 4 * LAYERS


class DataDependent(gluon.Block):
    """A Block whose forward branches on a value of its input and trims the batch to its longest sequence."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = gluon.nn.Dense(3, flatten=False, in_units=4)

    def forward(self, x, length):
        steps = int(length.max().asscalar())  # a length read from the data
        x = self.dense(x[:, :steps])
        if x.sum() > 0:  # a Python if on an NDArray's value
            return x * 2
        return x - 1


class TestDataDependent:
    def test_module_holds_the_recorded_path(self, tmp_path):
        """Recorded where the sum is positive and the longest length 3: the notes name both lines of the forward;
        the module repeats that path (x * 2, 3 steps), so on an input that takes the other branch it differs from
        MXNet, as the notes say."""
        net = DataDependent(prefix="dd_")
        net.initialize(mx.init.One())
        x = np.ones((2, 5, 4), np.float32)
        source = record_block(net, [mx.nd.array(x), mx.nd.array([3, 2])])
        reads = [n for n in source.notes if n.startswith("data-dependent")]
        assert len(reads) == 1 and reads[0].count("test_generate_recorded.py:") == 2, source.notes
        model = generate_torch(source, [(2, 5, 4), (2,)], tmp_path / "dd.py").eval()
        assert "data-dependent" in (tmp_path / "dd.py").read_text()
        with torch.no_grad():
            same = model(torch.from_numpy(x), torch.tensor([3.0, 2.0])).numpy()
            other = model(torch.from_numpy(-x), torch.tensor([5.0, 5.0])).numpy()
        np.testing.assert_allclose(same, net(mx.nd.array(x), mx.nd.array([3, 2])).asnumpy(), rtol=1e-6)
        want_other = net(mx.nd.array(-x), mx.nd.array([5, 5])).asnumpy()
        assert other.shape == (2, 3, 3) and want_other.shape == (2, 5, 3)
