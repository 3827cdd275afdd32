"""simplify_graph: the exported graphs compute the same outputs with fewer nodes, and keep every parameter."""
import collections

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import pytest
import torch
from onnx.reference import ReferenceEvaluator

from migrate.onnx_export import mxnet_export, torch_export
from migrate.onnx_export.simplify import MAX_ELEMENTS, simplify_graph
from migrate.source import load_mxnet


def _raw_and_simplified(monkeypatch, make):
    """``make()``'s ONNX model as exported without simplification, then as exported."""
    with monkeypatch.context() as patch:
        for exporter in (mxnet_export, torch_export):
            patch.setattr(exporter, "simplify_graph", lambda model, params: None)
        raw = make()
    return raw, make()


def _run(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


def _readers(model) -> dict:
    """Parameter-free summary of who reads what: initializer name -> number of nodes reading it."""
    names = {t.name for t in model.graph.initializer}
    return collections.Counter(v for n in model.graph.node for v in n.input if v in names)


class _TorchViews(torch.nn.Module):
    """A view target built in the graph (Constant, Unsqueeze, Concat), a chain of reshapes and a no-op dropout."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(12, 6)
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x):  # x: (2, 3, 4)
        h = x.view(x.size(0), -1)  # Shape, Gather, Unsqueeze, Concat in the graph
        h = h.view(2, 3, 4).reshape(6, 4).reshape(2, 12)  # a chain of reshapes
        h = self.drop(h)
        return torch.relu(self.fc(h)) * 2


class TestSimplifyTorch:
    def test_same_outputs_fewer_nodes(self, monkeypatch):
        """A torch export computes the same (reference evaluator, within 1e-6) with no shape arithmetic, no Dropout,
        and one Reshape for the chain of four."""
        torch.manual_seed(0)
        model = _TorchViews()
        shapes, dtypes = [(2, 3, 4)], [np.dtype("float32")]
        raw, simple = _raw_and_simplified(
            monkeypatch, lambda: torch_export.export_torch(model, shapes, dtypes, with_weights=True))
        x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
        feeds = {raw.graph.input[0].name: x}
        np.testing.assert_allclose(_run(simple, feeds)[0], _run(raw, feeds)[0], rtol=0, atol=1e-6)
        ops = collections.Counter(n.op_type for n in simple.graph.node)
        raw_ops = collections.Counter(n.op_type for n in raw.graph.node)
        assert raw_ops["Concat"] == 1 and raw_ops["Dropout"] == 1 and raw_ops["Reshape"] == 4
        assert ops == {"Reshape": 1, "Gemm": 1, "Relu": 1, "Mul": 1}, ops
        assert _readers(simple)["fc.weight"] == _readers(raw)["fc.weight"] == 1


class TestSimplifyBert:
    """GluonNLP BERT (small) and HF BERT: the same outputs, every parameter kept, no shape arithmetic."""

    @pytest.fixture(scope="class")
    @classmethod
    def exports(cls):
        pytest.importorskip("gluonnlp")
        pytest.importorskip("transformers")
        import mxnet as mx
        from tests.migrate.mapping.test_transformers import DTYPES, SHAPES, _gluon_bert, _hf_bert
        with mx.name.NameManager():  # its own name counters: test_transformers expects 'bertencoder0_' prefixes
            net = _gluon_bert()
        model = _hf_bert()
        dtypes = [np.dtype(d) for d in DTYPES]
        patch = pytest.MonkeyPatch()
        try:
            out = {}
            for side, make in (("mxnet", lambda: mxnet_export.export_mxnet(load_mxnet(net, SHAPES, dtypes), SHAPES,
                                                                           dtypes, with_weights=True)),
                               ("torch", lambda: torch_export.export_torch(model, SHAPES, dtypes, with_weights=True))):
                out[side] = _raw_and_simplified(patch, make)
        finally:
            patch.undo()
        return out, SHAPES

    @pytest.mark.parametrize("side", ["mxnet", "torch"])
    def test_same_outputs(self, exports, side):
        """Every graph output of the simplified export equals the raw export's (reference evaluator, within 1e-5)."""
        graphs, shapes = exports
        raw, simple = graphs[side]
        rng = np.random.default_rng(0)
        stored = {t.name for t in raw.graph.initializer}
        data = [i.name for i in raw.graph.input if i.name not in stored]  # MXNet lists parameters as inputs too
        feeds = {name: rng.integers(0, 2, shape).astype(np.int64 if side == "torch" else np.float32)
                 for name, shape in zip(data, shapes)}
        for want, got in zip(_run(raw, feeds), _run(simple, feeds)):
            assert np.abs(want).max() > 0.1
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)

    @pytest.mark.parametrize("side", ["mxnet", "torch"])
    def test_parameters_kept(self, exports, side):
        """Every parameter the raw graph reads is still an initializer of the same shape, read by some node."""
        graphs, _ = exports
        raw, simple = graphs[side]
        shapes = {t.name: tuple(t.dims) for t in simple.graph.initializer}
        read = _readers(simple)
        params = [t for t in raw.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and _readers(raw)[t.name]
                  and np.prod(t.dims) > 1]
        assert len(params) >= 30
        assert all(shapes.get(t.name) == tuple(t.dims) and read[t.name] for t in params)

    @pytest.mark.parametrize("side", ["mxnet", "torch"])
    def test_no_shape_arithmetic(self, exports, side):
        """No Shape node and no Identity/Dropout is left, at least 40% of the nodes are gone, and every constant
        left is read once stored (equal ones once)."""
        graphs, _ = exports
        raw, simple = graphs[side]
        read = _readers(simple)
        constants = [t for t in simple.graph.initializer if np.prod(t.dims) <= 16 and t.data_type == 7]
        assert constants and all(read[t.name] for t in constants)
        values = [(tuple(t.dims), onnx.numpy_helper.to_array(t).tobytes()) for t in constants]
        assert len(set(values)) == len(values)
        ops = collections.Counter(n.op_type for n in simple.graph.node)
        assert ops["Shape"] == ops["Identity"] == ops["Dropout"] == 0
        assert len(simple.graph.node) <= 0.6 * len(raw.graph.node), (len(raw.graph.node), len(simple.graph.node))

    def test_mxnet_converters(self, exports):
        """MXNet's LayerNorm exports as ONNX LayerNormalization (1 + 2 per layer), not 10 nodes of arithmetic; its
        interleaved attention as Gathers of query, key and value (3 per layer, beside the 3 embeddings), even
        before simplification; after it the one Slice left is the pooler's first token (MXNet's attention converters
        and Dense shapes slice in the graph)."""
        from tests.migrate.mapping.test_transformers import LAYERS
        graphs, _ = exports
        for model in graphs["mxnet"]:
            ops = collections.Counter(n.op_type for n in model.graph.node)
            assert ops["LayerNormalization"] == 1 + 2 * LAYERS and ops["ReduceMean"] == 0
            assert ops["Gather"] == 3 + 3 * LAYERS and ops["MatMul"] == 2 * LAYERS
        assert [n.output[0] for n in graphs["mxnet"][1].graph.node if n.op_type == "Slice"] == ["bertmodel0_slice0"]


def _model(nodes, initializers, outputs):
    graph = onnx.helper.make_graph(nodes, "g", [], [onnx.helper.make_tensor_value_info(o, 0, None) for o in outputs],
                                   initializers)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


class TestSimplifyLimits:
    def test_large_constant_not_folded(self):
        """A constant computation of more than MAX_ELEMENTS elements stays a node (a shape vector is folded)."""
        big = onnx.numpy_helper.from_array(np.array([MAX_ELEMENTS + 1], np.int64), "big")
        small = onnx.numpy_helper.from_array(np.array([4], np.int64), "small")
        nodes = [onnx.helper.make_node("ConstantOfShape", ["big"], ["a"]),
                 onnx.helper.make_node("ConstantOfShape", ["small"], ["b"]),
                 onnx.helper.make_node("ReduceSum", ["a"], ["y"], keepdims=0),
                 onnx.helper.make_node("Add", ["y", "b"], ["z"])]
        model = _model(nodes, [big, small], ["z"])
        want = _run(model, {})[0]
        simplify_graph(model, params=[])
        assert [n.op_type for n in model.graph.node] == ["ConstantOfShape", "ReduceSum", "Add"]
        np.testing.assert_array_equal(_run(model, {})[0], want)

    def test_random_ops_not_merged(self):
        """Two RandomUniformLike nodes of the same input stay two; two Relu nodes become one."""
        x = onnx.numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
        nodes = [onnx.helper.make_node("RandomUniformLike", ["w"], ["r1"]),
                 onnx.helper.make_node("RandomUniformLike", ["w"], ["r2"]),
                 onnx.helper.make_node("Relu", ["r1"], ["a"]), onnx.helper.make_node("Relu", ["r1"], ["b"]),
                 onnx.helper.make_node("Sum", ["a", "b", "r2"], ["y"])]
        model = _model(nodes, [x], ["y"])
        simplify_graph(model, params=["w"])
        assert [n.op_type for n in model.graph.node] == ["RandomUniformLike", "RandomUniformLike", "Relu", "Sum"]

    def test_graph_with_subgraph_left_as_is(self):
        """A graph holding an If is not touched (a value read inside a branch is invisible to the node lists)."""
        cond = onnx.numpy_helper.from_array(np.array(True), "cond")
        two = onnx.numpy_helper.from_array(np.array([2], np.int64), "two")
        branch = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["s"], ["o"])], "b", [],
                                        [onnx.helper.make_tensor_value_info("o", onnx.TensorProto.INT64, None)])
        nodes = [onnx.helper.make_node("Identity", ["two"], ["s"]),
                 onnx.helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)]
        model = _model(nodes, [cond, two], ["y"])
        before = model.SerializeToString()
        simplify_graph(model, params=[])
        assert model.SerializeToString() == before


class TestMxnetConverterSizes:
    def test_nodes_per_op_against_mxnet_converters(self, monkeypatch):
        """Nodes written for one op of GluonNLP BERT (raw export, before simplification): LayerNorm 1 against 10 from
        MXNet's own converter, interleaved attention 7 and 7 against 29 and 19."""
        pytest.importorskip("gluonnlp")
        import mxnet as mx
        from migrate.onnx_export import mxnet_converters
        from tests.migrate.mapping.test_transformers import DTYPES, SHAPES, _gluon_bert
        with mx.name.NameManager():
            net = _gluon_bert()
        dtypes = [np.dtype(d) for d in DTYPES]
        source = load_mxnet(net, SHAPES, dtypes)
        ops = {"ln": "bertencoder0_transformer0_layernorm0_layernorm0",
               "qk": "bertencoder0_transformer0_dotproductselfattentioncell0_interleaved_matmul_selfatt_qk0",
               "valatt": "bertencoder0_transformer0_dotproductselfattentioncell0_interleaved_matmul_selfatt_valatt0"}

        def counts():
            with monkeypatch.context() as patch:
                patch.setattr(mxnet_export, "simplify_graph", lambda model, params: None)
                nodes = mxnet_export.export_mxnet(source, SHAPES, dtypes).graph.node
            return {k: sum(n.output[0].startswith(prefix) for n in nodes) for k, prefix in ops.items()}

        ours = counts()
        monkeypatch.setattr(mxnet_converters, "_fused_layer_norm", lambda original: original)
        monkeypatch.setattr(mxnet_converters, "_static_attention", lambda shapes, originals: dict(originals))
        assert (ours, counts()) == ({"ln": 1, "qk": 7, "valatt": 7}, {"ln": 10, "qk": 29, "valatt": 19})
