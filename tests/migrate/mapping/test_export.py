"""Bad input to name_mapping gets a migrate error naming the model, what was expected and what to do."""
import mxnet as mx
import numpy as np
import pytest
import torch

import migrate
from migrate.errors import ExportError, InputFileError, InputShapeError, ModelTypeError
from tests.migrate import models as M


class _PlainBlock(mx.gluon.Block):
    def forward(self, x):
        return x


class _MxNoOnnx(mx.gluon.HybridBlock):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.d = mx.gluon.nn.Dense(4, in_units=4)

    def hybrid_forward(self, F, x):
        return self.d(F.linalg.inverse(x.reshape((2, 2, 2))).reshape((2, 4)))


class _NoOnnx(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.svd(x)[1]


def _files(tmp_path, symbol_text=None, params_bytes=None):
    sym, par = tmp_path / "m-symbol.json", tmp_path / "m-0000.params"
    if symbol_text is not None:
        sym.write_text(symbol_text)
    if params_bytes is not None:
        par.write_bytes(params_bytes)
    return str(sym), str(par)


def _exported(tmp_path):
    net = M.gluon(M.MxDenseStack)
    net.hybridize()
    net(mx.nd.zeros((1, 16)))
    net.export(str(tmp_path / "m"))
    return str(tmp_path / "m-symbol.json"), str(tmp_path / "m-0000.params")


ERRORS = [
    ("MXNet rejects the shape", lambda t: (M.gluon(M.MxDenseStack), M.TorchDenseStack(), (2, 15)),
     InputShapeError, r"MXNet model rejected input shapes \[\(2, 15\)\]"),
    ("torch rejects the shape", lambda t: (M.gluon(M.MxDenseStack), M.TorchConcat(), (2, 16)),
     InputShapeError, r"torch model TorchConcat rejected input shapes \[\(2, 16\)\]"),
    ("malformed shape", lambda t: (M.gluon(M.MxDenseStack), M.TorchDenseStack(), (2, -16)),
     InputShapeError, "expected a tuple of positive integers"),
    ("two shapes for one input", lambda t: (M.gluon(M.MxDenseStack), M.TorchDenseStack(), [(2, 16), (2, 16)]),
     InputShapeError, r"MXNet block MxDenseStack does not take 2 input\(s\)"),
    ("plain gluon Block computing nothing", lambda t: (_PlainBlock(), M.TorchDenseStack(), (2, 16)),
     ModelTypeError, "MXNet block _PlainBlock: its forward recorded no operation"),
    ("not a model", lambda t: (object(), M.TorchDenseStack(), (2, 16)),
     ModelTypeError, r"mx_model: expected an initialized mxnet.gluon.Block .* received object"),
    ("torch model is not a module", lambda t: (M.gluon(M.MxDenseStack), "resnet18", (2, 16)),
     ModelTypeError, "torch_model: expected a torch.nn.Module, received str"),
    ("symbol file missing", lambda t: (_files(t), M.TorchDenseStack(), (2, 16)),
     InputFileError, "symbol JSON file .*m-symbol.json': not found"),
    ("symbol file is not JSON", lambda t: (_files(t, "{oops", b"x"), M.TorchDenseStack(), (2, 16)),
     InputFileError, "expected a symbol JSON written by HybridBlock.export"),
    ("params file is not params", lambda t: ((_exported(t)[0], _files(t, None, b"junk")[1]), M.TorchDenseStack(),
                                             (2, 16)),
     InputFileError, "params file .*: expected an NDArray dict"),
    ("torch op without ONNX export", lambda t: (M.gluon(M.MxDenseStack), _NoOnnx(), (3, 16)),
     ExportError, "torch ONNX export of _NoOnnx failed: .*svd"),
    ("MXNet op without ONNX export", lambda t: (_init(_MxNoOnnx()), torch.nn.Linear(4, 4), (2, 4)),
     ExportError, "No conversion function registered for op type _linalg_inverse.*replace that op"),
]


def _init(block):
    block.initialize()
    return block


@pytest.mark.parametrize("desc,make,error,pattern", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_input(tmp_path, desc, make, error, pattern):
    """Each bad input raises its migrate error with a message naming what is wrong."""
    mx_model, torch_model, shape = make(tmp_path)
    with pytest.raises(error, match=pattern):
        migrate.name_mapping(mx_model, torch_model, shape)


def test_files_map_like_the_block(tmp_path):
    """(symbol.json, .params) files give the same mapping as the block they were exported from."""
    sym, par = _exported(tmp_path)
    model = M.TorchDenseStack()
    from_files = migrate.name_mapping((sym, par), model, (1, 16))
    assert from_files.ok and from_files["d0_weight"] == "layers.3.weight" and len(from_files) == 9
    assert np.isclose(migrate.verify((sym, par), model, from_files, (1, 16)).max_abs_diff, 0.0, atol=1e-6)


def test_models_are_left_unchanged():
    """name_mapping leaves both models' values alone (the training-mode torch trace would move BN statistics)."""
    net, model = M.gluon(M.MxResidual), M.TorchResidual()
    mx_before = {p.name: p.data().asnumpy().copy() for p in net.collect_params().values()}
    t_before = {k: v.clone() for k, v in model.state_dict().items()}
    migrate.name_mapping(net, model, (2, 3, 8, 8))
    moved = [k for k, v in model.state_dict().items() if not torch.equal(v, t_before[k])]
    moved += [p.name for p in net.collect_params().values()
              if not np.array_equal(p.data().asnumpy(), mx_before[p.name])]
    assert not moved, f"changed by name_mapping: {moved}"
    assert model.training


class _MxReshapes(mx.gluon.HybridBlock):
    """Reshape codes MXNet's own ONNX converter refuses (``0, -3``) or spends 6 and 18 nodes on (``-4``,
    ``reverse=True``), before two Dense layers."""

    def __init__(self, **kw):
        super().__init__(prefix="", **kw)
        self.d0 = mx.gluon.nn.Dense(24, in_units=12, prefix="d0_")
        self.d1 = mx.gluon.nn.Dense(5, in_units=24, prefix="d1_")

    def hybrid_forward(self, F, x):  # x: (2, 3, 4)
        x = F.reshape(x, shape=(0, -3))  # (2, 12)
        x = F.reshape(x, shape=(0, -4, 3, -1))  # (2, 3, 4)
        x = F.reshape(x, shape=(-1, 0), reverse=True)  # (6, 4)
        x = F.reshape(x, shape=(2, -1))  # (2, 12)
        return self.d1(F.relu(self.d0(x)))


class _TorchReshapes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.d0, self.d1 = torch.nn.Linear(12, 24), torch.nn.Linear(24, 5)

    def forward(self, x):
        return self.d1(torch.relu(self.d0(x.reshape(2, 12))))


def test_reshape_codes_export_with_static_shapes():
    """MXNet's converter raises 'Shape value not supported in ONNX' for these Reshape codes; the export writes each
    as one Reshape to its constant target (the input shapes are fixed), and the chain of four (with the Dense
    layer's Flatten) collapses into one Reshape to (2, 12); the pair maps and verifies."""
    from migrate.onnx_export import export_mxnet
    from migrate.source import load_mxnet
    net = M.gluon(_MxReshapes)
    shapes, dtypes = [(2, 3, 4)], [np.dtype("float32")]
    graph = export_mxnet(load_mxnet(net, shapes, dtypes), shapes, dtypes).graph
    reshapes = [n for n in graph.node if n.op_type == "Reshape"]
    assert not any(n.op_type == "Shape" for n in graph.node)
    targets = {t.name: list(t.int64_data) or list(np.frombuffer(t.raw_data, np.int64)) for t in graph.initializer}
    assert [(n.input[0], targets[n.input[1]]) for n in reshapes] == [("data", [2, 12])]
    model = _TorchReshapes()
    mapping = migrate.name_mapping(net, model, (2, 3, 4))
    assert mapping.ok and mapping["d0_weight"] == "d0.weight" and mapping["d1_bias"] == "d1.bias"
    assert migrate.verify(net, model, mapping, (2, 3, 4)).max_abs_diff <= 1e-6
