"""Mapping that does not grow with the weights (issue 17): structure-only ONNX exports (shapes and dtypes, no weight
bytes) map exactly as full exports do; verification loads the weights in place and compares layer by layer within a
memory budget; the CLI writes weights.safetensors by default."""
import mxnet as mx
import numpy as np
import onnx
import pytest
import torch

import migrate
from migrate.arguments import normalize_shapes
from migrate.onnx_export import STRUCTURE_ONLY, export_mxnet, export_torch
from migrate.source import load_mxnet
from migrate.mapping.graph import param_graph
from migrate.mapping.match import match_graphs
from migrate.verification import verify
from migrate.mapping.weights import convert_weights, load_mxnet_weights
from tests.migrate import models as M
from tests.migrate.pairs import PAIRS, build_pair


def _wide_pair(depth=6, width=1024):
    """A chain of Dense/Linear(width, width): 6.3M parameters, 25 MB of float32 weights."""
    net = mx.gluon.nn.HybridSequential(prefix="wide_")
    with net.name_scope():
        for _ in range(depth):
            net.add(mx.gluon.nn.Dense(width, in_units=width, activation="relu"))
    net.initialize(mx.init.Uniform(0.05))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(depth) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())])
    return net, model, (2, width)


def _exported(key, prefix):
    """A fresh copy of the pair's Gluon net (same seed), hybridized and exported to
    ``prefix``-symbol.json/-0000.params."""
    mx_cls, mx_args, _, _, shape, _ = PAIRS[key]
    net = M.gluon(mx_cls, *mx_args)
    net.hybridize()
    net(mx.nd.zeros(shape))
    net.export(str(prefix))
    return f"{prefix}-symbol.json", f"{prefix}-0000.params"


def _mapping(net, model, shape, dtype, with_weights):
    shapes, dtypes = normalize_shapes(shape, dtype)
    source = load_mxnet(net, shapes, dtypes)
    keys = list(model.state_dict())
    mx_onnx = export_mxnet(source, shapes, dtypes, with_weights=with_weights)
    torch_onnx = export_torch(model, shapes, dtypes, with_weights=with_weights)
    mapping = match_graphs(param_graph(mx_onnx, source.params), param_graph(torch_onnx, keys), keys)
    return mapping, mx_onnx, torch_onnx


def test_exports_carry_shapes_not_bytes():
    """Both structure-only exports of a 25 MB model are under 64 KB; every parameter is an initializer with its shape
    and dtype and the STRUCTURE_ONLY location; the full exports hold the bytes (over 25 MB each)."""
    net, model, shape = _wide_pair()
    weights = sum(p.data().size for p in net.collect_params().values()) * 4
    _, mx_onnx, torch_onnx = _mapping(net, model, shape, None, with_weights=False)
    _, mx_full, torch_full = _mapping(net, model, shape, None, with_weights=True)
    assert weights > 25e6
    assert mx_onnx.ByteSize() < 65536 and torch_onnx.ByteSize() < 65536
    assert mx_full.ByteSize() > weights and torch_full.ByteSize() > weights
    mx_shapes = {t.name: tuple(t.dims) for t in mx_onnx.graph.initializer}
    for p in net.collect_params().values():
        assert mx_shapes[p.name] == p.shape, p.name
    torch_inits = {t.name: t for t in torch_onnx.graph.initializer}
    for key, value in model.state_dict().items():
        tensor = torch_inits[key]
        assert tuple(tensor.dims) == tuple(value.shape) and tensor.data_type == onnx.TensorProto.FLOAT, key
        assert tensor.data_location == onnx.TensorProto.EXTERNAL and not tensor.raw_data
        assert {e.key: e.value for e in tensor.external_data}["location"] == STRUCTURE_ONLY
    assert not [i.name for i in torch_onnx.graph.input if i.name in model.state_dict()], "parameters left as inputs"


@pytest.mark.parametrize("key", list(PAIRS))
def test_structure_only_maps_as_the_full_export(key):
    """Every test pair (equivalent or not): the same names, differences and unmatched sets from both exports."""
    net, model, shape, dtype, _ = build_pair(key)
    light, _, _ = _mapping(net, model, shape, dtype, with_weights=False)
    full, _, _ = _mapping(net, model, shape, dtype, with_weights=True)
    assert {n: light[n] for n in light} == {n: full[n] for n in full}
    assert light.differences == full.differences and light.ok == full.ok
    assert light.unmatched_mx == full.unmatched_mx and light.unmatched_torch == full.unmatched_torch


def test_export_leaves_torch_model_unchanged():
    """The training-mode trace runs BatchNorm on batch statistics: every buffer and parameter is restored."""
    net, model, shape, dtype, _ = build_pair("residual-body-first")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    export_torch(model, *normalize_shapes(shape, dtype))
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_load_mxnet_weights_equals_convert_weights():
    """In place, tensor by tensor: the same values as load_state_dict(convert_weights(...)), every key written."""
    net, model, shape, dtype, mapping = build_pair("depthwise-bias-fold-1x1-vs-linear")
    params = {p.name: p.data() for p in net.collect_params().values()}
    expected = convert_weights(params, mapping, model)
    target = type(model)()
    ids = {k: v.data_ptr() for k, v in target.state_dict().items()}
    written = load_mxnet_weights(target, params, mapping)
    assert sorted(written) == sorted(expected)
    for k, v in target.state_dict().items():
        assert v.data_ptr() == ids[k], f"{k} was replaced, not written in place"
        if k in expected:
            assert torch.equal(v, expected[k]), k


@pytest.mark.parametrize("key", ["residual-body-first", "concat-nesting", "embedding"])
def test_layer_by_layer_equals_one_pass(key):
    """A budget smaller than one node's output: one pass per node, the same rows and differences as one pass."""
    net, model, shape, dtype, mapping = build_pair(key)
    whole = verify(net, model, mapping, shape, input_dtypes=dtype)
    seen = []
    layered = verify(net, model, mapping, shape, input_dtypes=dtype, memory_budget=1, progress=seen.append)
    assert whole.passes == 1 and layered.passes == len(layered.rows) > 2
    assert whole.ok and layered.ok and layered.output_bytes == whole.output_bytes > 0
    assert [(r.mx_node, r.torch_node, r.max_abs_diff) for r in layered.rows] == \
        [(r.mx_node, r.torch_node, r.max_abs_diff) for r in whole.rows]
    assert layered.max_abs_diff == whole.max_abs_diff and sum(seen) == len(layered.rows)
    assert f"compared layer by layer in {layered.passes} passes" in str(layered)


def test_budget_bounds_the_passes():
    """A budget of a third of all outputs: at least 3 passes, each within budget unless it holds a single node."""
    net, model, shape, dtype, mapping = build_pair("residual-body-first")
    whole = verify(net, model, mapping, shape, input_dtypes=dtype)
    budget = whole.output_bytes // 3
    layered = verify(net, model, mapping, shape, input_dtypes=dtype, memory_budget=budget)
    assert 3 <= layered.passes < len(layered.rows) and layered.ok


def test_in_place_keeps_the_weights_and_default_leaves_the_model():
    """Default: the torch model is untouched; in_place: it holds the MXNet weights afterwards (same tensors) and its
    training flag is restored."""
    net, _, shape, dtype, mapping = build_pair("dense-stack")
    torch.manual_seed(1)
    model = PAIRS["dense-stack"][2]()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert verify(net, model, mapping, shape).ok
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    model.train()
    pointers = {k: v.data_ptr() for k, v in model.state_dict().items()}
    assert verify(net, model, mapping, shape, in_place=True).ok and model.training
    expected = convert_weights({p.name: p.data() for p in net.collect_params().values()}, mapping, model)
    for k, v in model.state_dict().items():
        assert v.data_ptr() == pointers[k] and torch.equal(v, expected[k]), k


def test_mx_source_is_loaded_once(tmp_path):
    """name_mapping and verify take an MxSource (the CLI reads the files once); the result equals the block's."""
    net, model, shape, dtype, mapping = build_pair("residual-body-first")
    shapes, dtypes = normalize_shapes(shape, dtype)
    source = load_mxnet(_exported("residual-body-first", tmp_path / "res"), shapes, dtypes)
    assert load_mxnet(source, shapes, dtypes) is source
    from_source = migrate.name_mapping(source, model, shape)
    assert {n: from_source[n] for n in from_source} == {n: mapping[n] for n in mapping}
    assert verify(source, model, from_source, shape).ok


@pytest.mark.parametrize("out, expected", [("w.pt", "pt"), ("w.safetensors", "safetensors"), ("w.bin", "safetensors")])
def test_weights_format_default_and_suffix(tmp_path, out, expected):
    """`migrate weights` writes safetensors unless --out ends in .pt/.pth; both load to the same tensors."""
    from safetensors.torch import load_file

    from migrate.cli import main
    net, model, shape, dtype, mapping = build_pair("residual-body-first")
    _exported("residual-body-first", tmp_path / "d")
    torch.jit.save(torch.jit.script(model), str(tmp_path / "m.ts"))
    code = main(["weights", "--symbol", str(tmp_path / "d-symbol.json"), "--params", str(tmp_path / "d-0000.params"),
                 "--torch", str(tmp_path / "m.ts"), "--input-shape", ",".join(map(str, shape)), "--out",
                 str(tmp_path / out), "--quiet"])
    assert code == 0
    path = str(tmp_path / out)
    loaded = torch.load(path, weights_only=True) if expected == "pt" else load_file(path)
    with open(path, "rb") as f:
        assert (f.read(2) == b"PK") == (expected == "pt")  # torch.save's zip; safetensors starts with a length
    reference = convert_weights({p.name: p.data() for p in net.collect_params().values()}, mapping, model)
    assert set(loaded) == set(reference) and all(torch.equal(loaded[k], reference[k]) for k in reference)


def _all_argv(tmp_path, torch_spec):
    symbol, params = _exported("residual-body-first", tmp_path / "res")
    net, _, _, _, _ = build_pair("residual-body-first")
    from gluon_lr import LrTrainer
    LrTrainer(net, "sgd", {"learning_rate": 0.1}).export_settings(str(tmp_path / "settings.json"))
    return ["all", "--symbol", symbol, "--params", params, "--settings", str(tmp_path / "settings.json"), "--torch",
            torch_spec, "--input-shape", "2,3,8,8", "--out", str(tmp_path / "out")]


def test_models_that_do_not_fit_are_refused_before_building(tmp_path, monkeypatch, capsys):
    """Available memory below twice the params file: exit 2 before anything is built, the error names the bytes
    needed and available; no output folder."""
    from migrate.cli import inputs, main
    argv = _all_argv(tmp_path, "tests.migrate.models:torch_residual")
    monkeypatch.setattr(inputs, "available_memory", lambda: 1000)
    built = []
    monkeypatch.setattr(M, "torch_residual", lambda *a: built.append(1))
    assert main(argv) == 2
    err = capsys.readouterr().err
    needed = 2 * (tmp_path / "res-0000.params").stat().st_size / 2 ** 30
    assert f"need about {needed:.2f} GiB of memory, but 0.00 GiB is available" in err and "Traceback" not in err
    assert not built and not (tmp_path / "out").exists()


def test_torch_model_that_cannot_be_allocated(tmp_path, capsys):
    """A factory whose allocation fails: exit 2 with InsufficientMemoryError's message (not 'check the arguments')."""
    from migrate.cli import main
    assert main(_all_argv(tmp_path, "tests.migrate.models:torch_too_big")) == 2
    err = capsys.readouterr().err
    assert "building the torch model ran out of memory" in err and "can't allocate memory" in err
    assert not (tmp_path / "out").exists()
