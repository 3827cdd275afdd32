"""param_graph: canonical order independent of exporter order, branch order and concat nesting."""
import gc

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

from migrate.onnx_export import export_mxnet, export_torch
from migrate.source import load_mxnet
from migrate.mapping.graph import gc_paused, param_graph
from tests.migrate import models as M


def _graphs(mx_cls, torch_model, shape):
    net = M.gluon(mx_cls)
    src = load_mxnet(net, [shape], [np.dtype("float32")])
    mx_graph = param_graph(export_mxnet(src, [shape], [np.dtype("float32")]), src.params)
    keys = list(torch_model.state_dict())
    return mx_graph, param_graph(export_torch(torch_model, [shape], [np.dtype("float32")]), keys)


class TestParamGraph:
    """param_graph on small exported models."""

    def test_residual_branch_order_does_not_matter(self):
        """MXNet adds shortcut + body, torch body + shortcut: the canonical label sequences are equal."""
        mx_graph, t_graph = _graphs(M.MxResidual, M.TorchResidual(), (1, 3, 8, 8))
        assert [n.label for n in mx_graph.nodes] == [n.label for n in t_graph.nodes]
        assert [n.tensors["weight"] for n in mx_graph.nodes if n.kind != "bn"] == [
            "stem_weight", "short_weight", "body1_weight", "body2_weight", "fc_weight"]
        assert [n.tensors["weight"] for n in t_graph.nodes if n.kind != "bn"] == [
            "stem.weight", "short.0.weight", "conv1.weight", "conv2.weight", "fc.weight"]

    def test_concat_slots_give_channel_order(self):
        """concat(concat(a, b), c) and cat([a, b, c]) both walk a, b, c although torch declares c first."""
        mx_graph, t_graph = _graphs(M.MxConcat, M.TorchConcat(), (1, 3, 6, 6))
        assert [n.tensors["weight"] for n in mx_graph.nodes] == ["a_weight", "b_weight", "c_weight", "mix_weight"]
        assert [n.tensors["weight"] for n in t_graph.nodes] == ["a.weight", "b.weight", "c.weight", "mix.weight"]

    def test_labels_and_activations(self):
        """Depthwise conv keeps its groups, a 1x1 conv is labelled linear, ReLU6 and relu follow their BN."""
        mx_graph, t_graph = _graphs(M.MxDepthwise, M.TorchDepthwise(), (1, 6, 5, 5))
        assert [n.label for n in t_graph.nodes] == [("conv", 6, 1, 3, 3, 6), ("bn", 6), ("linear", 10, 6),
                                                    ("bn", 10), ("linear", 3, 10)]
        assert [n.post for n in mx_graph.nodes] == [n.post for n in t_graph.nodes] == [
            (), ("Clip",), (), ("Relu",), ()]

    def test_long_chain_needs_no_recursion(self):
        """A 1,100-layer Gemm chain (deeper than Python's recursion limit) is walked in order."""
        g = param_graph(_chain_model(1100))
        assert [n.tensors["weight"] for n in g.nodes] == [f"w{i}" for i in range(1100)]
        assert all(n.label == ("linear", 3, 3) for n in g.nodes)

    def test_shape_arithmetic_is_not_a_consumer(self):
        """Conv -> BN -> Reshape(to Shape(conv output) arithmetic): the conv still feeds the BN directly (its bias
        folds there), and the graph reads as the one with a constant Reshape target."""
        computed, constant = param_graph(_shape_model(computed=True)), param_graph(_shape_model(computed=False))
        for g in (computed, constant):
            assert [(n.label, n.feeds, n.post) for n in g.nodes] == [
                (("conv", 4, 3, 3, 3, 1), 1, ()), (("bn", 4), None, ("Relu",))]
            assert g.unused == []


def _shape_model(computed):
    """x -> Conv(w, b) -> BatchNormalization -> Reshape -> Relu; the Reshape target is [batch, -1], computed from
    Shape(conv output) through Gather/Unsqueeze/Concat (as exporters write it) or a constant initializer."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name) for name, shape in
             (("w", (4, 3, 3, 3)), ("b", (4,)), ("g", (4,)), ("be", (4,)), ("m", (4,)), ("v", (4,)))]
    nodes = [onnx.helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
             onnx.helper.make_node("BatchNormalization", ["y", "g", "be", "m", "v"], ["z"])]
    if computed:
        inits += [onnx.numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                  (("zero", 0), ("axes", [0]), ("minus1", [-1]))]
        nodes += [onnx.helper.make_node("Shape", ["y"], ["s"]),
                  onnx.helper.make_node("Gather", ["s", "zero"], ["n"]),
                  onnx.helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
                  onnx.helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0)]
    else:
        inits.append(onnx.numpy_helper.from_array(np.array([1, -1], np.int64), "target"))
    nodes += [onnx.helper.make_node("Reshape", ["z", "target"], ["flat"]),
              onnx.helper.make_node("Relu", ["flat"], ["out"])]
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 5, 5])
    out = onnx.helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [1, 100])
    return onnx.helper.make_model(onnx.helper.make_graph(nodes, "shape", [x], [out], inits))


def _chain_model(n):
    """An ONNX graph x -> Gemm(w0, b0) -> Relu -> ... -> Gemm(w{n-1}) built directly (no exporter)."""
    nodes, inits, value = [], [], "x"
    for i in range(n):
        inits += [onnx.numpy_helper.from_array(np.eye(3, dtype=np.float32), f"w{i}"),
                  onnx.numpy_helper.from_array(np.zeros(3, np.float32), f"b{i}")]
        nodes += [onnx.helper.make_node("Gemm", [value, f"w{i}", f"b{i}"], [f"g{i}"], transB=1),
                  onnx.helper.make_node("Relu", [f"g{i}"], [f"r{i}"])]
        value = f"r{i}"
    info = [onnx.helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, [1, 3]) for v in ("x", value)]
    return onnx.helper.make_model(onnx.helper.make_graph(nodes, "chain", info[:1], info[1:], inits))


def test_gc_paused_restores_the_collector_as_it_was():
    """The collector is off inside, back on after (also after an exception), and left off if it was off."""
    @gc_paused
    def inside(fail=False):
        if fail:
            raise RuntimeError("boom")
        return gc.isenabled()

    assert gc.isenabled()
    assert inside() is False and gc.isenabled()
    with pytest.raises(RuntimeError):
        inside(fail=True)
    assert gc.isenabled()
    gc.disable()
    try:
        assert inside() is False and not gc.isenabled()
    finally:
        gc.enable()
