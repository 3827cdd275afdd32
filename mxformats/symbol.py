"""MXNet's symbol JSON (``NAME-symbol.json``: ``Symbol.save``, ``HybridBlock.export``, ``Module.save_checkpoint``)
read into a plain graph without MXNet, upgraded from older spellings as MXNet 1.9.1's own loader upgrades them.

The file (nnvm's ``SaveJSON``): ``{"nodes": [...], "arg_nodes": [...], "node_row_ptr": [...], "heads": [...],
"attrs": {"mxnet_version": ["int", 10901]}}``; a node is ``{"op": name or "null" (a variable), "name": ...,
"attrs": {str: str}, "inputs": [[node, output, version], ...]}`` with optional ``control_deps`` and ``subgraphs``
(control-flow ops: graphs of the same form).

Older spellings read as MXNet 1.9.1 reads them (nnvm's ``LoadJSON`` and MXNet's ``src/nnvm/legacy_json_util.cc``):

- a node's attributes under ``attrs``, ``attr`` (nnvm before MXNet 1.3) or ``param`` (MXNet before 0.9); the later of
  ``attrs``/``attr`` replaces the earlier, ``param`` adds the keys they lack; ``backward_source_id`` is ignored;
- input entries of two numbers (``[node, output]``, before nnvm) as well as three;
- no ``mxnet_version``: MXNet 0.8.0. Before 1.9.1, hidden keys spelled plainly (``lr_mult``, ``wd_mult``,
  ``ctx_group``, ``force_mirroring``, ``mirror_stage``) become ``__lr_mult__`` ...; on an op, ``weight_lr_mult`` moves
  to its ``weight`` input variable as ``__lr_mult__``. Before 0.9.0, the inputs an op lacks (BatchNorm's
  ``moving_mean``/``moving_var``, ...) are added as variables named ``{op name}_{input}`` carrying the op's attributes;
  before 0.9.4, BatchNorm's moving statistics, PReLU's gamma and bilinear UpSampling's weight get MXNet's ``__init__``;
  before 0.9.5, ``argmax``/``argmin`` with ``axis`` ``-1`` lose it (MXNet's default, no axis, was meant).

As MXNet's loader does, the graph keeps only the nodes the heads reach, in MXNet's depth-first order (what
``mx.sym.load(path).tojson()`` lists), and ``arg_nodes`` are its variables. Where MXNet needs its operator registry
(an op's input names), this module knows the ops that have weights or auxiliary states (``INPUT_NAMES``); for
another op, ``x_lr_mult`` moves to the input variable named ``{op name}_x`` (the name MXNet gives it). What MXNet
refuses is refused (``SymbolFileError`` naming the file and the field); unlike MXNet, so are a graph with a cycle, an
input entry with a negative number, and a file of MXNet 2.x (``mxnet_version`` 20000 or more: MXNet 1.9.1 only warns).
Operators are not checked against a registry (there is none without MXNet): an unknown op name is kept as written.

Examples:
    >>> graph = read_symbol("resnet-symbol.json")  # doctest: +SKIP
    >>> graph.nodes[graph.heads[0][0]].op, graph.mxnet_version  # doctest: +SKIP
    ('SoftmaxOutput', 10901)
"""
import json
from dataclasses import dataclass, field

from .errors import SymbolFileError
from .reading import read_regular_file

__all__ = ["SymbolNode", "SymbolGraph", "read_symbol", "symbol_file_problem", "symbol_from_json", "INPUT_NAMES",
           "MXNET_VERSION", "FORCED_TRAINING", "MODE_OPS", "forced_training"]

#: The MXNet version whose loader this module reproduces (1.9.1, as MXNet numbers it).
MXNET_VERSION = 10901
#: A hidden attribute (MXNet's loader keeps it and its ops ignore it) that gluon-lr writes on a BatchNorm or RNN node
#: a recorded Block ran in a training mode its forward forced (``autograd.train_mode()``: GluonCV's GroupNorm made of
#: BatchNorm): the node computes as in training whatever the mode (a Dropout gets MXNet's own ``mode="always"``).
FORCED_TRAINING = "__forced_training__"
#: The ops whose result follows the training mode (``is_train`` of MXNet's forward).
MODE_OPS = frozenset({"BatchNorm", "BatchNorm_v1", "_contrib_SyncBatchNorm", "_contrib_BatchNormWithReLU", "Dropout",
                      "RNN"})
_UNSUPPORTED_FROM = 20000  # MXNet 2.0
_LEGACY_VERSION = 800  # what MXNet assumes for a file that names no version
_HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage")
_GRAPH_FIELDS = {"nodes", "arg_nodes", "heads", "node_row_ptr", "attrs"}
_NODE_FIELDS = {"op", "name", "inputs", "attrs", "attr", "param", "control_deps", "subgraphs", "backward_source_id"}
_MAX_DEPTH = 64  # subgraphs within subgraphs
_BATCH_NORMS = ("BatchNorm", "BatchNorm_v1", "_contrib_SyncBatchNorm", "_contrib_BatchNormWithReLU", "CuDNNBatchNorm")
_NORM_INPUTS = ("data", "gamma", "beta", "moving_mean", "moving_var")


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1")


def forced_training(node: dict) -> bool:
    """Whether a node of a symbol JSON document is marked ``FORCED_TRAINING`` (the translators read the attribute
    alike: ``True`` or 1)."""
    return _true(node.get("attrs", {}).get(FORCED_TRAINING, False))


def _with_bias(no_bias_default: bool):
    return lambda attrs: ("data", "weight") + (() if _true(attrs.get("no_bias", no_bias_default)) else ("bias",))


#: op -> (its attrs -> its input names, in order): MXNet's ``FListInputNames`` for the ops with weights or auxiliary
#: states (the inputs a graph gives its own variables).
INPUT_NAMES = {
    "FullyConnected": _with_bias(False), "Convolution": _with_bias(False), "Convolution_v1": _with_bias(False),
    "Deconvolution": _with_bias(True),
    **{op: (lambda attrs: _NORM_INPUTS) for op in _BATCH_NORMS},
    **{op: (lambda attrs: ("data", "gamma", "beta")) for op in ("InstanceNorm", "LayerNorm", "GroupNorm")},
    "Embedding": lambda attrs: ("data", "weight"), "_contrib_SparseEmbedding": lambda attrs: ("data", "weight"),
    "LeakyReLU": lambda attrs: ("data", "gamma") if attrs.get("act_type") == "prelu" else ("data",),
    "IdentityAttachKLSparseReg": lambda attrs: ("data", "moving_avg"),
    **{op: (lambda attrs: ("data", "label")) for op in ("SoftmaxOutput", "LinearRegressionOutput", "SVMOutput",
                                                        "LogisticRegressionOutput", "MAERegressionOutput")},
}
#: op -> {input index: ``__init__``}: MXNet's ``FSetInputVarAttrOnCompose`` (applied to files before 0.9.4).
_INPUT_INITS = {
    **{op: {3: '["zero", {}]', 4: '["one", {}]'} for op in _BATCH_NORMS},
    "LeakyReLU": {1: '["Constant", {"value": 0.25}]'}, "UpSampling": {1: '["bilinear", {}]'},
    "IdentityAttachKLSparseReg": {1: '["zero", {}]'},
}


@dataclass(frozen=True)
class SymbolNode:
    """One node of a symbol graph.

    Attributes:
        op: The MXNet op (``"FullyConnected"``); ``"null"`` for a variable (a parameter or an input).
        name: The node's name.
        attrs: Its attributes, str -> str, sorted by key (hidden ones as ``__lr_mult__``, ...).
        inputs: ``(node index, output index)`` per input.
        control_deps: Indices of the nodes it must run after.
        subgraphs: The graphs of a control-flow op (``_foreach``, ``_while_loop``, ``_cond``).
    """

    op: str
    name: str
    attrs: dict = field(default_factory=dict)
    inputs: tuple = ()
    control_deps: tuple = ()
    subgraphs: tuple = ()

    @property
    def is_variable(self) -> bool:
        return self.op == "null"


@dataclass(frozen=True)
class SymbolGraph:
    """A symbol: its nodes in MXNet's depth-first order, each node's inputs before it.

    Attributes:
        nodes: The ``SymbolNode`` s.
        arg_nodes: Indices of the variables (parameters, auxiliary states and data inputs), in node order.
        heads: The outputs, ``(node index, output index)`` each.
        mxnet_version: The version that wrote the file (``10901`` for 1.9.1; ``800``, MXNet's assumption, when the
            file names none).
        attrs: The file's graph attributes as read (``{"mxnet_version": ["int", 10901]}``).
    """

    nodes: tuple
    arg_nodes: tuple
    heads: tuple
    mxnet_version: int = MXNET_VERSION
    attrs: dict = field(default_factory=dict)

    def index(self, name: str) -> int:
        """The index of the first node named ``name``; ValueError when none is."""
        for i, node in enumerate(self.nodes):
            if node.name == name:
                return i
        raise ValueError(f"no node is named {name!r}")


def read_symbol(path) -> SymbolGraph:
    """Read a symbol JSON file into a ``SymbolGraph``, upgraded as MXNet 1.9.1 loads it.

    Args:
        path: The file (``NAME-symbol.json``).

    Returns:
        The graph.

    Raises:
        SymbolFileError: the file is missing or not a regular file, not UTF-8 JSON, not an MXNet symbol (names the
            field at fault), damaged (an input naming a node that is not there, a cycle), or written by MXNet 2.x or
            later (names the version found).

    Examples:
        >>> graph = read_symbol("net-symbol.json")  # doctest: +SKIP
        >>> [graph.nodes[i].name for i in graph.arg_nodes][:3]  # doctest: +SKIP
        ['data', 'conv0_weight', 'conv0_bias']
    """
    data = read_regular_file(path, SymbolFileError, "a symbol file written by Symbol.save or HybridBlock.export")
    return symbol_from_json(data, repr(str(path)))


def symbol_file_problem(path) -> str:
    """What ``read_symbol`` finds wrong with the file at ``path`` (its ``SymbolFileError`` message), or ``""`` when it
    reads: the reason to give where MXNet's own loader failed with a message of its own (a truncated file read by
    MXNet fails with a UTF-8 decoding error of MXNet's message, not with "truncated").

    Examples:
        >>> symbol_file_problem("net-symbol.json")  # doctest: +SKIP
        "'net-symbol.json': not JSON (Expecting ',' delimiter at line 18 ...); the file is damaged or truncated: ..."
    """
    try:
        read_symbol(path)
    except SymbolFileError as exc:
        return str(exc)
    return ""


def symbol_from_json(text, source: str = "the symbol JSON") -> SymbolGraph:
    """A ``SymbolGraph`` from the text of a symbol JSON (``Symbol.tojson()``), upgraded as MXNet 1.9.1 loads it.

    Args:
        text: The JSON, as str or UTF-8 bytes.
        source: How messages name where it came from.

    Raises:
        SymbolFileError: as ``read_symbol``.

    Examples:
        >>> symbol_from_json('{"nodes": [{"op": "null", "name": "x", "inputs": []}], "arg_nodes": [0], '
        ...                  '"heads": [[0, 0, 0]]}').nodes[0].name
        'x'
    """
    document = _parse_json(text, source)
    nodes, heads, attrs = _graph_fields(document, source, "", 0)
    version = _version(attrs, source)
    for first_unaffected, upgrade in _UPGRADES:
        if version < first_unaffected:
            upgrade(nodes, _dfs_order(nodes, heads, source, ""))
    return _graph(nodes, heads, source, "", version, attrs)


def _parse_json(text, source: str) -> dict:
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            cut = exc.reason == "unexpected end of data"  # the last character is incomplete
            raise SymbolFileError(f"{source}: byte {exc.start} is not UTF-8"
                                  + (" (the file ends inside a character: it is truncated)" if cut else "")
                                  + "; a symbol file is UTF-8 JSON written by Symbol.save or HybridBlock.export.") \
                from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SymbolFileError(f"{source}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}, character "
                              f"{exc.pos}); the file is damaged or truncated: export the symbol again.") from None
    except RecursionError:
        raise SymbolFileError(f"{source}: the JSON is nested too deeply to be an MXNet symbol.") from None
    if not isinstance(document, dict):
        raise SymbolFileError(f"{source}: the JSON is {_kind(document)}, not an MXNet symbol (an object with nodes, "
                              f"arg_nodes and heads).")
    return document


def _kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _fail(source: str, where: str, what: str) -> SymbolFileError:
    return SymbolFileError(f"{source}: {where or 'the top level'} {what}; the file is damaged or not an MXNet "
                           f"symbol: export it again (Symbol.save, HybridBlock.export).")


def _check_fields(value, allowed: set, required: tuple, source: str, where: str) -> None:
    if not isinstance(value, dict):
        raise _fail(source, where, f"is {_kind(value)}, not an object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise _fail(source, where, f"has the field(s) {unknown}, which MXNet 1.x's symbol JSON never holds")
    missing = [name for name in required if name not in value]
    if missing:
        raise _fail(source, where, f"lacks {missing}")


def _graph_fields(document, source: str, where: str, depth: int) -> tuple:
    """(mutable node records, heads, graph attrs) of one graph, every field checked."""
    _check_fields(document, _GRAPH_FIELDS, ("nodes", "arg_nodes", "heads"), source, where)
    raw_nodes = _list(document["nodes"], source, f"{where}nodes")
    nodes = [_node_record(node, source, f"{where}nodes[{i}]", depth) for i, node in enumerate(raw_nodes)]
    for i, node in enumerate(nodes):
        node["inputs"] = [_entry(e, len(nodes), source, f"{where}nodes[{i}].inputs[{k}]")
                          for k, e in enumerate(node["inputs"])]
        node["control_deps"] = [_index(d, len(nodes), source, f"{where}nodes[{i}].control_deps[{k}]")
                                for k, d in enumerate(node["control_deps"])]
    for k, i in enumerate(_list(document["arg_nodes"], source, f"{where}arg_nodes")):
        if nodes[_index(i, len(nodes), source, f"{where}arg_nodes[{k}]")]["op"] != "null":
            what = f"names node {i}, {nodes[i]['name']!r}, an op, not a variable"
            raise _fail(source, f"{where}arg_nodes[{k}]", what)
    heads = [_entry(e, len(nodes), source, f"{where}heads[{k}]")
             for k, e in enumerate(_list(document["heads"], source, f"{where}heads"))]
    _list(document.get("node_row_ptr", []), source, f"{where}node_row_ptr")
    attrs = document.get("attrs", {})
    if not isinstance(attrs, dict):
        raise _fail(source, f"{where}attrs", f"is {_kind(attrs)}, not an object")
    return nodes, heads, attrs


def _list(value, source: str, where: str) -> list:
    if not isinstance(value, list):
        raise _fail(source, where, f"is {_kind(value)}, not an array")
    return value


def _index(value, count: int, source: str, where: str) -> int:
    if type(value) is not int or not 0 <= value < count:
        raise _fail(source, where, f"is {value!r}, not a node index (0..{count - 1})")
    return value


def _entry(value, count: int, source: str, where: str) -> tuple:
    """A node entry ``[node, output]`` or ``[node, output, version]`` as ``(node, output)``."""
    if not isinstance(value, list) or len(value) not in (2, 3):
        raise _fail(source, where, f"is {value!r:.60}, not [node, output] or [node, output, version]")
    if any(type(v) is not int or not 0 <= v < 2 ** 32 for v in value[1:]):
        raise _fail(source, where, f"is {value!r:.60}: output and version must be unsigned 32-bit integers")
    return _index(value[0], count, source, where), value[1]


def _strings(value, source: str, where: str) -> dict:
    if not isinstance(value, dict):
        raise _fail(source, where, f"is {_kind(value)}, not an object of strings")
    wrong = [key for key, item in value.items() if not isinstance(item, str)]
    if wrong:
        raise _fail(source, where, f"has values that are not strings ({wrong[:3]}: MXNet writes every attribute "
                                   f"as a string)")
    return dict(value)


def _node_record(value, source: str, where: str, depth: int) -> dict:
    """One node, its attribute spellings merged (``attrs``/``attr``: the later wins; ``param`` fills in)."""
    _check_fields(value, _NODE_FIELDS, ("op", "name", "inputs"), source, where)
    for key in ("op", "name"):
        if not isinstance(value[key], str):
            raise _fail(source, f"{where}.{key}", f"is {_kind(value[key])}, not a string")
    attrs = {}
    for key in value:
        if key in ("attrs", "attr"):
            attrs = _strings(value[key], source, f"{where}.{key}")
    for key, item in _strings(value.get("param", {}), source, f"{where}.param").items():
        attrs.setdefault(key, item)
    inputs = _list(value["inputs"], source, f"{where}.inputs")
    if value["op"] == "null" and inputs:
        raise _fail(source, where, f"is the variable {value['name']!r} but has {len(inputs)} input(s)")
    if depth >= _MAX_DEPTH and value.get("subgraphs"):
        raise _fail(source, f"{where}.subgraphs", f"nest more than {_MAX_DEPTH} levels deep")
    subgraphs = tuple(_subgraph(g, source, f"{where}.subgraphs[{k}].", depth + 1)
                      for k, g in enumerate(_list(value.get("subgraphs", []), source, f"{where}.subgraphs")))
    return {"op": value["op"], "name": value["name"], "attrs": attrs, "inputs": inputs,
            "control_deps": _list(value.get("control_deps", []), source, f"{where}.control_deps"),
            "subgraphs": subgraphs}


def _subgraph(document, source: str, where: str, depth: int) -> SymbolGraph:
    """A control-flow op's graph: read as MXNet reads it (spellings merged, no version upgrades)."""
    nodes, heads, attrs = _graph_fields(document, source, where, depth)
    return _graph(nodes, heads, source, where, MXNET_VERSION, attrs)


def _version(attrs: dict, source: str) -> int:
    if "mxnet_version" not in attrs:
        return _LEGACY_VERSION
    found = attrs["mxnet_version"]
    if not (isinstance(found, list) and len(found) == 2 and found[0] == "int" and type(found[1]) is int):
        raise _fail(source, "attrs.mxnet_version", f"is {found!r:.60}, not [\"int\", version]")
    version = found[1]
    if version >= _UNSUPPORTED_FROM:
        raise SymbolFileError(f"{source} was written by MXNet {_dotted(version)} (mxnet_version {version}); this "
                              f"reader reads the symbol files of MXNet 1.x (up to {_dotted(MXNET_VERSION)}): export "
                              f"the model with MXNet 1.x, or convert it with the MXNet that wrote it.")
    return version


def _dotted(version: int) -> str:
    return f"{version // 10000}.{version // 100 % 100}.{version % 100}"


def _dfs_order(nodes: list, heads: list, source: str, where: str) -> list:
    """Indices of the nodes the heads reach, in nnvm's post-order (inputs, then control deps, first seen first)."""
    order, seen, on_stack = [], set(), set()
    for head, _ in heads:
        if head in seen:
            continue
        stack = [(head, 0)]
        seen.add(head)
        on_stack.add(head)
        while stack:
            index, position = stack[-1]
            node = nodes[index]
            edges = [i for i, _ in node["inputs"]] + node["control_deps"]
            if position == len(edges):
                order.append(index)
                on_stack.discard(index)
                stack.pop()
                continue
            stack[-1] = (index, position + 1)
            following = edges[position]
            if following in on_stack:
                what = f"({node['name']!r}) depends on itself through node {following}: a symbol is acyclic"
                raise _fail(source, f"{where}nodes[{index}]", what)
            if following not in seen:
                seen.add(following)
                on_stack.add(following)
                stack.append((following, 0))
    return order


def _graph(nodes: list, heads: list, source: str, where: str, version: int, attrs: dict) -> SymbolGraph:
    """The frozen graph of the nodes the heads reach, renumbered in MXNet's order."""
    order = _dfs_order(nodes, heads, source, where)
    new = {old: i for i, old in enumerate(order)}
    frozen = tuple(SymbolNode(op=nodes[i]["op"], name=nodes[i]["name"], attrs=dict(sorted(nodes[i]["attrs"].items())),
                              inputs=tuple((new[n], k) for n, k in nodes[i]["inputs"]),
                              control_deps=tuple(new[n] for n in nodes[i]["control_deps"]),
                              subgraphs=nodes[i]["subgraphs"]) for i in order)
    return SymbolGraph(nodes=frozen, arg_nodes=tuple(i for i, node in enumerate(frozen) if node.is_variable),
                       heads=tuple((new[n], k) for n, k in heads), mxnet_version=version, attrs=attrs)


def _input_names(node: dict):
    names = INPUT_NAMES.get(node["op"])
    return None if names is None else names(node["attrs"])


def _hidden_key(key: str):
    """The hidden key ``key`` is spelled as (``lr_mult`` for ``lr_mult``, ``weight_lr_mult``, ``lr_mult_x``), or
    None (``__lr_mult__`` is not one): MXNet's test, ``rfind`` at the start or at the end."""
    for hidden in _HIDDEN_KEYS:
        at = key.rfind(hidden)
        if at == 0 or (at != -1 and at == len(key) - len(hidden)):
            return hidden
    return None


def _fix_hidden_keys(nodes: list, order: list) -> None:
    """Before 1.9.1: ``lr_mult`` -> ``__lr_mult__``; an op's ``weight_lr_mult`` onto its ``weight`` variable."""
    for index in order:
        node = nodes[index]
        hidden = [(key, value) for key, value in node["attrs"].items() if _hidden_key(key)]
        for key, _ in hidden:
            del node["attrs"][key]
        for key, value in hidden:
            if not _place_hidden_key(nodes, node, key, value):
                node["attrs"][key] = value


def _place_hidden_key(nodes: list, node: dict, key: str, value: str) -> bool:
    for hidden in _HIDDEN_KEYS:
        at = key.rfind(hidden)
        if at == 0 and len(key) == len(hidden):
            node["attrs"][f"__{hidden}__"] = value
            return True
        if at > 1 and at == len(key) - len(hidden):
            target = None if node["op"] == "null" else _input_variable(nodes, node, key[:at - 1])
            if target is not None:
                target["attrs"][f"__{hidden}__"] = value
            return target is not None
    return False


def _input_variable(nodes: list, node: dict, argument: str):
    """The variable feeding ``node``'s input ``argument`` (by the op's input names; for an op not in INPUT_NAMES, the
    input variable named as MXNet names it, ``{node}_{argument}``), or None."""
    names = _input_names(node)
    if names is None:
        wanted = f"{node['name']}_{argument}" if node["name"] else argument
        found = [nodes[i] for i, _ in node["inputs"] if nodes[i]["name"] == wanted]
        return found[0] if found and found[0]["op"] == "null" else None
    if argument not in names or names.index(argument) >= len(node["inputs"]):
        return None
    source = nodes[node["inputs"][names.index(argument)][0]]
    return source if source["op"] == "null" else None


def _add_missing_inputs(nodes: list, order: list) -> None:
    """Before 0.9.0: the inputs an op lacks (auxiliary states were not saved) become variables ``{op}_{input}``."""
    for index in order:
        node = nodes[index]
        names = _input_names(node)
        for argument in (names or ())[len(node["inputs"]):]:
            name = f"{node['name']}_{argument}" if node["name"] else argument
            nodes.append({"op": "null", "name": name, "attrs": dict(node["attrs"]), "inputs": [],
                          "control_deps": [], "subgraphs": ()})
            node["inputs"].append((len(nodes) - 1, 0))


def _set_input_inits(nodes: list, order: list) -> None:
    """Before 0.9.4: MXNet's ``__init__`` of BatchNorm's moving statistics, PReLU's gamma, UpSampling's weight."""
    for index in order:
        node = nodes[index]
        for position, init in _INPUT_INITS.get(node["op"], {}).items():
            if position < len(node["inputs"]):
                source = nodes[node["inputs"][position][0]]
                if source["op"] == "null":
                    source["attrs"].setdefault("__init__", init)


def _drop_argmax_axis(nodes: list, order: list) -> None:
    """Before 0.9.5: ``argmax``/``argmin`` with ``axis`` ``-1`` meant no axis."""
    for index in order:
        node = nodes[index]
        if node["op"] in ("argmax", "argmin") and node["attrs"].get("axis") == "-1":
            del node["attrs"]["axis"]


#: (first version they do not apply to, upgrade), in MXNet's order.
_UPGRADES = ((MXNET_VERSION, _fix_hidden_keys), (900, _add_missing_inputs), (904, _set_input_inits),
             (905, _drop_argmax_axis))
