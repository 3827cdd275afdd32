"""name_mapping: names against the truth, weight copy + output match, non-equivalent pairs reported by name."""
import numpy as np
import pytest
import torch

import migrate
from migrate.mapping.match import align

ATOL = 1e-5

# Expected MXNet -> torch names (a subset chosen where a wrong mapping is plausible).
TRUTH = {
    "residual-body-first": {"short_weight": "short.0.weight", "shortbn_running_mean": "short.1.running_mean",
                            "body1_weight": "conv1.weight", "body2_weight": "conv2.weight",
                            "body1bn_running_var": "bn1.running_var", "body2bn_gamma": "bn2.weight",
                            "stembn_beta": "stem_bn.bias", "fc_weight": "fc.weight"},
    "residual-same-order": {"short_weight": "short.0.weight", "body1_weight": "conv1.weight",
                            "body2bn_running_mean": "bn2.running_mean", "shortbn_gamma": "short.1.weight"},
    "concat-nesting": {"a_weight": "a.weight", "b_weight": "b.weight", "c_weight": "c.weight", "c_bias": "c.bias",
                       "mix_weight": "mix.weight"},
    "depthwise-bias-fold-1x1-vs-linear": {"dw_weight": "dw.0.weight", "dwbn_running_var": "dw.1.running_var",
                                          "pw_weight": "pw.0.weight", "pw_bias": "pw.1.running_mean",
                                          "head_weight": "head.weight"},
    "dense-stack": {"d0_weight": "layers.3.weight", "d1_weight": "layers.2.weight", "d2_bias": "layers.1.bias",
                    "d3_weight": "layers.0.weight", "out_weight": "head.weight"},
    "two-inputs": {"fx_weight": "fx.weight", "fy_weight": "fy.weight", "fy_bias": "fy.bias"},
    "embedding": {"emb_weight": "emb.weight", "proj_weight": "proj.weight", "proj_bias": "proj.bias",
                  "out_weight": "out.weight"},
}


def _outputs_after_copy(net, model, mapping, shape, dtype):
    """Copy weights with convert_weights (strict load) and return (MXNet output, torch output) on seeded input."""
    import mxnet as mx
    params = {p.name: p.data() for p in net.collect_params().values()}
    model.load_state_dict(migrate.convert_weights(params, mapping, model), strict=True)
    rng = np.random.default_rng(7)
    xs = [rng.integers(0, 20, s) if dtype is not None else rng.standard_normal(s).astype(np.float32)
          for s in (shape if isinstance(shape, list) else [shape])]
    mx_out = net(*[mx.nd.array(x) for x in xs]).asnumpy()
    with torch.no_grad():
        t_out = model.eval()(*[torch.from_numpy(x) for x in xs]).numpy()
    return mx_out, t_out


class TestNameMapping:
    """migrate.name_mapping on pairs written in the tests."""

    def test_names_match_the_truth(self, equivalent_pair):
        """Every MXNet parameter is mapped, the chosen names are right, and nothing is left over."""
        key, net, model, _, _, mapping = equivalent_pair
        assert mapping.ok, f"{key}: {mapping.differences} {mapping.unmatched_mx} {mapping.unmatched_torch}"
        wrong = {k: (mapping.get(k), v) for k, v in TRUTH[key].items() if mapping.get(k) != v}
        assert not wrong, f"{key}: got vs expected {wrong}"
        assert set(mapping) == {p.name for p in net.collect_params().values()}
        assert set(mapping.values()) | set(mapping.torch_defaults) == set(model.state_dict())

    def test_weight_copy_reproduces_outputs(self, equivalent_pair):
        """convert_weights + load_state_dict(strict) makes torch reproduce MXNet to 1e-5 (eval mode)."""
        key, net, model, shape, dtype, mapping = equivalent_pair
        mx_out, t_out = _outputs_after_copy(net, model, mapping, shape, dtype)
        diff = float(np.max(np.abs(mx_out - t_out.reshape(mx_out.shape))))
        assert diff <= ATOL, f"{key}: max abs diff {diff}"

    def test_verify_passes_every_node(self, equivalent_pair):
        """verify compares every matched node and the output; all within 1e-5."""
        key, net, model, shape, dtype, mapping = equivalent_pair
        report = migrate.verify(net, model, mapping, shape, input_dtypes=dtype, atol=ATOL)
        assert report.ok, f"{key}:\n{report}"
        assert report.max_abs_diff <= ATOL, f"{key}: {report.max_abs_diff}"
        compared = [r for r in report.rows if r.max_abs_diff is not None]
        assert len(compared) == len(report.rows), f"{key}: nodes not compared:\n{report}"
        assert report.first_divergence is None

    def test_verify_reports_skipped_nodes(self, pair):
        """A TorchScript model (no forward hooks): every node "skipped" in the table and the JSON, ``ok`` rests on
        the final output and ``verified`` is False."""
        net, model, shape, dtype, mapping = pair("concat-nesting")
        scripted = torch.jit.script(model)
        report = migrate.verify(net, scripted, mapping, shape)
        assert report.ok and report.max_abs_diff <= ATOL
        assert len(report.skipped) == len(report.rows) > 0 and not report.verified
        rows = str(report).splitlines()[1:1 + len(report.rows)]
        assert all(" skipped  skipped: torch module output not captured" in line for line in rows), str(report)
        assert f"{len(report.rows)} of {len(report.rows)} matched nodes skipped" in str(report)
        document = report.to_dict()
        assert document["skipped"] == len(report.rows) and document["compared"] == 0
        assert all(row["skipped"] for row in document["rows"])

    def test_verify_leaves_the_torch_model_alone(self, pair):
        """verify copies the weights into a deep copy: the caller's torch model keeps its own values."""
        net, model, shape, dtype, mapping = pair("concat-nesting")
        before = {k: v.clone() for k, v in model.state_dict().items()}
        migrate.verify(net, model, mapping, shape)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())

    def test_stride_on_another_conv_is_reported(self, pair):
        """A stride moved from conv1 to conv2: both convs named in the differences; verify diverges at conv1."""
        net, model, shape, dtype, mapping = pair("stride-moved")
        assert not mapping.ok
        assert "MXNet Conv 'body1_weight' vs torch Conv 'conv1.weight': strides (1, 1) vs (2, 2)" in mapping.differences
        assert "MXNet Conv 'body2_weight' vs torch Conv 'conv2.weight': strides (2, 2) vs (1, 1)" in mapping.differences
        assert len(mapping.differences) == 2, mapping.differences
        report = migrate.verify(net, model, mapping, shape)
        assert not report.ok
        assert (report.first_divergence.mx_node, report.first_divergence.torch_node) == ("body1_fwd", "conv1")

    def test_activation_difference_is_reported(self, pair):
        """tanh in MXNet, sigmoid in torch after each of the four dense layers: four differences, by name."""
        mapping = pair("activation-differs")[-1]
        assert not mapping.ok and not mapping.unmatched_mx and not mapping.unmatched_torch
        expected = [f"MXNet Gemm 'd{i}_weight' vs torch Gemm 'layers.{3 - i}.weight': activation after the node "
                    f"['Tanh'] vs ['Sigmoid']" for i in range(4)]
        assert mapping.differences == expected

    def test_extra_layer_is_reported(self, pair):
        """An extra BatchNorm in torch: its four tensors are unmatched, everything else maps, verify diverges."""
        net, model, shape, dtype, mapping = pair("extra-layer")
        assert not mapping.ok
        assert sorted(mapping.unmatched_torch) == ["extra.bias", "extra.running_mean", "extra.running_var",
                                                   "extra.weight"]
        assert mapping.unmatched_mx == []
        assert dict(mapping) == {"c1_weight": "c1.weight", "c1_bias": "c1.bias", "c2_weight": "c2.weight",
                                 "c2_bias": "c2.bias", "fc_weight": "fc.weight", "fc_bias": "fc.bias"}
        assert any("'extra.weight'" in d and "no counterpart" in d for d in mapping.differences)
        report = migrate.verify(net, model, mapping, shape)
        assert not report.ok and report.first_divergence.torch_node == "c2"


class TestTransforms:
    """Layout transforms recorded in the mapping."""

    def test_1x1_conv_to_linear_reshapes_both_ways(self, pair):
        """head_weight (3, 10, 1, 1) -> head.weight (3, 10) and back, exactly."""
        mapping = pair("depthwise-bias-fold-1x1-vs-linear")[-1]
        assert mapping.transform("head_weight") == "reshape (3, 10): (3, 10, 1, 1) -> (3, 10)"
        w = np.arange(30, dtype=np.float32).reshape(3, 10, 1, 1)
        assert mapping.to_torch("head_weight", w).shape == (3, 10)
        np.testing.assert_array_equal(mapping.to_mxnet("head.weight", mapping.to_torch("head_weight", w)), w)

    def test_conv_bias_folds_into_running_mean(self, pair):
        """pw_bias has no torch bias: it folds into pw.1.running_mean as mean - bias."""
        net, model, _, _, mapping = pair("depthwise-bias-fold-1x1-vs-linear")
        assert mapping.transform("pw_bias") == "fold into 'pw.1.running_mean' (subtract)"
        params = {p.name: p.data().asnumpy() for p in net.collect_params().values()}
        sd = migrate.convert_weights(params, mapping, model)
        expected = params["pwbn_running_mean"] - params["pw_bias"]
        np.testing.assert_allclose(sd["pw.1.running_mean"].numpy(), expected, atol=1e-7)

    def test_torch_only_bias_is_zero(self, pair):
        """head.bias has no MXNet source: convert_weights fills zeros."""
        net, model, _, _, mapping = pair("dense-stack")
        assert "head.bias" in mapping.torch_defaults
        params = {p.name: p.data() for p in net.collect_params().values()}
        assert float(migrate.convert_weights(params, mapping, model)["head.bias"].abs().max()) == 0.0


class TestAlign:
    """align pairs label sequences without names."""

    @pytest.mark.parametrize("a,b,expected", [
        (["x", "y", "z"], ["x", "y", "z"], [(0, 0), (1, 1), (2, 2)]),
        (["x", "z"], ["x", "y", "z"], [(0, 0), (None, 1), (1, 2)]),
        (["x", "y", "z"], ["x", "z"], [(0, 0), (1, None), (2, 1)]),
        (["x", "q", "z"], ["x", "r", "z"], [(0, 0), (None, 1), (1, None), (2, 2)]),
        ([], ["x"], [(None, 0)]),
    ], ids=["equal", "insertion", "deletion", "substitution", "empty"])
    def test_align(self, a, b, expected):
        """Equal labels zip, the rest become gaps on one side."""
        assert align(a, b) == expected


class _MxLayerNormBlock:
    """Dense -> LayerNorm -> Dense in Gluon (exports LayerNorm as one ONNX LayerNormalization)."""

    @staticmethod
    def build(eps=1e-5):
        import mxnet as mx
        net = mx.gluon.nn.HybridSequential(prefix="")
        with net.name_scope():
            net.add(mx.gluon.nn.Dense(8, in_units=6, flatten=False, prefix="d0_"),
                    mx.gluon.nn.LayerNorm(in_channels=8, epsilon=eps, prefix="ln_"),
                    mx.gluon.nn.Dense(4, in_units=8, flatten=False, prefix="d1_"))
        mx.random.seed(0)
        net.initialize(mx.init.Normal(0.5))
        net.collect_params()["ln_gamma"].set_data(mx.nd.random.uniform(0.5, 1.5, (8,)))
        net.collect_params()["ln_beta"].set_data(mx.nd.random.uniform(-0.5, 0.5, (8,)))
        return net


class _TorchHandLayerNorm(torch.nn.Module):
    """The same with LayerNorm written out in arithmetic (exports as ReduceMean/Sub/Pow/Sqrt/Div, Mul, Add)."""

    def __init__(self, eps=1e-5):
        super().__init__()
        self.d0, self.d1, self.eps = torch.nn.Linear(6, 8), torch.nn.Linear(8, 4), eps
        self.gamma, self.beta = torch.nn.Parameter(torch.ones(8)), torch.nn.Parameter(torch.zeros(8))

    def forward(self, x):
        h = self.d0(x)
        d = h - h.mean(-1, keepdim=True)
        h = d / torch.sqrt(d.pow(2).mean(-1, keepdim=True) + self.eps) * self.gamma + self.beta
        return self.d1(h)


class TestLayerNormForms:
    def test_decomposed_layer_norm_matches_the_fused_op(self):
        """A LayerNorm written in arithmetic on the torch side pairs with MXNet's fused one: gamma and beta map,
        and the copied model reproduces MXNet within 1e-5."""
        from migrate.onnx_export import export_torch
        net, model = _MxLayerNormBlock.build(), _TorchHandLayerNorm()
        ops = {n.op_type for n in export_torch(model, [(2, 3, 6)], [np.dtype("float32")]).graph.node}
        assert {"ReduceMean", "Sqrt", "Div"} <= ops and "LayerNormalization" not in ops
        mapping = migrate.name_mapping(net, model, (2, 3, 6))
        assert mapping.ok, mapping.differences
        assert mapping["ln_gamma"] == "gamma" and mapping["ln_beta"] == "beta" and mapping["d1_weight"] == "d1.weight"
        mx_out, t_out = _outputs_after_copy(net, model, mapping, (2, 3, 6), None)
        np.testing.assert_allclose(t_out, mx_out, rtol=0, atol=ATOL)

    def test_epsilon_difference_is_reported(self):
        """eps 1e-5 (MXNet) vs 1e-3 (torch, written by hand) is reported with both values."""
        mapping = migrate.name_mapping(_MxLayerNormBlock.build(), _TorchHandLayerNorm(eps=1e-3), (2, 3, 6))
        assert not mapping.ok
        assert any("epsilon 1e-05 vs 0.001" in d for d in mapping.differences), mapping.differences
