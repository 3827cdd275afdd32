"""``RecordedBlockSource``: a plain gluon.Block read as the graph MXNet records while it runs (``record_block``):
the names the graph gets back, what the run did that a graph cannot hold, and the errors."""
import re
from unittest import mock

import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet import autograd, gluon

import migrate
from migrate.errors import InputShapeError, ModelTypeError
from migrate.generate import generate_torch
from migrate.mapping.generated_mapping import generated_mapping
from migrate.source import EXPORTED_WITH_MXNET, RecordedBlockSource, load_mxnet, record_block
from migrate.source.live import forced_training_graph
from mxformats.symbol import FORCED_TRAINING


class Scaled(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = gluon.nn.Dense(4, flatten=False, in_units=4)

    def hybrid_forward(self, F, x):
        return F.tanh(self.dense(x)) * 2 + 1


class Net(gluon.Block):
    """Dense, a parameterless Activation block, a hybridized child, a frozen parameter transformed in forward, an
    array made in forward and one stored on the block."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = gluon.nn.Dense(4, flatten=False, in_units=3)
            self.act = gluon.nn.Activation("relu")
            self.scaled = Scaled()
            self.scale = self.params.get("scale", shape=(4,), init=mx.init.Constant(0.5), grad_req="null")
        self.offset = mx.nd.ones((4,)) * 3

    def forward(self, tokens, weights):
        x = self.act(self.dense(tokens)) * (self.scale.data() * 2)
        x = x + mx.nd.arange(4) + self.offset
        return self.scaled(x) * weights.expand_dims(-1)


def _net(hybridize=True):
    mx.random.seed(0)
    net = Net(prefix="net_")
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.scaled.hybridize()
        net(mx.nd.ones((2, 5, 3)), mx.nd.ones((2, 5)))
    return net


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    return [rng.randn(2, 5, 3).astype(np.float32), rng.rand(2, 5).astype(np.float32)]


class TestNames:
    def test_parameters_inputs_and_ops_named(self):
        """Variables carry the parameter names and forward's argument names; ops the name of the block that ran
        them (a block's only op ``<prefix>fwd``, else ``<prefix><op><n>``); the frozen scale is read by a recorded
        op, not baked; the two arrays made without recorded values are the constants, with their values."""
        source = record_block(_net(), [mx.nd.array(x) for x in _inputs()])
        assert isinstance(source, RecordedBlockSource) and source.reader == EXPORTED_WITH_MXNET
        assert source.input_names == ["tokens", "weights"] == source.used_inputs
        nodes = source.document["nodes"]
        ops = {n["name"]: n["op"] for n in nodes if n["op"] != "null"}
        assert ops["net_dense0_fwd"] == "FullyConnected" and ops["net_relu0_fwd"] == "Activation"
        assert ops["net_scaled0_dense0_fwd"] == "FullyConnected" and ops["net_scaled0_tanh0"] == "tanh"
        readers = {nodes[e[0]]["name"]: n["op"] for n in nodes for e in n["inputs"]}
        assert readers["net_scale"] == "_mul_scalar"
        assert source.constants == ["constant0", "constant1"] and source.aux_names == source.constants
        values = sorted(source.params[c].asnumpy().tolist() for c in source.constants)
        assert values == [[0.0, 1.0, 2.0, 3.0], [3.0, 3.0, 3.0, 3.0]]
        assert set(source.params) == {p for p in _net().collect_params().keys()} | {"constant0", "constant1"}

    def test_load_mxnet_records_a_plain_block(self):
        """load_mxnet reads a plain Block as a RecordedBlockSource, recorded on ones of the shapes (said in the
        notes); a hybridized child is hybridized again afterwards (recording it shows one _CachedOp)."""
        net = _net()
        source = load_mxnet(net, [(2, 5, 3), (2, 5)], [np.float32, np.float32])
        assert isinstance(source, RecordedBlockSource)
        assert source.notes == [f"recorded: Gluon Block Net ran once on ones of the given shapes (shapes "
                                f"[(2, 5, 3), (2, 5)]) under mx.autograd.record; the module holds the operations of "
                                f"that run", "constants: 2 array(s) forward made from no recorded value "
                                f"(mx.nd.zeros, eye, arange ...) are buffers of the module (constant0, constant1)"]
        x = mx.nd.ones((2, 5, 4))
        x.attach_grad()
        with autograd.record():
            out = net.scaled(x)
        assert '"_CachedOp"' in autograd.get_symbol(out).tojson()

    def test_generated_module_equals_mxnet(self, tmp_path):
        """The generated module computes MXNet's output on another input (1e-6), the constants as buffers."""
        net = _net()
        model = generate_torch(net, [(2, 5, 3), (2, 5)], tmp_path / "net.py").eval()
        assert sorted(name for name, _ in model.named_buffers()) == ["constant0", "constant1"]
        x = _inputs(seed=3)
        with torch.no_grad():
            got = model(*[torch.from_numpy(a) for a in x]).numpy()
        np.testing.assert_allclose(got, net(*[mx.nd.array(a) for a in x]).asnumpy(), rtol=0, atol=1e-6)


class Centred(gluon.Block):
    """GluonTS draws its samples inside ``autograd.pause()``: a mean taken there is a value without gradient."""

    def __init__(self, off=False, **kwargs):
        super().__init__(**kwargs)
        self.off = off
        with self.name_scope():
            self.dense = gluon.nn.Dense(3, flatten=False, in_units=4)

    def forward(self, x):
        if self.off:
            autograd.set_recording(False)
            centre = x.mean(axis=1, keepdims=True)
            autograd.set_recording(True)
        else:
            with autograd.pause():
                centre = x.mean(axis=1, keepdims=True)
        return self.dense(mx.nd.broadcast_sub(x, centre))


class TestPause:
    def test_pause_recorded_through(self, tmp_path):
        """Ops inside autograd.pause() are recorded, a BlockGrad where the dense reads their result: on another
        input the module's output and input gradient equal MXNet's (1e-6); no note."""
        net = Centred(prefix="c_")
        net.initialize(mx.init.Xavier())
        source = record_block(net, [mx.nd.ones((2, 6, 4))])
        assert "BlockGrad" in {n["op"] for n in source.document["nodes"]} and len(source.notes) == 1
        model = generate_torch(source, [(2, 6, 4)], tmp_path / "c.py").eval()
        x = np.random.RandomState(1).randn(2, 6, 4).astype(np.float32)
        head = np.random.RandomState(2).randn(2, 6, 3).astype(np.float32)
        mx_x = mx.nd.array(x)
        mx_x.attach_grad()
        with autograd.record():
            want = net(mx_x)
        want.backward(mx.nd.array(head))
        torch_x = torch.from_numpy(x).requires_grad_()
        got = model(torch_x)
        got.backward(torch.from_numpy(head))
        np.testing.assert_allclose(got.detach().numpy(), want.asnumpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(torch_x.grad.numpy(), mx_x.grad.asnumpy(), rtol=0, atol=1e-6)

    def test_recording_off_noted(self):
        """Ops run with set_recording(False) on recorded values are named (file:line) in the notes: their result
        is a constant of the graph."""
        net = Centred(off=True, prefix="c_")
        net.initialize(mx.init.Xavier())
        source = record_block(net, [mx.nd.ones((2, 6, 4))])
        paused = [n for n in source.notes if n.startswith("paused:")]
        assert len(paused) == 1 and re.search(r"test_recorded_block\.py:\d+ \(forward\)", paused[0]), source.notes
        assert source.constants == ["constant0"]


class GroupNormByBatchNorm(gluon.HybridBlock):
    """GluonCV's GroupNorm: a BatchNorm over the groups in a training mode the forward forces; then a Dropout forced
    likewise (``p`` 0.5 where given) and a BatchNorm of the Block's own, which follows the mode."""

    def __init__(self, dropout=False, own_norm=False, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        with self.name_scope():
            self.norm = gluon.nn.BatchNorm(in_channels=4) if own_norm else None

    def hybrid_forward(self, F, x):
        with autograd.train_mode():
            y = x.reshape((1, -1, 0, 0))
            groups = y.shape[1]
            y = F.BatchNorm(y, F.ones(groups), F.zeros(groups), F.zeros(groups), F.ones(groups), fix_gamma=True,
                            momentum=0)
            if self.dropout:
                y = F.Dropout(y, p=0.5)
        y = y.reshape_like(x)
        return self.norm(y) if self.norm is not None else y


def _forced(net, x, tmp_path):
    """(source, model, the Block's output): ``net`` recorded on ``x`` and generated."""
    net.initialize(mx.init.Uniform(1.0))
    source = record_block(net, [mx.nd.array(x)])
    return source, generate_torch(source, [x.shape], tmp_path / "gn.py"), net(mx.nd.array(x)).asnumpy()


class TestTrainingMode:
    X = np.random.RandomState(0).rand(2, 4, 3, 3).astype(np.float32)

    def test_forced_training_mode_noted(self, tmp_path):
        """A BatchNorm run under autograd.train_mode() is named (op, file:line) and marked in the graph: the module
        computes the Block's output in eval mode and in training mode (1e-6), with the batch's statistics, and keeps
        no statistics of it."""
        source, model, want = _forced(GroupNormByBatchNorm(), self.X, tmp_path)
        trained = [n for n in source.notes if n.startswith("training mode:")]
        assert len(trained) == 1 and re.search(r"BatchNorm at .*test_recorded_block\.py:\d+ \(hybrid_forward\)",
                                               trained[0]), source.notes
        norms = [n for n in source.document["nodes"] if n["op"] == "BatchNorm"]
        assert [n["attrs"].get(FORCED_TRAINING) for n in norms] == ["True"]
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            for mode in ("eval", "train"):
                got = getattr(model, mode)()(torch.from_numpy(self.X)).numpy()
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=mode)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())

    def test_forced_dropout_drops_in_eval_mode(self, tmp_path):
        """A Dropout forced into training mode gets MXNet's mode="always": the module drops in eval mode too (about
        half the values zero, the rest doubled), as the Block does."""
        source, model, want = _forced(GroupNormByBatchNorm(dropout=True), self.X, tmp_path)
        dropout = [n for n in source.document["nodes"] if n["op"] == "Dropout"]
        assert [n["attrs"]["mode"] for n in dropout] == ["always"]
        assert 0.2 < (want == 0).mean() < 0.8
        with torch.no_grad():
            got = model.eval()(torch.from_numpy(self.X)).numpy()
        assert 0.2 < (got == 0).mean() < 0.8

    @pytest.mark.parametrize("own_norm", [False, True])
    def test_verify_runs_forced_ops_in_training_mode(self, tmp_path, own_norm):
        """verify: MXNet runs the graph in training mode, the ops the Block did not force made to compute as in eval
        (its own BatchNorm with use_global_stats): each node within 1e-5; without that, MXNet's eval run reads the
        forced BatchNorm's zero running statistics and verify fails there."""
        source, model, _ = _forced(GroupNormByBatchNorm(own_norm=own_norm), self.X, tmp_path)
        report = migrate.verify(source, model, generated_mapping(source, model), [self.X.shape])
        assert report.verified and report.max_abs_diff <= 1e-5 and len(report.rows) == 1 + own_norm, str(report)
        graph = forced_training_graph(source.document)
        norms = [n["attrs"] for n in graph["nodes"] if n["op"] == "BatchNorm"]
        assert [a.get(FORCED_TRAINING) for a in norms] == ["True"] + [None] * own_norm
        assert [a.get("use_global_stats") for a in norms[1:]] == ["True"] * own_norm
        with mock.patch("migrate.source.live.forced_training_graph", return_value=None):
            failed = migrate.verify(source, model, generated_mapping(source, model), [self.X.shape])
        assert not failed.ok and failed.first_divergence.mx_node.endswith("batchnorm0"), str(failed)


class _Returns(gluon.Block):
    def __init__(self, what, **kwargs):
        super().__init__(**kwargs)
        self.what = what
        with self.name_scope():
            self.dense = gluon.nn.Dense(2, in_units=3)

    def forward(self, x):
        y = self.dense(x)
        if self.what == "fails":
            return y.reshape((7, -1))
        return {"none": (y, None), "float": (y, 1.5), "input": x}[self.what]


class _WithSymbolBlock(gluon.Block):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        data = mx.sym.var("data")  # more than 2 nodes: MXNet records the call as one _CachedOp (inline_limit 2)
        hidden = mx.sym.relu(mx.sym.FullyConnected(data, num_hidden=2, name="fc0"))
        self.inner = gluon.SymbolBlock(mx.sym.tanh(mx.sym.FullyConnected(hidden, num_hidden=2, name="fc1")), data)

    def forward(self, x):
        return self.inner(x) * 2


class _Traced(gluon.HybridBlock):
    def hybrid_forward(self, F, x):
        return x * 2 if x.sum() > 0 else x


def _initialized(block):
    block.initialize()
    return block


ERRORS = [
    ("an output is None", lambda: _initialized(_Returns("none")), ModelTypeError,
     r"block _Returns returns None as its output\[1\]"),
    ("an output is not an array", lambda: _initialized(_Returns("float")), ModelTypeError,
     "returns a float among its outputs"),
    ("forward computes nothing", lambda: _initialized(_Returns("input")), ModelTypeError,
     "its forward recorded no operation"),
    ("forward fails on the input", lambda: _initialized(_Returns("fails")), InputShapeError,
     r"block _Returns rejected inputs of shapes \[\(2, 3\)\]: NDArray.Reshape: Check failed.*give the shapes and "
     r"inputs the model accepts"),
    ("parameters not initialized", lambda: _Returns("input"), ModelTypeError,
     "parameters are not initialized .* call block.initialize"),
    ("a SymbolBlock child", lambda: _initialized(_WithSymbolBlock()), ModelTypeError,
     "1 child call.* ran as one _CachedOp .*SymbolBlock"),
]


@pytest.mark.parametrize("desc,make,error,pattern", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(desc, make, error, pattern):
    """Each bad Block gets a migrate error naming it, what was wrong and what to do."""
    with pytest.raises(error, match=pattern):
        record_block(make(), [mx.nd.ones((2, 3))])


def test_too_many_inputs():
    """More inputs than forward takes: the names forward takes and the count given."""
    with pytest.raises(InputShapeError, match=r"forward takes 1 to 1 positional input\(s\) \['x'\]; received 2"):
        record_block(_initialized(_Returns("input")), [mx.nd.ones((2, 3)), mx.nd.ones((2, 3))])


def test_a_hybrid_block_that_cannot_be_traced():
    """A HybridBlock that branches on a value fails to trace: the error names record_block, which reads it (the
    branch it took noted with the line)."""
    with pytest.raises(ModelTypeError, match=r"cannot be traced as a symbol graph .*migrate.source.record_block"):
        load_mxnet(_Traced(), [(2, 3)], [np.float32])
    source = record_block(_Traced(), [mx.nd.ones((2, 3))])
    assert [op for op in (n["op"] for n in source.document["nodes"]) if op != "null"] == ["_mul_scalar"]
    assert re.search(r"data-dependent: .*test_recorded_block\.py:\d+ \(hybrid_forward\)", source.notes[1])
