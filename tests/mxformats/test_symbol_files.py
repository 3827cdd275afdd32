"""mxformats.symbol against MXNet 1.9.1's own loader: for symbol JSON written by MXNet and for the same symbols spelled
as older MXNet versions wrote them, ``read_symbol`` gives the nodes, attributes, inputs, arg_nodes and heads of
``mx.sym.load(path).tojson()``; MXNet loads each old spelling to the symbol it came from (so the spellings are
MXNet's); damaged and foreign files are refused with typed errors."""
import json
import random

import mxnet as mx
import pytest
from mxnet import gluon

from mxformats.errors import SymbolFileError
from mxformats.symbol import INPUT_NAMES, read_symbol


def _gluon_cnn(folder) -> str:
    """A Gluon export: conv-BN-relu, PReLU, pooling, dropout, dense (hybridized)."""
    net = gluon.nn.HybridSequential(prefix="cnn_")
    with net.name_scope():
        net.add(gluon.nn.Conv2D(4, 3, in_channels=3), gluon.nn.BatchNorm(in_channels=4), gluon.nn.Activation("relu"),
                gluon.nn.PReLU(), gluon.nn.MaxPool2D(), gluon.nn.Dropout(0.5), gluon.nn.Dense(5, in_units=36))
    net.initialize()
    net.hybridize()
    net(mx.nd.zeros((1, 3, 8, 8)))
    net.export(str(folder / "cnn"))
    return str(folder / "cnn-symbol.json")


def _module_symbol():
    """A Module-style symbol: hidden keys on variables (lr_mult, wd_mult, ctx_group), BatchNorm, two heads (argmax
    with axis -1), LayerNorm, a broadcast_add of a variable, Embedding, Deconvolution, bilinear UpSampling,
    SoftmaxOutput."""
    data = mx.sym.var("data")
    weight = mx.sym.var("fc1_weight", lr_mult=0.1, wd_mult=0.0)
    with mx.AttrScope(ctx_group="dev1"):
        fc1 = mx.sym.FullyConnected(data, weight=weight, num_hidden=8, name="fc1")
    act = mx.sym.Activation(mx.sym.BatchNorm(fc1, fix_gamma=False, name="bn1"), act_type="relu", name="relu1")
    norm = mx.sym.broadcast_add(mx.sym.LayerNorm(act, name="ln1"), mx.sym.var("shift_rhs", lr_mult=0.5), name="shift")
    emb = mx.sym.Embedding(mx.sym.var("tokens"), input_dim=10, output_dim=8, name="emb")
    image = mx.sym.reshape(norm + mx.sym.sum(emb, axis=1), shape=(0, 2, 2, 2), name="img")
    up = mx.sym.UpSampling(image, scale=2, sample_type="bilinear", num_filter=2, name="up")
    deconv = mx.sym.Deconvolution(up, kernel=(2, 2), num_filter=2, name="deconv")
    fc2 = mx.sym.FullyConnected(mx.sym.flatten(deconv), num_hidden=3, name="fc2")
    return mx.sym.Group([mx.sym.SoftmaxOutput(fc2, name="softmax"), mx.sym.argmax(fc2, axis=-1, name="pick")])


def _foreach_symbol():
    """A control-flow op (``_foreach``) with a subgraph."""
    outs, states = mx.sym.contrib.foreach(lambda x, s: (x + s[0], [(x + s[0]) * 2]), mx.sym.var("seq"),
                                          [mx.sym.var("init")], name="loop")
    return mx.sym.Group([outs, states[0]])


@pytest.fixture(scope="module")
def modern(tmp_path_factory):
    """name -> the JSON MXNet 1.9.1 wrote for it."""
    folder = tmp_path_factory.mktemp("symbols")
    with open(_gluon_cnn(folder)) as handle:
        files = {"gluon-cnn": handle.read()}
    files["module"] = _module_symbol().tojson()
    files["foreach"] = _foreach_symbol().tojson()
    return files


def _view(document: dict) -> dict:
    """A symbol JSON's content, read with plain json: what read_symbol must give."""
    return {"nodes": [(n["op"], n["name"], n.get("attrs", {}), [tuple(e[:2]) for e in n["inputs"]],
                       n.get("control_deps", []), [_view(g) for g in n.get("subgraphs", [])])
                      for n in document["nodes"]],
            "arg_nodes": list(document["arg_nodes"]), "heads": [tuple(e[:2]) for e in document["heads"]]}


def _ours(graph) -> dict:
    return {"nodes": [(n.op, n.name, n.attrs, list(n.inputs), list(n.control_deps), [_ours(g) for g in n.subgraphs])
                      for n in graph.nodes],
            "arg_nodes": list(graph.arg_nodes), "heads": list(graph.heads)}


def _set_version(document: dict, version):
    if version is None:
        document.pop("attrs", None)
    else:
        document["attrs"] = {"mxnet_version": ["int", version]}


def _spell(document: dict, key: str) -> None:
    for node in document["nodes"]:
        if "attrs" in node:
            node[key] = node.pop("attrs")


def _plain_hidden_keys(document: dict) -> None:
    """Hidden keys as MXNet 1.0 and before spelled them: ``lr_mult`` for ``__lr_mult__``."""
    for node in document["nodes"]:
        attrs = node.get("attrs", {})
        for key in [k for k in attrs if k.strip("_") in ("lr_mult", "wd_mult", "ctx_group")]:
            attrs[key.strip("_")] = attrs.pop(key)


def _hidden_keys_on_ops(document: dict) -> None:
    """A variable's ``__lr_mult__`` as MXNet 0.9 spelled it: ``weight_lr_mult`` on the op it feeds."""
    nodes = document["nodes"]
    for node in nodes:
        for position, (source, _, *_rest) in enumerate(node["inputs"]):
            variable = nodes[source]
            prefix = node["name"] + "_"
            if node["op"] == "null" or variable["op"] != "null" or not variable["name"].startswith(prefix):
                continue
            for key in [k for k in variable.get("attrs", {}) if k in ("__lr_mult__", "__wd_mult__")]:
                node.setdefault("attrs", {})[f"{variable['name'][len(prefix):]}_{key.strip('_')}"] = \
                    variable["attrs"].pop(key)


def _drop_nodes(document: dict, drop) -> None:
    """Remove the nodes ``drop(node)`` selects, and every input entry naming them (pre-0.9 files had no aux)."""
    nodes = document["nodes"]
    keep = [i for i, node in enumerate(nodes) if not drop(node)]
    new = {old: i for i, old in enumerate(keep)}
    for node in nodes:
        node["inputs"] = [[new[e[0]], *e[1:]] for e in node["inputs"] if e[0] in new]
    document["nodes"] = [nodes[i] for i in keep]
    document["arg_nodes"] = [new[i] for i in document["arg_nodes"] if i in new]
    document["heads"] = [[new[e[0]], *e[1:]] for e in document["heads"]]
    document.pop("node_row_ptr", None)


def _pre_nnvm(document: dict) -> None:
    """MXNet 0.8: no version, op attributes under ``param``, two-number entries, ``backward_source_id``, no
    auxiliary-state variables, plain hidden keys."""
    _plain_hidden_keys(document)
    _drop_nodes(document, lambda node: node["op"] == "null" and node["name"].endswith(("moving_mean", "moving_var")))
    for node in document["nodes"]:
        node["inputs"] = [e[:2] for e in node["inputs"]]
        node["backward_source_id"] = -1
        if node["op"] != "null" and "attrs" in node:
            node["param"] = node.pop("attrs")
        elif "attrs" in node:
            node["attr"] = node.pop("attrs")
    document["heads"] = [e[:2] for e in document["heads"]]
    _set_version(document, None)


def _shuffled(document: dict) -> None:
    """The same graph with its nodes listed in another order, and a node no head reaches."""
    nodes = document["nodes"] + [{"op": "null", "name": "unreached", "inputs": []}]
    order = list(range(len(nodes)))
    random.Random(3).shuffle(order)
    new = {old: i for i, old in enumerate(order)}
    for node in nodes:
        node["inputs"] = [[new[e[0]], *e[1:]] for e in node["inputs"]]
    document["nodes"] = [nodes[i] for i in order]
    document["arg_nodes"] = sorted(new[i] for i, n in enumerate(nodes) if n["op"] == "null")
    document["heads"] = [[new[e[0]], *e[1:]] for e in document["heads"]]
    document.pop("node_row_ptr", None)


# name -> (how it rewrites a modern document, whether MXNet loads it to the same symbol as the modern one)
SPELLINGS = {
    "as written (1.9.1)": (lambda d: None, True),
    "attr (nnvm before 1.3), 1.2.0": (lambda d: (_spell(d, "attr"), _set_version(d, 10200)), True),
    "plain hidden keys, 1.0.0": (lambda d: (_plain_hidden_keys(d), _spell(d, "attr"), _set_version(d, 10000)), True),
    "hidden keys on ops, 0.9.3": (lambda d: (_hidden_keys_on_ops(d), _plain_hidden_keys(d), _spell(d, "attr"),
                                             _set_version(d, 903)), False),
    "pre-nnvm 0.8 (param, 2-number entries, no aux)": (_pre_nnvm, False),
    "nodes shuffled, one unreached": (_shuffled, True),
}


# _foreach came with MXNet 1.3: no 0.x file holds it (MXNet 0.8 would give it the inputs its num_args counts)
CASES = [(symbol, spelling) for symbol in ("gluon-cnn", "module", "foreach") for spelling in SPELLINGS
         if not (symbol == "foreach" and spelling.startswith(("hidden keys on ops", "pre-nnvm")))]


@pytest.mark.parametrize("symbol, spelling", CASES)
def test_reader_gives_what_mxnet_loads(modern, tmp_path, symbol, spelling):
    """For each symbol in each spelling: read_symbol == mx.sym.load(path).tojson() (nodes, attrs, inputs, arg_nodes,
    heads, subgraphs); where the spelling loses nothing, MXNet loads it to the symbol it was made from."""
    rewrite, lossless = SPELLINGS[spelling]
    document = json.loads(modern[symbol])
    rewrite(document)
    path = tmp_path / "old-symbol.json"
    path.write_text(json.dumps(document))
    upgraded = _view(json.loads(mx.sym.load(str(path)).tojson()))
    assert _ours(read_symbol(path)) == upgraded
    if lossless:
        assert upgraded == _view(json.loads(modern[symbol]))


def test_old_spellings_were_upgraded(modern, tmp_path):
    """The 0.8 and 0.9 spellings of the Module symbol were really upgraded: the hidden keys are back on fc1_weight
    (from the variable's plain keys and from fc1's weight_lr_mult), argmax lost axis -1, BatchNorm's moving
    statistics are variables again, carrying bn1's attributes and MXNet's __init__; shift's rhs_lr_mult is back on
    shift_rhs."""
    for rewrite, version in ((SPELLINGS["hidden keys on ops, 0.9.3"][0], 903), (_pre_nnvm, 800)):
        document = json.loads(modern["module"])
        rewrite(document)
        path = tmp_path / f"v{version}-symbol.json"
        path.write_text(json.dumps(document))
        graph = read_symbol(path)
        weight = graph.nodes[graph.index("fc1_weight")].attrs
        assert (weight["__lr_mult__"], weight["__wd_mult__"], graph.mxnet_version) == ("0.1", "0.0", version)
        assert graph.nodes[graph.index("shift_rhs")].attrs["__lr_mult__"] == "0.5"  # an op not in INPUT_NAMES
        assert "weight_lr_mult" not in json.dumps(_ours(graph)) and "axis" not in graph.nodes[graph.index("pick")].attrs
        mean = graph.nodes[graph.index("bn1_moving_mean")].attrs
        assert mean["__init__"] == '["zero", {}]' and graph.nodes[graph.index("bn1_moving_var")].attrs["__init__"] == \
            '["one", {}]'
    assert mean["fix_gamma"] == "False" and graph.nodes[graph.index("bn1")].inputs[3][0] == graph.index(
        "bn1_moving_mean")


OPS = [("FullyConnected", {"num_hidden": 2}), ("FullyConnected", {"num_hidden": 2, "no_bias": True}),
       ("Convolution", {"kernel": (1, 1), "num_filter": 2}), ("Deconvolution", {"kernel": (1, 1), "num_filter": 2}),
       ("Deconvolution", {"kernel": (1, 1), "num_filter": 2, "no_bias": False}),
       ("Convolution_v1", {"kernel": (1, 1), "num_filter": 2}), ("BatchNorm", {}), ("BatchNorm_v1", {}),
       ("contrib.SyncBatchNorm", {"key": "k"}), ("contrib.BatchNormWithReLU", {}), ("InstanceNorm", {}),
       ("LayerNorm", {}), ("GroupNorm", {}), ("Embedding", {"input_dim": 3, "output_dim": 2}),
       ("contrib.SparseEmbedding", {"input_dim": 3, "output_dim": 2}), ("LeakyReLU", {"act_type": "prelu"}),
       ("LeakyReLU", {"act_type": "leaky"}), ("IdentityAttachKLSparseReg", {}), ("SoftmaxOutput", {}),
       ("LinearRegressionOutput", {}), ("LogisticRegressionOutput", {}), ("MAERegressionOutput", {}),
       ("SVMOutput", {})]


@pytest.mark.parametrize("op, kwargs", OPS, ids=[f"{op}{'-' + '-'.join(map(str, kw.values())) if kw else ''}"
                                                  for op, kw in OPS])
def test_input_names_are_mxnets(op, kwargs):
    """INPUT_NAMES gives each op's inputs as MXNet composes them (its variables are named {op name}_{input})."""
    function = mx.sym
    for part in op.split("."):
        function = getattr(function, part)
    document = json.loads(function(mx.sym.var("data"), name="op", **kwargs).tojson())
    node = document["nodes"][document["heads"][0][0]]
    names = [document["nodes"][e[0]]["name"].replace("op_", "", 1) for e in node["inputs"]]
    assert list(INPUT_NAMES[node["op"]]({k: str(v) for k, v in node.get("attrs", {}).items()})) == names


def _small() -> dict:
    return {"nodes": [{"op": "null", "name": "x", "inputs": []},
                      {"op": "Activation", "name": "relu", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]}],
            "arg_nodes": [0], "heads": [[1, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}


def _edited(edit):
    document = _small()
    edit(document)
    return json.dumps(document).encode()


def _relu(key, value):
    return lambda d: d["nodes"][1].__setitem__(key, value)


# (description, file bytes, message pattern, whether MXNet 1.9.1 loads it all the same)
ERRORS = [
    ("not JSON", b'{"nodes": [', r"not JSON \(Expecting value at line 1 column 12, character 11\)", False),
    ("not UTF-8", b'{"nodes": "\xff"}', "byte 11 is not UTF-8", False),
    ("an array", b"[1, 2]", "the JSON is an array, not an MXNet symbol", False),
    ("no heads", b'{"nodes": [], "arg_nodes": []}', r"the top level lacks \['heads'\]", False),
    ("unknown field", _edited(lambda d: d.update(extra=1)), r"field\(s\) \['extra'\]", False),
    ("input out of range", _edited(_relu("inputs", [[7, 0, 0]])),
     r"nodes\[1\].inputs\[0\] is 7, not a node index \(0..1\)", False),
    ("entry of one number", _edited(_relu("inputs", [[0]])), r"nodes\[1\].inputs\[0\] is \[0\], not \[node, output\]",
     False),
    ("negative output", _edited(_relu("inputs", [[0, -1, 0]])), "output and version must be unsigned", True),
    ("attr not a string", _edited(_relu("attrs", {"act_type": 1})),
     r"nodes\[1\].attrs has values that are not strings \(\['act_type'", False),
    ("cycle", _edited(_relu("inputs", [[1, 0, 0]])), r"nodes\[1\] \('relu'\) depends on itself through node 1", True),
    ("arg node is an op", _edited(lambda d: d.update(arg_nodes=[1])), r"arg_nodes\[0\] names node 1, 'relu', an op",
     False),
    ("variable with inputs", _edited(lambda d: d["nodes"][0].update(inputs=[[1, 0, 0]])),
     r"nodes\[0\] is the variable 'x' but has 1 input", False),
    ("bad version", _edited(lambda d: d["attrs"].update(mxnet_version=["str", "1"])),
     r"attrs.mxnet_version is \['str', '1'\]", False),
    ("MXNet 2", _edited(lambda d: d["attrs"].update(mxnet_version=["int", 20000])),
     r"written by MXNet 2\.0\.0 \(mxnet_version 20000\).*MXNet 1\.x", True),
]


@pytest.mark.parametrize("description, data, pattern, mxnet_loads", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_files_are_typed_errors(tmp_path, description, data, pattern, mxnet_loads):
    """Damaged, foreign and newer files: SymbolFileError naming the file and what is wrong where. MXNet refuses them
    too, except where it is more lenient (a cycle, a negative output index: it builds a broken symbol; a 2.x file:
    it warns)."""
    path = tmp_path / "bad-symbol.json"
    path.write_bytes(data)
    with pytest.raises(SymbolFileError, match=pattern) as caught:
        read_symbol(path)
    assert "bad-symbol.json" in str(caught.value)
    try:
        mx.sym.load(str(path)).tojson()
        loaded = True
    except (mx.base.MXNetError, UnicodeDecodeError):  # MXNet's message may quote bytes that are not UTF-8
        loaded = False
    assert loaded == mxnet_loads


def test_missing_and_special_files(tmp_path):
    """A missing file and a folder: SymbolFileError naming the path, nothing opened."""
    with pytest.raises(SymbolFileError, match=r"absent-symbol.json.*No such file"):
        read_symbol(tmp_path / "absent-symbol.json")
    with pytest.raises(SymbolFileError, match="it is a folder"):
        read_symbol(tmp_path)
