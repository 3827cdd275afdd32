"""MXNet's files converted without MXNet (issue 30, items 2-4), against the MXNet path on the same files.

Here (MXNet installed) ``MIGRATE_WITHOUT_MXNET=1`` reads ``symbol.json`` + ``.params`` with ``mxformats``:
``generate_torch`` writes the MXNet path's file and its module gives bit-identical outputs; ``name_mapping`` of a torch
twin (matched against the graph's torch translation) converts as the mapping matched against MXNet's export, and
verification against the translation agrees with verification against MXNet; ``migrate all`` writes the same
weights, param groups and optimizer state; the report says which path read the graph. In ./.venv-torch (numpy 2, no
MXNet) ``migrate generate`` and ``migrate all`` (generated module and twin) run on files MXNet wrote here, and the
migrated training continues MXNet's own next steps within 1e-5.
"""
import json
import os
import subprocess

import mxnet as mx
import numpy as np
import pytest
import torch
import torchvision
from mxnet import autograd, gluon
from mxnet.gluon.model_zoo import vision

import migrate
from gluon_lr import LrTrainer, Rule
from migrate.cli.commands import main
from migrate.errors import InputFileError, MXNetRequiredError, UnsupportedOpError
from migrate.generate import generate_torch
from migrate.mapping.generated_mapping import generated_mapping
from migrate.mapping.stream import read_safetensors
from migrate.source import (EXPORTED_WITH_MXNET, READ_WITHOUT_MXNET, WITHOUT_MXNET_VARIABLE, load_mxnet, model_source,
                            read_mxnet_files)
from tests.migrate.mapping import test_gluoncv as gluoncv_pairs
from tests.migrate.mapping import test_model_zoo as zoo_pairs
from tests.migrate.mapping import test_module_batchnorm as mod_bn
from tests.migrate.mapping import test_rnn as rnn_pairs
from tests.migrate.mapping.test_gluoncv import model_zoo  # noqa: F401  (fixture: gluoncv's zoo next to torch >= 2)
from tests.migrate.generate import test_generate_gluonts_style as gluonts_style
from tests.migrate.generate.test_generate import OpsBlock, RecurrentNet, TransformerBlock
from tests.migrate.generate.test_generate import generate_module as generate_module_from
from tests.test_torch_env import MxBnDepthwise, torch_python  # noqa: F401 (fixture: ./.venv-torch, checked)
from tests.torch_side import models as torch_models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 3


def _seeded(net, shape, dtype="float32", seed=0):
    """``net`` initialized (seeded Xavier), run once, its norm statistics and scales drawn at random, hybridized."""
    mx.random.seed(seed)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.hybridize()
    net(mx.nd.zeros(shape, dtype=dtype))
    rng = np.random.RandomState(seed + 1)
    for name, param in net.collect_params().items():
        if name.endswith(("running_mean", "running_var", "gamma", "beta")):
            low = 0.5 if name.endswith(("running_var", "gamma")) else -0.5
            param.set_data(mx.nd.array(rng.uniform(low, low + 1.0, param.shape)))
    return net


def _exported(folder, name, net, shape, dtype="float32"):
    net.export(str(folder / name))
    return (folder / f"{name}-symbol.json", folder / f"{name}-0000.params"), [shape], [dtype]


def _resnet(folder):
    return _exported(folder, "resnet", _seeded(vision.resnet18_v1(classes=10), (2, 3, 32, 32)), (2, 3, 32, 32))


def _ops(folder):
    return _exported(folder, "ops", _seeded(OpsBlock(prefix="ops_"), (2, 4, 9, 9)), (2, 4, 9, 9))


def _transformer(folder):
    return _exported(folder, "tf", _seeded(TransformerBlock(prefix="tf_"), (2, 5)), (2, 5), "int64")


def _lstm(folder):
    net = _seeded(RecurrentNet(gluon.rnn.LSTM, "NTC", embed=True, prefix="rnn_"), (2, 3))
    return _exported(folder, "lstm", net, (2, 3), "int64")


def _module(folder):
    """A Module checkpoint: conv, BatchNorm (fix_gamma by default), PReLU, pool, fc, SoftmaxOutput."""
    module = mod_bn.bound_module(mod_bn.bn_symbol(), mod_bn.SHAPE, "sgd", {"momentum": 0.9})
    mod_bn.module_steps(module, mod_bn.DATA, mod_bn.LABELS, range(2))
    files = mod_bn.checkpoint(module, folder, "bnnet")
    return (files["symbol"], files["params"]), [mod_bn.SHAPE], ["float32"]


def _bert(folder):
    """GluonNLP's BERT (2 layers, random init): two integer inputs, packed query/key/value."""
    pytest.importorskip("gluonnlp")
    from tests.migrate.mapping import test_transformers as bert_pairs
    net = bert_pairs._gluon_bert()
    net.hybridize()
    tokens = np.random.RandomState(0).randint(0, bert_pairs.VOCAB, bert_pairs.SHAPES[0])
    net(mx.nd.array(tokens), mx.nd.zeros(bert_pairs.SHAPES[1]))
    net.export(str(folder / "bert"))
    return (folder / "bert-symbol.json", folder / "bert-0000.params"), bert_pairs.SHAPES, ["int64", "int64"]


def _gru(folder):
    net = _seeded(RecurrentNet(gluon.rnn.GRU, "TNC", embed=False, prefix="gru_"), (3, 2, 3))
    return _exported(folder, "gru", net, (3, 2, 3))


def _gluonts_style(folder, name, net, shapes, dtype):
    """A GluonTS-style network (tests/migrate/generate/test_generate_gluonts_style.py) with several inputs; the
    shapes in the order the symbol file lists its inputs (``data2`` may come first)."""
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.cast(dtype)
    net.hybridize()
    net(*[mx.nd.ones(s, dtype=dtype) for s in shapes])
    net.export(str(folder / name))
    files = (folder / f"{name}-symbol.json", folder / f"{name}-0000.params")
    order = [n for n in mx.sym.load(str(files[0])).list_inputs() if n.startswith("data")]
    return files, [shapes[int(n[len("data"):])] for n in order], [dtype] * len(shapes)


def _deep_factor(folder):
    """Two stacked NTC LSTMs (the second's begin states shaped after the first RNN node) and a clipping Embedding."""
    return _gluonts_style(folder, "df", gluonts_style.DeepFactorStyle(prefix="df_"), [(3,), (3, 5, 3), (3, 5)],
                          "float32")


def _gaussian_process(folder):
    """_eye, diag and the linalg family, float64."""
    return _gluonts_style(folder, "gp", gluonts_style.GaussianProcessStyle(6, prefix="gp_"), [(2, 6, 3), (2, 6)],
                          "float64")


MODELS = {"resnet18_v1": _resnet, "ops_block": _ops, "transformer": _transformer, "lstm": _lstm, "gru": _gru,
          "bert": _bert, "module_checkpoint": _module, "deep_factor": _deep_factor,
          "gaussian_process": _gaussian_process}


def _inputs(shapes, dtypes, seed=3):
    """Seeded inputs: normal floats; integer ids 0 and 1 (within every embedding here: BERT's token types are 2)."""
    rng = np.random.RandomState(seed)
    return [torch.from_numpy(rng.randint(0, 2, s)) if d == "int64" else torch.from_numpy(rng.randn(*s).astype(d))
            for s, d in zip(shapes, dtypes)]


def _outputs(model, inputs, train):
    model.train(train)
    torch.manual_seed(0)
    result = model(*inputs)
    return [t.detach() for t in (result if isinstance(result, (tuple, list)) else [result])]


@pytest.fixture(scope="module", params=list(MODELS))
def generated_both_ways(request, tmp_path_factory):
    """(files, shapes, dtypes, folder) of one model; its module generated by the MXNet path (``mx.py``) and by the
    path without MXNet (``files.py``)."""
    folder = tmp_path_factory.mktemp(request.param)
    files, shapes, dtypes = MODELS[request.param](folder)
    with_mx = generate_torch(files, shapes, folder / "mx.py", input_dtypes=dtypes)
    os.environ[WITHOUT_MXNET_VARIABLE] = "1"
    try:
        without = generate_torch(files, shapes, folder / "files.py", input_dtypes=dtypes)
    finally:
        del os.environ[WITHOUT_MXNET_VARIABLE]
    return files, shapes, dtypes, folder, with_mx, without


class TestGenerateFromFiles:
    """generate_torch on files read without MXNet."""

    def test_same_source_text(self, generated_both_ways):
        """The file written without MXNet is the MXNet path's, character for character."""
        _, _, _, folder, _, _ = generated_both_ways
        assert (folder / "files.py").read_text() == (folder / "mx.py").read_text()

    def test_bit_identical_outputs(self, generated_both_ways):
        """Same state_dict, and the same outputs bit for bit in eval and in train mode (running statistics too)."""
        _, shapes, dtypes, _, with_mx, without = generated_both_ways
        a, b = with_mx.state_dict(), without.state_dict()
        assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
        inputs = _inputs(shapes, dtypes)
        for train in (False, True):
            for x, y in zip(_outputs(with_mx, inputs, train), _outputs(without, inputs, train)):
                assert torch.equal(x, y), f"train={train}: differs by {float((x - y).abs().max()):.3g}"
        a, b = with_mx.state_dict(), without.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)  # the training forward updated the statistics alike


class TestReadMxnetFiles:
    """read_mxnet_files against load_mxnet on the same files."""

    @pytest.mark.parametrize("make", [_resnet, _module, _lstm], ids=["resnet18_v1", "module_checkpoint", "lstm"])
    def test_same_graph_params_inputs_notes(self, tmp_path, make):
        """Same nodes (op, name, attrs, inputs, in MXNet's order), heads, aux states, arrays, inputs and notes."""
        files, _, _ = make(tmp_path)
        plain, mx_side = read_mxnet_files(*files), load_mxnet(files, None, None)
        assert plain.reader == READ_WITHOUT_MXNET and mx_side.reader == EXPORTED_WITH_MXNET
        mine, theirs = plain.document, json.loads(mx_side.symbol.tojson())
        assert [(n["op"], n["name"], n["attrs"], [e[:2] for e in n["inputs"]]) for n in mine["nodes"]] == [
            (n["op"], n["name"], n.get("attrs", {}), [e[:2] for e in n["inputs"]]) for n in theirs["nodes"]]
        assert [h[:2] for h in mine["heads"]] == [h[:2] for h in theirs["heads"]]
        assert plain.aux_names == mx_side.symbol.list_auxiliary_states()
        assert plain.input_names == mx_side.input_names and plain.notes == mx_side.notes
        assert sorted(plain.params) == sorted(mx_side.params)
        for name, value in mx_side.params.items():
            assert value.dtype == plain.params[name].dtype and np.array_equal(value.asnumpy(), plain.params[name])

    def test_model_source_follows_the_variable(self, tmp_path, monkeypatch):
        """MXNet reads files here by default; MIGRATE_WITHOUT_MXNET=1 reads them without it."""
        files, shapes, dtypes = _module(tmp_path)
        assert model_source(files, shapes, dtypes).reader == EXPORTED_WITH_MXNET
        monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
        assert model_source(files, shapes, dtypes).reader == READ_WITHOUT_MXNET

    def test_generated_mapping_equals_matching(self, tmp_path):
        """On a Module checkpoint (fix_gamma) and resnet18_v1, the mapping read from the generated module converts
        as matching's does: same keys, layout steps, folds, held scales and shapes."""
        fields = ("torch", "steps", "fold", "held", "mx_shape", "torch_shape")
        for make, shape in ((_module, mod_bn.SHAPE), (_resnet, (2, 3, 32, 32))):
            files, _, _ = make(tmp_path)
            model = generate_torch(files, shape, tmp_path / "gen.py")
            matched = migrate.name_mapping(files, model, shape)
            mine = generated_mapping(read_mxnet_files(*files), model)
            assert matched.ok and mine.ok and sorted(mine) == sorted(matched)
            assert {k: {f: mine.entry(k).get(f) for f in fields} for k in mine} == {
                k: {f: matched.entry(k).get(f) for f in fields} for k in matched}
        assert mine.held == {} and matched.held == {}  # resnet: Gluon's BatchNorm trains its scale
        assert generated_mapping(read_mxnet_files(*_module(tmp_path)[0]), generate_torch(
            _module(tmp_path)[0], mod_bn.SHAPE, tmp_path / "m.py")).held == {"bn1_gamma": 1.0}


def _resnet_pair(folder):
    files, _, _ = _resnet(folder)
    return files, (2, 3, 32, 32), lambda: torchvision.models.resnet18(num_classes=10)


def _module_pair(folder, fix_gamma):
    module = mod_bn.bound_module(mod_bn.bn_symbol(fix_gamma=fix_gamma), mod_bn.SHAPE, "sgd", {"momentum": 0.9})
    files = mod_bn.checkpoint(module, folder, "bnnet")
    return (files["symbol"], files["params"]), mod_bn.SHAPE, mod_bn.TwinNet


def _zoo_pair(folder, mx_name, tv_name, shape, **tv_kwargs):
    """A model-zoo network (BatchNorm statistics away from identity) exported, and its torchvision counterpart."""
    net = zoo_pairs._zoo(mx_name, shape)
    net.hybridize()
    net(mx.nd.zeros(shape))
    files, _, _ = _exported(folder, mx_name, net, shape)
    return files, shape, lambda: getattr(torchvision.models, tv_name)(**tv_kwargs)


def _rnn_pair(folder, case):
    net = rnn_pairs._gluon(*case)
    net.hybridize()
    shape, dtype = rnn_pairs._shape_dtype(case[3])
    net(mx.nd.zeros(shape, dtype=dtype))
    files, _, _ = _exported(folder, "rnn", net, shape, np.dtype(dtype).name)
    return files, shape, lambda: rnn_pairs._torch(*case), np.dtype(dtype)


PAIRS = {"resnet18_v1-torchvision": _resnet_pair,
         "squeezenet1_0-torchvision": lambda f: _zoo_pair(f, "squeezenet1_0", "squeezenet1_0", (1, 3, 224, 224)),
         "densenet121-torchvision": lambda f: _zoo_pair(f, "densenet121", "densenet121", (1, 3, 224, 224)),
         "inception_v3-torchvision": lambda f: _zoo_pair(f, "inception_v3", "inception_v3", (1, 3, 299, 299),
                                                         aux_logits=False, init_weights=False),
         "module-fix_gamma": lambda f: _module_pair(f, True), "module-trained_gamma": lambda f: _module_pair(f, False),
         "lstm-2-bidirectional": lambda f: _rnn_pair(f, ("lstm", 2, True, False)),
         "gru-embedding": lambda f: _rnn_pair(f, ("gru", 2, True, True))}


def _assert_same_mapping_and_verified(files, shape, twin, dtype=np.dtype("float32"), *, monkeypatch):
    """name_mapping and verification of ``twin()`` on ``files``, with MXNet and then without: the mappings convert
    alike and both verifications pass (``migrate.verify`` of the files compares with the graph's translation
    without MXNet), comparing the same nodes (skipping the same: an RNN's packed parameters are
    checked at the final output only), within 1e-5 of each other (relative above magnitude 1)."""
    with_mx = migrate.name_mapping(files, twin(), shape, input_dtypes=dtype)
    mx_report = migrate.verify(files, twin(), with_mx, shape, input_dtypes=dtype)
    monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
    source = model_source(files, None, None)  # shapes only finish a Gluon block's initialization
    without = migrate.name_mapping(source, twin(), shape, input_dtypes=dtype)
    assert source.reader == READ_WITHOUT_MXNET and with_mx.ok and without.ok
    assert _converting(without) == _converting(with_mx)
    report = migrate.verify(files, twin(), without, shape, input_dtypes=dtype)  # files without MXNet: translated
    assert report.ok and mx_report.ok and len(report.rows) == len(mx_report.rows) >= 4
    assert [(r.torch_node, r.skipped) for r in report.rows] == [(r.torch_node, r.skipped) for r in mx_report.rows]
    scale = max([1.0] + [r.scale for r in mx_report.rows])  # verify's limit is relative above magnitude 1
    assert abs(report.max_abs_diff - mx_report.max_abs_diff) <= 1e-5 * scale


class TestMatchingWithoutMxnet:
    """name_mapping and verification of a torch twin on files read without MXNet (the graph's torch translation
    stands for MXNet's export and run)."""

    @pytest.mark.parametrize("pair", list(PAIRS))
    def test_same_mapping_and_verified(self, tmp_path, monkeypatch, pair):
        """The mapping converts as the one matched against MXNet's export (keys, layout steps, folds, held scales,
        shapes, unmatched, defaults); verify against the translation passes node by node and at the output (1e-5),
        with the same nodes as verify against MXNet and differences within 1e-5 of MXNet's."""
        _assert_same_mapping_and_verified(*PAIRS[pair](tmp_path), monkeypatch=monkeypatch)

    def test_gluoncv_resnet18_v1b(self, tmp_path, monkeypatch, model_zoo):
        """GluonCV's resnet18_v1b against torchvision's resnet18: as above."""
        net = gluoncv_pairs._gluon(model_zoo, "resnet18_v1b")
        net.hybridize()
        net(mx.nd.zeros(gluoncv_pairs.SHAPE))
        files, _, _ = _exported(tmp_path, "gcv", net, gluoncv_pairs.SHAPE)
        _assert_same_mapping_and_verified(files, gluoncv_pairs.SHAPE, lambda: gluoncv_pairs._torchvision("resnet18"),
                                          monkeypatch=monkeypatch)

    def test_gluonnlp_bert(self, tmp_path, monkeypatch):
        """GluonNLP's BERT (query/key/value packed into one FullyConnected) against HF's BertModel: as above."""
        from tests.migrate.mapping import test_transformers as bert_pairs  # skips where gluonnlp is missing
        net = bert_pairs._gluon_bert()
        net.hybridize()
        tokens = np.random.RandomState(0).randint(0, bert_pairs.VOCAB, bert_pairs.SHAPES[0])
        net(mx.nd.array(tokens), mx.nd.zeros(bert_pairs.SHAPES[1]))
        files, _, _ = _exported(tmp_path, "bert", net, bert_pairs.SHAPES[0])
        _assert_same_mapping_and_verified(files, bert_pairs.SHAPES, bert_pairs._hf_bert,
                                          [np.dtype(d) for d in bert_pairs.DTYPES], monkeypatch=monkeypatch)

    def test_same_differences_reported(self, tmp_path, monkeypatch):
        """model-zoo resnet50_v1 (stride on the 1x1 conv) against torchvision's resnet50 (on the 3x3): both paths
        pair every name and report the same 6 stride differences; both verifications fail."""
        files, shape, twin = _zoo_pair(tmp_path, "resnet50_v1", "resnet50", (1, 3, 64, 64))
        with_mx = migrate.name_mapping(files, twin(), shape)
        monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
        without = migrate.name_mapping(files, twin(), shape)
        assert len(with_mx.differences) == 6 and not with_mx.unmatched_mx and not with_mx.unmatched_torch
        assert _converting(without) == _converting(with_mx)
        assert not migrate.verify(files, twin(), without, shape).ok

    def test_verify_translated_finds_a_wrong_weight(self, tmp_path, monkeypatch):
        """A mapping that swaps two same-shaped tensors fails verification and names the first diverging node."""
        files, shape, twin = PAIRS["resnet18_v1-torchvision"](tmp_path)
        monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
        source = model_source(files, [shape], [np.dtype("float32")])
        mapping = migrate.name_mapping(source, twin(), shape)
        document = mapping.to_dict()
        by_key = {e["torch"]: e for e in document["entries"]}
        first, second = by_key["layer1.0.conv1.weight"], by_key["layer1.0.conv2.weight"]
        first["torch"], second["torch"] = second["torch"], first["torch"]
        (tmp_path / "swapped.json").write_text(json.dumps(document))
        report = migrate.verify(source, twin(), migrate.NameMapping.load(tmp_path / "swapped.json"), shape)
        assert not report.ok and report.first_divergence.mx_node.endswith("_stage1_conv0_fwd")
        assert report.first_divergence.max_abs_diff > 1e-2


DAMAGED = [  # (description, damage(symbol path, params path), message pattern)
    ("symbol missing", lambda sym, par: sym.unlink(), r"symbol JSON file .*: not found"),
    ("symbol not JSON", lambda sym, par: sym.write_text("{nodes"), r"not JSON \(.* line 1 column 2"),
    ("symbol of MXNet 2", lambda sym, par: sym.write_text(json.dumps(dict(
        json.loads(sym.read_text()), attrs={"mxnet_version": ["int", 20000]}))), r"written by MXNet 2\.0\.0"),
    ("params cut short", lambda sym, par: par.write_bytes(par.read_bytes()[:-100]), r"byte \d+"),
    ("params unnamed", lambda sym, par: mx.nd.save(str(par), [mx.nd.zeros(3)]), r"1 unnamed arrays"),
]


class TestErrors:
    """Bad input on the path without MXNet: typed errors naming the thing."""

    def test_check_training_of_files_read_without_mxnet(self, cases):
        """check_training trains the MXNet model: given files read without MXNet, MXNetRequiredError names it."""
        files, case = cases["module"]["files"], cases["module"]
        source = read_mxnet_files(files["symbol"], files["params"])
        model = getattr(torch_models, MODULE_TWIN.split(":")[1])()
        with pytest.raises(MXNetRequiredError, match=r"^migrate\.check_training \(running the MXNet model\) needs "
                                                     r"MXNet 1\.9\.1"):
            migrate.check_training(source, model, [tuple(int(d) for d in case["shape"].split(","))])

    def _symbol_file(self, tmp_path, symbol, params):
        symbol.save(str(tmp_path / "x-symbol.json"))
        mx.nd.save(str(tmp_path / "x-0000.params"), params)
        return tmp_path / "x-symbol.json", tmp_path / "x-0000.params"

    def test_unknown_op_names_op_and_node(self, tmp_path, monkeypatch):
        """An op with no translation: UnsupportedOpError naming the op and the node; nothing written."""
        x = mx.sym.var("data")
        files = self._symbol_file(tmp_path, mx.sym.khatri_rao(x, x, name="kr"), {})
        monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
        with pytest.raises(UnsupportedOpError, match=r"'kr' uses op 'khatri_rao'"):
            generate_torch(files, (2, 3), tmp_path / "t.py")
        assert not (tmp_path / "t.py").exists()

    def test_shape_only_mxnet_infers_says_so(self, tmp_path, monkeypatch):
        """zeros whose axis only MXNet's inference fills in: UnsupportedOpError naming node and op, and that MXNet
        1.9.1 reads it (the MXNet path generates the same files)."""
        x = mx.sym.var("data")
        files = self._symbol_file(tmp_path, mx.sym.elemwise_add(x, mx.sym.zeros(shape=(0, 3), name="z"), name="add"),
                                  {})
        generate_torch(files, (2, 3), tmp_path / "with_mx.py")
        monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
        with pytest.raises(UnsupportedOpError, match=r"'z' \(op _zeros\).*'add'.*MXNet 1\.9\.1 installed"):
            generate_torch(files, (2, 3), tmp_path / "t.py")

    def test_wrong_shape_names_node(self, tmp_path, monkeypatch):
        """Input shapes the graph rejects: InputShapeError naming the node and op that fail."""
        files, _, _ = _module(tmp_path)
        monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
        with pytest.raises(migrate.errors.InputShapeError, match=r"'conv1' \(op Convolution\)"):
            generate_torch(files, (4, 5, 6, 6), tmp_path / "t.py")

    @pytest.mark.parametrize("description, damage, pattern", DAMAGED, ids=[row[0] for row in DAMAGED])
    def test_damaged_files(self, tmp_path, description, damage, pattern):
        """Damaged or foreign files: InputFileError naming the file and what is wrong (the field, the byte, the
        version), nothing from inside a reader."""
        files, _, _ = _module(tmp_path)
        damage(*files)
        with pytest.raises(InputFileError, match=pattern):
            read_mxnet_files(*files)

    def test_cli_one_line_on_a_damaged_file(self, tmp_path, capsys, monkeypatch):
        """`migrate generate` without MXNet on a cut params file: exit 2, one line naming the file, nothing written."""
        files, _, _ = _module(tmp_path)
        files[1].write_bytes(files[1].read_bytes()[:-100])
        code, _, err = _cli(["generate", "--symbol", files[0], "--params", files[1], "--input-shape",
                             ",".join(map(str, mod_bn.SHAPE)), "--out", tmp_path / "m.py"], capsys, True, monkeypatch)
        assert code == 2 and str(files[1]) in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "m.py").exists()

    def test_params_missing_an_aux_state(self, tmp_path):
        """A params file without the BatchNorm statistics: InputFileError naming them."""
        files, _, _ = _module(tmp_path)
        kept = {k: v for k, v in mx.nd.load(str(files[1])).items() if "moving" not in k}
        mx.nd.save(str(files[1]), kept)
        with pytest.raises(InputFileError, match=r"lacks 2 array\(s\).*bn1_moving_mean"):
            read_mxnet_files(*files)


def _run(python, *args):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    env.pop(WITHOUT_MXNET_VARIABLE, None)
    return subprocess.run([python, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def _gluon_case(folder) -> dict:
    """A Gluon export with BatchNorm and a depthwise conv trained STEPS steps by LrTrainer (sgd momentum, head
    lr_mult 2), its settings and states, then STEPS more MXNet steps (summed squared error)."""
    mx.random.seed(0)
    net = MxBnDepthwise(prefix="bndw_")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3},
                        rules=[Rule("*head*", lr_mult=2.0)])
    rng = np.random.RandomState(5)
    data = [(rng.randn(4, 3, 8, 8).astype("float32"), rng.randn(4, 5).astype("float32")) for _ in range(2 * STEPS)]
    _gluon_steps(net, trainer, data[:STEPS])
    mx.nd.waitall()
    net.export(str(folder / "bndw"))
    trainer.export_settings(str(folder / "settings.json"))
    trainer.save_states(str(folder / "trainer.states"))
    middle = {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}
    np.savez(folder / "data.npz", **{f"{v}{i}": a for i, (x, y) in enumerate(data[STEPS:]) for v, a in (("x", x),
                                                                                                         ("y", y))})
    _gluon_steps(net, trainer, data[STEPS:])
    mx.nd.waitall()
    final = {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}
    files = {"symbol": folder / "bndw-symbol.json", "params": folder / "bndw-0000.params",
             "settings": folder / "settings.json", "states": folder / "trainer.states"}
    return {"files": files, "shape": "1,3,8,8", "class": "Bndw", "loss": "squared", "middle": middle,
            "expected": final}


def _gluon_steps(net, trainer, data):
    for x, y in data:
        with autograd.record():
            loss = ((net(mx.nd.array(x)) - mx.nd.array(y)) ** 2).sum()
        loss.backward()
        trainer.step(x.shape[0])


def _module_case(folder) -> dict:
    """A Module checkpoint with BatchNorm (fix_gamma, the op's default), PReLU and SoftmaxOutput trained STEPS adam
    steps, saved with its optimizer states and settings, then STEPS more Module steps."""
    module = mod_bn.bound_module(mod_bn.bn_symbol(), mod_bn.SHAPE, "adam", {})
    mod_bn.module_steps(module, mod_bn.DATA, mod_bn.LABELS, range(STEPS))
    files = mod_bn.checkpoint(module, folder, "bnnet")
    np.savez(folder / "data.npz", **{f"{v}{i}": a[STEPS + i] for i in range(STEPS)
                                     for v, a in (("x", mod_bn.DATA), ("y", mod_bn.LABELS))})
    mod_bn.module_steps(module, mod_bn.DATA, mod_bn.LABELS, range(STEPS, 2 * STEPS))
    final = mod_bn.module_arrays(module)
    return {"files": {k: files[k] for k in ("symbol", "params", "settings", "states")},
            "shape": ",".join(map(str, mod_bn.SHAPE)), "class": "Bnnet", "loss": "softmax", "middle": files["saved"],
            "expected": mod_bn.expected_params(final, fix_gamma=True, aux=True)}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """The Gluon and the Module case, their files written here by MXNet."""
    made = {}
    for name, make in (("gluon", _gluon_case), ("module", _module_case)):
        folder = tmp_path_factory.mktemp(f"files-{name}")
        made[name] = dict(make(folder), folder=folder)
    return made


TWIN = "tests.torch_side.models:bn_depthwise_net"  # the torch twin of MxBnDepthwise, importable without MXNet
MODULE_TWIN = "tests.torch_side.models:module_bn_twin"  # the twin of the Module checkpoint's symbol
RUNS = [("gluon", "generate"), ("module", "generate"), ("gluon", TWIN), ("module", MODULE_TWIN)]
RUN_IDS = ["gluon-generate", "module-generate", "gluon-twin", "module-twin"]


@pytest.fixture(scope="module")
def migrated_without_mxnet(torch_python, cases, tmp_path_factory):
    """``tests.torch_side.files_worker`` on the RUNS in ./.venv-torch: its summary."""
    job = [{"folder": str(cases[name]["folder"]), **{k: str(v) for k, v in cases[name]["files"].items()},
            "shape": cases[name]["shape"], "class": cases[name]["class"], "loss": cases[name]["loss"],
            "steps": STEPS, "torch": torch_flag} for name, torch_flag in RUNS]
    path = tmp_path_factory.mktemp("job") / "job.json"
    path.write_text(json.dumps(job))
    done = _run(torch_python, "-m", "tests.torch_side.files_worker", str(path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


class TestTorchEnvironment:
    """./.venv-torch (numpy 2, no MXNet) converts the files MXNet wrote here."""

    @pytest.mark.parametrize("name", ["gluon", "module"])
    def test_generate_writes_the_mxnet_path_file(self, torch_python, cases, name, tmp_path):
        """`migrate generate` there writes the file generate_torch writes here through MXNet; --json says which path
        read the graph."""
        case = cases[name]
        files = case["files"]
        generate_torch((files["symbol"], files["params"]), tuple(map(int, case["shape"].split(","))),
                       tmp_path / "mx.py")
        done = _run(torch_python, "-m", "migrate", "generate", "--symbol", str(files["symbol"]), "--params",
                    str(files["params"]), "--input-shape", case["shape"], "--out", str(tmp_path / "files.py"), "--json")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert json.loads(done.stdout)["mxnet_graph"] == READ_WITHOUT_MXNET
        assert (tmp_path / "files.py").read_text() == (tmp_path / "mx.py").read_text()

    def test_no_mxnet_on_numpy_2(self, migrated_without_mxnet):
        """The worker ran on numpy 2 without importing mxnet; every `migrate all` exited 0 and read the graph without
        MXNet; the twin was verified against the graph's torch translation (max abs diff within 1e-5), a generated
        module not at all (it is that translation)."""
        assert np.lib.NumpyVersion(migrated_without_mxnet["numpy"]) >= "2.0.0"
        assert not migrated_without_mxnet["mxnet_imported"]
        for (_, torch_flag), result in zip(RUNS, migrated_without_mxnet["cases"]):
            assert result["exit_code"] == 0 and result["mxnet_graph"] == READ_WITHOUT_MXNET
            verified = result["verify"]
            if torch_flag == "generate":
                assert verified["compared_with"] is None
            else:
                assert verified["compared_with"] == "the graph's torch translation" and verified["ok"]
                assert verified["max_abs_diff"] <= 1e-5 and len(verified["rows"]) >= 4

    @pytest.mark.parametrize("name, torch_flag", RUNS, ids=RUN_IDS)
    def test_training_continues_mxnet(self, cases, migrated_without_mxnet, name, torch_flag):
        """load_migration + STEPS torch steps there == MXNet's next STEPS steps here within 1e-5 (parameters, and
        running statistics where torch updates them as MXNet: the generated module; a fix_gamma scale stays 1); the
        torch steps moved the weights."""
        case = cases[name]
        result = np.load(case["folder"] / f"result-{torch_flag.replace(':', '-')}.npz")
        statistics = ("running_", "moving_")  # a twin's BatchNorm2d adds the unbiased batch variance, MXNet the biased
        expected = {n: v for n, v in case["expected"].items()
                    if torch_flag == "generate" or not any(s in n for s in statistics)}
        assert len(expected) == {"generate": len(case["expected"]), TWIN: 8, MODULE_TWIN: 5}[torch_flag]
        worst = max((float(np.abs(result[n] - v).max()), n) for n, v in expected.items())
        assert worst[0] <= 1e-5, f"{name} {torch_flag}: {worst[1]} differs from MXNet's by {worst[0]:.3g}"
        moved = max(float(np.abs(result[n] - case["middle"][n]).max()) for n in expected)
        assert moved > 1e-3
        if name == "module":
            assert np.array_equal(result["bn1_gamma"], np.ones(4, np.float32))


def _cli(args, capsys, without_mxnet, monkeypatch):
    """``migrate ARGS`` in process, with or without MXNet reading the files: (exit code, stdout, stderr)."""
    if without_mxnet:
        monkeypatch.setenv(WITHOUT_MXNET_VARIABLE, "1")
    else:
        monkeypatch.delenv(WITHOUT_MXNET_VARIABLE, raising=False)
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _all_args(case, torch_flag, out):
    files = case["files"]
    return ["all", "--symbol", files["symbol"], "--params", files["params"], "--settings", files["settings"],
            "--states", files["states"], "--torch", torch_flag, "--input-shape", case["shape"], "--out", out]


def _converting(mapping) -> dict:
    """The fields of each entry that convert weights and states, and what is unmatched or defaulted."""
    fields = ("torch", "steps", "fold", "held", "mx_shape", "torch_shape")
    return {"entries": {k: {f: mapping.entry(k).get(f) for f in fields} for k in sorted(mapping)},
            "unmatched": (mapping.unmatched_mx, mapping.unmatched_torch), "defaults": mapping.torch_defaults,
            "differences": mapping.differences}


def _optimizer_state(folder, case, torch_flag) -> dict:
    """The state_dict of the optimizer ``load_migration`` builds from ``folder``."""
    if torch_flag == "generate":
        model = getattr(generate_module_from(folder / "model.py"), case["class"])()
    else:
        model = getattr(torch_models, torch_flag.split(":")[1])()
    optimizer, _ = migrate.load_migration(folder, model)
    return optimizer.state_dict()


class TestCli:
    """The migrate command on files read without MXNet (MIGRATE_WITHOUT_MXNET=1 here)."""

    @pytest.mark.parametrize("without", [False, True], ids=["with-mxnet", "without-mxnet"])
    def test_all_generate_reads_the_files_once(self, cases, tmp_path, capsys, monkeypatch, without):
        """`all --torch generate` reads the MXNet files once (generation, matching and verification share the source),
        with MXNet and without it."""
        from migrate.source import CheckpointSource, FileSource
        reads = []
        for kind in (CheckpointSource, FileSource):
            def read(mx_model, shapes=None, dtypes=None, _read=kind.read):
                reads.append(mx_model)
                return _read(mx_model, shapes, dtypes)
            monkeypatch.setattr(kind, "read", read)
        code, _, err = _cli(_all_args(cases["module"], "generate", tmp_path / "out"), capsys, without, monkeypatch)
        assert code == 0 and len(reads) == 1, (err, reads)

    def test_report_says_which_path_read_the_graph(self, cases, tmp_path, capsys, monkeypatch):
        """`generate --json` has mxnet_graph: 'exported with MXNet' by default, the other path with the variable;
        the text report says it too."""
        files, shape = cases["module"]["files"], cases["module"]["shape"]
        args = ["generate", "--symbol", files["symbol"], "--params", files["params"], "--input-shape", shape]
        for without, reader in ((False, EXPORTED_WITH_MXNET), (True, READ_WITHOUT_MXNET)):
            code, out, _ = _cli(args + ["--out", tmp_path / f"{without}.py", "--json"], capsys, without, monkeypatch)
            assert code == 0 and json.loads(out)["mxnet_graph"] == reader
            code, out, _ = _cli(args + ["--out", tmp_path / f"{without}.py", "--force"], capsys, without, monkeypatch)
            assert code == 0 and f"MXNet model: {reader}" in out

    @pytest.mark.parametrize("name, torch_flag", RUNS, ids=RUN_IDS)
    def test_all_gives_the_mxnet_path_folder(self, cases, tmp_path, capsys, monkeypatch, name, torch_flag):
        """`all` without MXNet: the same weights, param groups and optimizer state as with MXNet (the same model.py
        for --torch generate), a mapping that converts alike; the twin verified against the translation."""
        case, outs = cases[name], {}
        for without in (False, True):
            outs[without] = tmp_path / f"out-{without}"
            code, _, err = _cli(_all_args(case, torch_flag, outs[without]), capsys, without, monkeypatch)
            assert code == 0, err
        mx_dir, plain_dir = outs[False], outs[True]
        if torch_flag == "generate":
            assert (mx_dir / "model.py").read_text() == (plain_dir / "model.py").read_text()
        assert json.loads((mx_dir / "param_groups.json").read_text()) == json.loads(
            (plain_dir / "param_groups.json").read_text())
        a, b = (read_safetensors(d / "weights.safetensors") for d in (mx_dir, plain_dir))
        assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
        maps = [migrate.NameMapping.load(d / "mapping.json") for d in (mx_dir, plain_dir)]
        assert _converting(maps[0]) == _converting(maps[1])
        states = [_optimizer_state(d, case, torch_flag) for d in (mx_dir, plain_dir)]
        assert states[0]["param_groups"] == states[1]["param_groups"] and states[0]["state"]
        assert list(states[0]["state"]) == list(states[1]["state"])
        for i, state in states[0]["state"].items():
            for k, value in state.items():
                other = states[1]["state"][i][k]
                assert torch.equal(value, other) if torch.is_tensor(value) else value == other, f"state {i} {k}"
        reports = [json.loads((d / "report.json").read_text()) for d in (mx_dir, plain_dir)]
        assert [r["mxnet_graph"] for r in reports] == [EXPORTED_WITH_MXNET, READ_WITHOUT_MXNET]
        if torch_flag == "generate":
            assert reports[1]["verify"]["compared_with"] is None
        else:
            assert [r["verify"]["compared_with"] for r in reports] == ["MXNet", "the graph's torch translation"]
            assert [[row["torch_node"] for row in r["verify"]["rows"]] for r in reports][0] == [
                row["torch_node"] for row in reports[1]["verify"]["rows"]]
            assert reports[1]["verify"]["ok"] and reports[1]["verify"]["max_abs_diff"] <= 1e-5

    def test_weights_with_a_mapping(self, cases, tmp_path, capsys, monkeypatch):
        """`weights --mapping` (from `migrate map` with MXNet) converts the files without MXNet as with it."""
        case, files = cases["gluon"], cases["gluon"]["files"]
        code, _, err = _cli(["map", "--symbol", files["symbol"], "--params", files["params"], "--torch", TWIN,
                             "--input-shape", case["shape"], "--out", tmp_path / "mapping.json"], capsys, False,
                            monkeypatch)
        assert code == 0, err
        weights = {}
        for without in (False, True):
            out = tmp_path / f"w-{without}.safetensors"
            code, _, err = _cli(["weights", "--symbol", files["symbol"], "--params", files["params"], "--torch", TWIN,
                                 "--mapping", tmp_path / "mapping.json", "--out", out], capsys, without, monkeypatch)
            assert code == 0, err
            weights[without] = read_safetensors(out)
        assert all(torch.equal(weights[False][k], weights[True][k]) for k in weights[False])
        assert torch.equal(weights[True]["bn.running_var"], torch.from_numpy(case["middle"]["bndw_bn_running_var"]))

    def test_check_needs_mxnet(self, cases, capsys, monkeypatch):
        """`check` trains the MXNet model: without MXNet, exit 2 naming what needs it."""
        case = cases["module"]
        files = case["files"]
        code, _, err = _cli(["check", "--symbol", files["symbol"], "--params", files["params"], "--settings",
                             files["settings"], "--torch", "generate", "--input-shape", case["shape"]], capsys, True,
                            monkeypatch)
        assert code == 2 and "training the MXNet model" in err and "needs MXNet 1.9.1" in err
