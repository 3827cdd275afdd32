"""Nodes computed by function calls on a Gluon block's own parameters (GluonCV's SSD: its input scale, the Normalize
scale, the anchor generators; YOLOv3's anchor sizes; BERT's position weight) are verified node by node again, as
before the generated modules were made of layers: a block holding only such parameters becomes a small module with its
own forward (``Normalize``, ``AnchorGenerator``), and a parameter of a block holding layers is read from the forward
statement that reads it. The generated file holds no verification code; keys, ``MXNET_NAMES`` and numbers stay.
"""
import json

import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet import gluon

import gluon_lr
import migrate
import migrate.cli
from migrate.generate import generate_torch, generator
from migrate.mapping.generated_mapping import generated_mapping
from migrate.source.live import mxnet_executor
from migrate.source.reading import WITHOUT_MXNET_VARIABLE, model_source
from tests.migrate.generate.test_generate import (MiscBlock, OpsBlock, RecurrentNet, TransformerBlock, _check,
                                                  _small_net, generate_module)
from tests.migrate.generate.test_generate_zoo import small_bert, transformer_decoder

SHAPE = (2, 3, 16, 16)


class Normalize(gluon.HybridBlock):
    """GluonCV's SSD ``Normalize``: channels L2-normalized, times a learned per-channel scale."""

    def __init__(self, channels, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.scale = self.params.get("normalize_scale", shape=(1, channels, 1, 1), init=mx.init.Constant(20.0))

    def hybrid_forward(self, F, x, scale):
        return F.broadcast_mul(F.L2Normalization(x, mode="channel", eps=1e-5), scale)


class AnchorGenerator(gluon.HybridBlock):
    """GluonCV's ``SSDAnchorGenerator``: anchors computed for a larger map, a constant, cut to the feature map's."""

    def __init__(self, index, size, **kwargs):
        super().__init__(**kwargs)
        anchors = np.random.RandomState(index).uniform(0, 1, (1, 1, size, size, 8))
        self.anchors = self.params.get_constant(f"anchor_{index}", mx.nd.array(anchors))

    def hybrid_forward(self, F, x, anchors):
        return F.slice_like(anchors, x * 0, axes=(2, 3)).reshape((1, -1, 4))


class PriorBoxes(gluon.HybridBlock):
    """A parameter-free anchor generator: MXNet's MultiBoxPrior over the feature map."""

    def hybrid_forward(self, F, x):
        return F.contrib.MultiBoxPrior(x, sizes=(0.5, 0.25), ratios=(1, 2))


class Extractor(gluon.HybridBlock):
    """GluonCV's ``VGGAtrousExtractor`` in small: an input scale of its own (a block holding layers), two
    convolutions, ``Normalize`` on the first one's output."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.init_scale = self.params.get_constant(
                "init_scale", mx.nd.array([0.229, 0.224, 0.225]).reshape((1, 3, 1, 1)))
            self.stage1 = gluon.nn.Conv2D(8, 3, padding=1, in_channels=3)
            self.norm = Normalize(8)
            self.stage2 = gluon.nn.Conv2D(8, 3, strides=2, padding=1, in_channels=8)

    def hybrid_forward(self, F, x, init_scale):
        x = F.relu(self.stage1(F.broadcast_mul(x, init_scale)))
        return self.norm(x), F.relu(self.stage2(x))


class YoloHead(gluon.HybridBlock):
    """GluonCV's ``YOLOOutputV3`` in small: a prediction convolution and the anchor sizes, a constant of the same
    block, read by a function call."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.prediction = gluon.nn.Conv2D(4, 1, in_channels=8)
            self.anchors = self.params.get_constant("anchor_sizes", mx.nd.array([[[[10, 13], [16, 30]]]]))

    def hybrid_forward(self, F, x, anchors):
        boxes = F.transpose(F.reshape(self.prediction(x), shape=(0, 2, 2, -1)), axes=(0, 3, 1, 2))
        return F.broadcast_mul(F.exp(boxes), anchors)


class SSDLike(gluon.HybridBlock):
    """An SSD with a YOLO head: scores per feature map, anchors from parameter-holding generators and a
    parameter-free one, anchor-sized boxes."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = Extractor()
            self.class_predictors = gluon.nn.HybridSequential()
            self.class_predictors.add(gluon.nn.Conv2D(6, 3, padding=1, in_channels=8),
                                      gluon.nn.Conv2D(6, 3, padding=1, in_channels=8))
            self.anchor_generators = gluon.nn.HybridSequential()
            self.anchor_generators.add(AnchorGenerator(0, 16), AnchorGenerator(1, 10))
            self.priors = PriorBoxes()
            self.head = YoloHead()

    def hybrid_forward(self, F, x):
        maps = self.features(x)
        scores = [F.flatten(F.transpose(p(m), axes=(0, 2, 3, 1))) for p, m in zip(self.class_predictors, maps)]
        anchors = [g(m) for g, m in zip(self.anchor_generators, maps)]
        return F.concat(*scores, dim=1), F.concat(*anchors, dim=1), self.priors(maps[1]), self.head(maps[1])


# MXNet node -> the torch site verify reads it at: the small modules, and the keys of parameters the code reads
PARAMETER_NODES = {"ssd_extractor0_broadcast_mul0": "features.init_scale",
                   "ssd_extractor0_normalize0_broadcast_mul0": "features.norm",
                   "ssd_anchorgenerator0_slice_like0": "anchor_generators.0",
                   "ssd_anchorgenerator1_slice_like0": "anchor_generators.1",
                   "ssd_yolohead0_broadcast_mul0": "head.anchors"}


def _ssd_like():
    net = SSDLike(prefix="ssd_")
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.features.norm.scale.set_data(mx.nd.array(np.random.RandomState(2).uniform(5, 20, (1, 8, 1, 1))))
    net.hybridize()
    return net


def _image(seed=0):
    return np.random.RandomState(seed).uniform(-1, 1, SHAPE).astype(np.float32)


@pytest.fixture(scope="module")
def ssd(tmp_path_factory):
    """(the SSD-like net, its generated module, the module's file)."""
    net = _ssd_like()
    path = tmp_path_factory.mktemp("ssd_like") / "ssd_like.py"
    return net, _check(net, [_image()], path, train=False), path


def _verified(net, model, shapes, dtypes=None, **kwargs):
    dtypes = dtypes or ["float32"] * len(shapes)
    mapping = generated_mapping(model_source(net, shapes, dtypes), model)
    return migrate.verify(net, model, mapping, shapes, input_dtypes=dtypes, **kwargs)


def recorded_before(net, model, shapes, dtypes=None) -> set:
    """The MXNet nodes whose output the generated forward recorded for verify before its modules were made of layers
    (commit 742bee0's ``_record`` rule): the parameters a node reads are one module's, and it takes data."""
    source = model_source(net, shapes, dtypes or ["float32"] * len(shapes))
    nodes, keys = source.document["nodes"], model.MXNET_NAMES
    out = set()
    for node in nodes:
        if node["op"] == "null":
            continue
        inputs = [nodes[e[0]] for e in node["inputs"]]
        owners = {keys[n["name"]].rpartition(".")[0] for n in inputs
                  if n["op"] == "null" and n["name"] in keys and "." in keys[n["name"]]}
        if len(owners) == 1 and any(n["op"] != "null" or n["name"] not in keys for n in inputs):
            out.add(node["name"])
    return out


class TestParameterNodes:
    def test_blocks_of_parameters_are_modules(self, ssd):
        """Normalize and the anchor generators are modules of their own (one class per Gluon class, their forward
        the node's op on their tensor); keys and MXNET_NAMES as before (MXNet's parameters, Gluon's tree)."""
        net, model, path = ssd
        text = path.read_text()
        assert text.count("class Normalize(nn.Module):") == 1 and text.count("class AnchorGenerator(nn.Module):") == 1
        assert "        return (x * self.scale)" in text
        assert "        return mx_slice_like(self.anchors, x, (2, 3))" in text
        assert "norm=Normalize((1, 8, 1, 1))" in text and "AnchorGenerator((1, 1, 10, 10, 8))" in text
        assert "x1 = self.features.norm(x1)" in text and "x3 = self.anchor_generators[1](x3)" in text
        assert "record" not in text and "hook" not in text
        assert type(model.features.norm).__name__ == "Normalize" and list(model.features.norm.state_dict()) == ["scale"]
        assert sorted(model.MXNET_NAMES) == sorted(net.collect_params())
        assert sorted(model.MXNET_NAMES.values()) == sorted(model.state_dict())
        assert model.MXNET_NAMES["ssd_extractor0_normalize0_normalize_scale"] == "features.norm.scale"
        assert model.MXNET_NAMES["ssd_anchorgenerator1_anchor_1"] == "anchor_generators.1.anchors"
        assert model.MXNET_NAMES["ssd_extractor0_init_scale"] == "features.init_scale"

    def test_forward_hook_sees_the_node(self, ssd):
        """A forward hook on the Normalize module gets MXNet's output of the scaling node (1e-5 relative)."""
        net, model, _ = ssd
        seen = []
        handle = model.features.norm.register_forward_hook(lambda m, i, out: seen.append(out.detach().numpy()))
        try:
            with torch.no_grad():
                model.eval()(torch.from_numpy(_image()))
        finally:
            handle.remove()
        source = model_source(net, [SHAPE], ["float32"])
        executor, _ = mxnet_executor(source.symbol, {**source.params, "data": mx.nd.array(_image())},
                                     ["ssd_extractor0_normalize0_broadcast_mul0"], with_final=False)
        want = executor.forward(is_train=False)[0].asnumpy()
        assert len(seen) == 1 and np.abs(seen[0] - want).max() <= 1e-5 * np.abs(want).max()

    def test_verify_compares_every_node(self, ssd):
        """verify compares each node, 0 skipped: the modules by hooks, the scale and anchor sizes read by the forward
        (named by their keys), every node the old recording compared among them; all within 1e-5."""
        net, model, _ = ssd
        report = _verified(net, model, [SHAPE])
        rows = {r.mx_node: r for r in report.rows}
        assert report.verified and not report.skipped and len(rows) == 10, str(report)
        assert {node: rows[node].torch_node for node in PARAMETER_NODES} == PARAMETER_NODES
        assert recorded_before(net, model, [SHAPE]) <= set(rows)
        assert all(r.max_abs_diff <= 1e-5 * max(1.0, r.scale) for r in report.rows), str(report)

    def test_verify_finds_a_wrong_statement(self, ssd, tmp_path):
        """The forward statement read for a parameter is the model's own: a file whose input scale is computed
        wrongly diverges at that node first (and leaves the file as it was)."""
        net, _, path = ssd
        text = path.read_text()
        line = "x = (data * self.features.init_scale)"
        assert text.count(line) == 1
        wrong = tmp_path / "wrong.py"
        wrong.write_text(text.replace(line, "x = (data * self.features.init_scale * 1.01)"))
        model = generate_module(wrong).SSDLike()
        model.load_state_dict(ssd[1].state_dict())
        report = _verified(net, model, [SHAPE])
        assert not report.ok and report.first_divergence.mx_node == "ssd_extractor0_broadcast_mul0", str(report)
        assert report.first_divergence.torch_node == "features.init_scale" and not report.skipped
        assert "forward" not in vars(model) and wrong.read_text().count("* 1.01") == 1

    def test_check_training_compares_every_node(self, ssd):
        """``check_training`` (a training step, gradients on) compares the same nodes' forward outputs, none left out,
        the scale and anchor sizes read at their statements; the model's forward is its own afterwards."""
        net, model, _ = ssd
        mapping = generated_mapping(model_source(net, [SHAPE], ["float32"]), model)
        report = migrate.check_training(net, model, [_image(2)], mapping=mapping)
        forward = {r.name: r for r in report.rows if r.kind == "forward"}
        assert report.ok and len(forward) == 10 and all(r.max_abs_diff is not None for r in forward.values()), \
            str(report)
        assert {forward[node].torch_name for node in PARAMETER_NODES} == set(PARAMETER_NODES.values())
        assert "forward" not in vars(model)

    def test_same_numbers_as_function_calls(self, ssd, tmp_path, monkeypatch):
        """The module calls compute what the function calls on the parameters computed: bit for bit, eval and train
        mode, outputs and input gradients (the file generated without the modules, as before them)."""
        net, model, _ = ssd
        monkeypatch.setattr(generator, "parameter_module", lambda *args: None)
        before = generate_torch(net, SHAPE, tmp_path / "calls.py")
        assert "class Normalize" not in (tmp_path / "calls.py").read_text()
        assert before.state_dict().keys() == model.state_dict().keys() and before.MXNET_NAMES == model.MXNET_NAMES
        for mode in ("eval", "train"):
            x, y = (torch.from_numpy(_image(1)).requires_grad_() for _ in range(2))
            got, want = getattr(model, mode)()(x), getattr(before, mode)()(y)
            assert all(torch.equal(g, w) for g, w in zip(got, want)), mode
            sum(o.sum() for o in got).backward()
            sum(o.sum() for o in want).backward()
            assert torch.equal(x.grad, y.grad), mode


class Scaled(gluon.HybridBlock):
    """A block holding a layer and a scale of its own, read by a function call: ``dense(x) * scale + 1``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = gluon.nn.Dense(4, in_units=3)
            self.scale = self.params.get("scale", shape=(1, 4), init=mx.init.Uniform(2.0))

    def hybrid_forward(self, F, x, scale):
        return F.broadcast_mul(self.dense(x), scale) + 1


class ScaledNet(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.body = Scaled()

    def hybrid_forward(self, F, x):
        return F.relu(self.body(x))


class ScaledTwin(torch.nn.Module):
    """``Scaled`` written by hand in torch: the scale read in the container's own forward."""

    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(3, 4)
        self.scale = torch.nn.Parameter(torch.zeros(1, 4))

    def forward(self, x):
        y = self.dense(x) * self.scale
        return y + 1


class ScaledNetTwin(torch.nn.Module):
    MXNET_NAMES = {"net_scaled0_dense0_weight": "body.dense.weight", "net_scaled0_dense0_bias": "body.dense.bias",
                   "net_scaled0_scale": "body.scale"}

    def __init__(self):
        super().__init__()
        self.body = ScaledTwin()

    def forward(self, x):
        return torch.relu(self.body(x))


class TestStatements:
    def test_hand_written_container_reads_its_parameter(self):
        """A hand-written twin whose container reads its own scale: the node is read at ``y = self.dense(x) *
        self.scale`` (not the container's output, ``y + 1``), equal to MXNet's; the twin's forward is its own
        again after verify."""
        net = ScaledNet(prefix="net_")
        mx.random.seed(0)
        net.initialize(mx.init.Xavier())
        twin = ScaledNetTwin()
        mapping = generated_mapping(model_source(net, [(2, 3)], ["float32"]), twin)
        report = migrate.verify(net, twin, mapping, (2, 3), in_place=True)
        rows = {r.mx_node: r for r in report.rows}
        assert report.verified and rows["net_scaled0_broadcast_mul0"].torch_node == "body.scale", str(report)
        assert rows["net_scaled0_broadcast_mul0"].max_abs_diff <= 1e-6 and "forward" not in vars(twin.body)

    def test_unreadable_source_is_skipped_not_passed(self, tmp_path):
        """A generated module whose file is gone: the parameters its code reads cannot be read, so those nodes are
        reported skipped and the model is not "verified" (the layers and modules are still compared)."""
        net = _ssd_like()
        model = generate_torch(net, SHAPE, tmp_path / "gone.py")
        (tmp_path / "gone.py").unlink()
        report = _verified(net, model, [SHAPE])
        assert report.ok and not report.verified, str(report)
        assert {r.torch_node for r in report.skipped} == {"features.init_scale", "head.anchors"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The SSD-like net and MiscBlock (a parameter of the model itself, read by ``dot``) exported with SGD settings:
    name -> (net, symbol file, params file, settings file, input shape)."""
    folder = tmp_path_factory.mktemp("exported")
    out = {}
    for name, (net, inputs) in {"ssd": (_ssd_like(), [_image()]),
                                "misc": _seeded_net(MiscBlock(prefix="misc_"), [_rng(2, 3, 4, 4)])}.items():
        net(*[mx.nd.array(x) for x in inputs])
        net.export(str(folder / name))
        trainer = gluon_lr.LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.01}, kvstore=None)
        trainer.export_settings(str(folder / f"{name}.json"))
        out[name] = (net, folder / f"{name}-symbol.json", folder / f"{name}-0000.params", folder / f"{name}.json",
                     inputs[0].shape)
    return out


class TestFiles:
    @pytest.mark.parametrize("without_mxnet", [False, True], ids=["mxnet", "without_mxnet"])
    def test_all_torch_generate_exits_0(self, exported, tmp_path, capsys, monkeypatch, without_mxnet):
        """``migrate all --torch generate`` on the SSD-like files: exit 0, with MXNet every node verified (0
        skipped) and a training step checked tensor by tensor; without MXNet (the module is the graph's own
        translation) the same file, weights and groups, not verified against itself."""
        _, symbol, params, settings, shape = exported["ssd"]
        if without_mxnet:
            monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
        out = tmp_path / "out"
        code = migrate.cli.main(["all", "--symbol", str(symbol), "--params", str(params), "--settings", str(settings),
                                 "--torch", "generate", "--input-shape", ",".join(map(str, shape)), "--out", str(out),
                                 "--json", "--quiet"] + ([] if without_mxnet else ["--check-training", "1"]))
        doc = json.loads(capsys.readouterr().out)
        assert code == 0 and (out / "model.py").is_file(), doc
        text = (out / "model.py").read_text()
        assert "class Normalize(nn.Module):" in text and "self.extractor0.normalize0.normalize(x1)" in text
        if without_mxnet:
            assert doc["verify"]["compared_with"] is None and doc["checks"]["equivalent"]
            return
        assert doc["checks"] == {"equivalent": True, "verified": True, "training": True}, doc["checks"]
        assert doc["verify"]["skipped"] == [] and doc["verify"]["nodes"] == 10
        rows = {row["mx_node"]: row["torch_node"] for row in doc["verify"]["rows"]}
        assert rows["ssd_extractor0_normalize0_broadcast_mul0"] == "extractor0.normalize0.normalize"
        assert rows["ssd_anchorgenerator1_slice_like0"] == "anchorgenerator1.anchor"

    @pytest.mark.parametrize("name", ["ssd", "misc"])
    def test_verify_without_mxnet_compares_the_same_nodes(self, exported, tmp_path, monkeypatch, name):
        """``migrate.verify`` of the files without MXNet (against the graph's translation, whose own parameter nodes
        are read as the model's are) compares the same nodes as with MXNet, 0 skipped, within 1e-5 of MXNet's."""
        net, symbol, params, _, shape = exported[name]
        model = generate_torch(net, shape, tmp_path / f"{name}.py")
        mx_report = _verified(net, model, [shape])
        monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
        files = (str(symbol), str(params))
        report = migrate.verify(files, model, generated_mapping(model_source(files, None, None), model), shape)
        assert report.ok and report.verified and mx_report.verified, str(report)
        assert [(r.mx_node, r.torch_node) for r in report.rows] == [(r.mx_node, r.torch_node) for r in mx_report.rows]
        assert abs(report.max_abs_diff - mx_report.max_abs_diff) <= 1e-5 * max([1.0] + [r.scale for r in report.rows])


def _seeded_net(net, inputs):
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.hybridize()
    net(*[mx.nd.array(x, dtype=x.dtype) for x in inputs])
    return net, inputs


def _rng(*shape):
    return np.random.RandomState(0).standard_normal(shape).astype(np.float32)


class SymbolFeatures(gluon.HybridBlock):
    """GluonCV's SSD feature expanders: a SymbolBlock (convolution, BatchNorm, ReLU written as symbols) whose
    parameters are its own, not layers', read by function calls; a Dense head."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        data = mx.sym.var("data")
        body = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="expand_conv0")
        body = mx.sym.Activation(mx.sym.BatchNorm(body, fix_gamma=False, name="expand_bn0"), act_type="relu")
        with self.name_scope():
            self.features = gluon.SymbolBlock(body, data)
            self.head = gluon.nn.Dense(2, in_units=64)

    def hybrid_forward(self, F, x):
        return self.head(self.features(x))


def _symbol_features():
    net = SymbolFeatures(prefix="sym_")
    for name, param in net.features.collect_params().items():  # Xavier refuses vectors
        param.init = mx.init.One() if name.endswith(("gamma", "var")) else mx.init.Uniform(0.2) if name.endswith(
            ("beta", "mean", "bias")) else None
    return _seeded_net(net, [_rng(2, 3, 6, 6)])


# the models the generate tests build (small ones), each (net, inputs) when called
SMALL_MODELS = {
    "ssd_like": lambda: (_ssd_like(), [_image()]),
    "ops_block": lambda: _seeded_net(OpsBlock(), [_rng(2, 4, 9, 9)]),
    "misc_block": lambda: _seeded_net(MiscBlock(), [_rng(2, 3, 4, 4)]),
    "transformer_block": lambda: _seeded_net(TransformerBlock(), [np.array([[1, 4, 7], [2, 0, 19]], np.float32)]),
    "lstm": lambda: _seeded_net(RecurrentNet(gluon.rnn.LSTM, embed=False), [_rng(3, 2, 3)]),
    "small_net": lambda: (_small_net(), [_rng(4, 2, 6, 6)]),
    "small_bert": lambda: _seeded_net(*small_bert()),
    "transformer_decoder": lambda: _seeded_net(*transformer_decoder()),
    "symbol_features": _symbol_features,
}


@pytest.mark.parametrize("name", list(SMALL_MODELS))
def test_verify_coverage(name, tmp_path):
    """The coverage scan: on each model the generate tests build, verify compares every node it compared before the
    modules were made of layers (``recorded_before``), and skips only the nodes MXNet packs with others (GluonNLP's
    attention weights, checked at the final output)."""
    net, inputs = SMALL_MODELS[name]()
    shapes, dtypes = [x.shape for x in inputs], [x.dtype.name for x in inputs]
    model = generate_torch(net, shapes, tmp_path / f"{name}.py", input_dtypes=dtypes)
    report = _verified(net, model, shapes, dtypes)
    compared = {r.mx_node for r in report.rows if not r.skipped}
    assert recorded_before(net, model, shapes, dtypes) & {r.mx_node for r in report.rows} <= compared, str(report)
    assert all(r.note.startswith("skipped: MXNet packs") for r in report.skipped), str(report)
