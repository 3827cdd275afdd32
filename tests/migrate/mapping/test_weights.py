"""convert_weights: from a dict or a .params file, dtype and shape checks, errors naming both sides."""
import mxnet as mx
import numpy as np
import pytest
import torch

import migrate
from migrate.errors import InputFileError, MappingError, WeightShapeError


class TestConvertWeights:
    """migrate.convert_weights."""

    def test_params_file_equals_dict(self, pair, tmp_path):
        """A .params file from HybridBlock.export (arg:/aux: prefixes) converts like the in-memory dict."""
        net, model, shape, _, mapping = pair("residual-body-first")
        net.hybridize()
        net(mx.nd.zeros(shape))
        net.export(str(tmp_path / "net"))
        from_file = migrate.convert_weights(str(tmp_path / "net-0000.params"), mapping, model)
        from_dict = migrate.convert_weights({p.name: p.data() for p in net.collect_params().values()}, mapping, model)
        assert set(from_file) == set(model.state_dict())
        for key, value in from_dict.items():
            diff = float((value.double() - from_file[key].double()).abs().max())
            assert diff == 0.0, f"{key}: {diff}"
        assert from_file["bn1.running_var"].dtype == torch.float32

    def test_dtype_follows_the_torch_model(self, pair):
        """With a float64 torch model the converted tensors are float64, values unchanged."""
        net, model, _, _, mapping = pair("dense-stack")
        params = {p.name: p.data().asnumpy() for p in net.collect_params().values()}
        sd = migrate.convert_weights(params, mapping, model.double())
        model.float()
        assert sd["layers.3.weight"].dtype == torch.float64
        np.testing.assert_array_equal(sd["layers.3.weight"].numpy(), params["d0_weight"].astype(np.float64))


def _params(pair):
    net = pair("dense-stack")[0]
    return {p.name: p.data().asnumpy() for p in net.collect_params().values()}


ERRORS = [
    ("missing parameter", lambda p, tmp: {k: v for k, v in _params(p).items() if k != "d2_bias"}, MappingError,
     r"needs 1 MXNet parameter\(s\) not given: \['d2_bias'\]"),
    ("wrong shape", lambda p, tmp: {**_params(p), "d1_weight": np.zeros((16, 15), np.float32)}, WeightShapeError,
     r"'d1_weight': expected shape \(16, 16\).*received \(16, 15\)"),
    ("missing file", lambda p, tmp: str(tmp / "absent.params"), InputFileError, "not found"),
    ("not a params file", lambda p, tmp: _junk(tmp), InputFileError, "could not read it"),
    ("not a dict", lambda p, tmp: [1, 2], MappingError, "expected a dict name -> array or a .params path"),
]


def _junk(tmp):
    (tmp / "junk.params").write_bytes(b"not an ndarray file")
    return str(tmp / "junk.params")


@pytest.mark.parametrize("desc,make,error,pattern", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(pair, tmp_path, desc, make, error, pattern):
    """Bad weights raise migrate errors naming the parameter or file."""
    _, model, _, _, mapping = pair("dense-stack")
    with pytest.raises(error, match=pattern):
        migrate.convert_weights(make(pair, tmp_path), mapping, model)


def test_torch_shape_mismatch_names_both_sides(pair):
    """A torch model whose tensor shape differs from the mapping's target is named with both names."""
    net, _, _, _, mapping = pair("dense-stack")
    other = torch.nn.Module()
    other.layers = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(3)] + [torch.nn.Linear(15, 16)])
    other.head = torch.nn.Linear(16, 3)
    with pytest.raises(WeightShapeError, match=r"MXNet 'd0_weight' \(16, 16\) -> torch 'layers.3.weight': "
                                               r"expected \(16, 15\)"):
        migrate.convert_weights(_params(pair), mapping, other)
