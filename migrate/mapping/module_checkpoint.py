"""Module checkpoints (``prefix-symbol.json`` + ``prefix-0000.params``): loss heads and label inputs cut away.

A symbol saved by ``mx.mod.Module.save_checkpoint`` ends in a loss head (``SoftmaxOutput``, ``*RegressionOutput``,
``MakeLoss``, ...) fed by label inputs (``softmax_label``) that are not data. ``cut_loss_heads`` returns the symbol
whose outputs are what feeds the loss (the prediction), so the graph matches the torch model's ``forward``; each cut is
described in a note that the mapping carries into the report. ``export.load_mxnet`` calls it for every symbol file,
``file_source.read_mxnet_files`` on the graph read without MXNet.
"""
from __future__ import annotations

import json
import os

from mxformats.symbol import MXNET_VERSION, SymbolGraph, symbol_from_json

from migrate.errors import InputFileError
from migrate.mapping.symbol_graph import aux_state_names, graph_document

__all__ = ["LOSS_HEADS", "check_files_exist", "cut_loss_heads", "check_params_present", "named_params"]

#: Loss-head operators -> position of their label input (None: no label input).
LOSS_HEADS = {"SoftmaxOutput": 1, "Softmax": 1, "LinearRegressionOutput": 1, "LogisticRegressionOutput": 1,
              "MAERegressionOutput": 1, "SVMOutput": 1, "MakeLoss": None, "make_loss": None}
_PARAM_SUFFIXES = ("_weight", "_bias", "_gamma", "_beta", "_moving_mean", "_moving_var", "_running_mean",
                   "_running_var")


def _label_nodes(nodes: list, params: dict) -> set:
    """Indices of the label variables: a loss head's label input, or a non-parameter input named ``*label``."""
    labels = set()
    for node in nodes:
        position = LOSS_HEADS.get(node["op"])
        if position is not None and len(node["inputs"]) > position:
            labels.add(node["inputs"][position][0])
    return labels | {i for i, n in enumerate(nodes)
                     if n["op"] == "null" and n["name"] not in params and n["name"].endswith("label")}


def _loss_nodes(nodes: list, labels: set) -> set:
    """Indices of the nodes that are loss: loss heads and whatever depends on a label (nodes are in topological
    order)."""
    loss = set(labels)
    for i, node in enumerate(nodes):
        if node["op"] in LOSS_HEADS or any(entry[0] in loss for entry in node["inputs"]):
            loss.add(i)
    return loss


def _output_name(internals: list, node: dict, index: int) -> str:
    """The name ``get_internals()`` gives output ``index`` of ``node``."""
    for name in (f"{node['name']}_output", f"{node['name']}_output{index}"):
        if name in internals:
            return name
    return internals[-1] if node["op"] == "null" else f"{node['name']}_output{index}"


def cut_loss_heads(symbol, params: dict) -> tuple:
    """Return ``(symbol, notes)``: ``symbol`` without its loss heads and label inputs, and one line per cut.

    Args:
        symbol: An ``mx.sym.Symbol`` as loaded from a symbol file, or a ``mxformats.symbol.SymbolGraph`` (read
            without MXNet: the cut graph is a ``SymbolGraph`` too, its nodes in the order MXNet's cut symbol lists).
        params: Its parameter names -> arrays (arguments and auxiliary states).

    Returns:
        The symbol unchanged and ``[]`` when it has no loss head; else the symbol whose outputs are the non-loss
        nodes that fed the loss, and notes naming the cut heads, the label inputs and the new outputs.

    Raises:
        InputFileError: every output is loss and no prediction feeds it.

    Examples:
        >>> sym, notes = cut_loss_heads(mx.sym.load("mlp-symbol.json"), params)  # doctest: +SKIP
        >>> notes
        ["Module checkpoint: loss head SoftmaxOutput 'softmax' cut ..."]
    """
    plain = isinstance(symbol, SymbolGraph)
    graph = graph_document(symbol) if plain else json.loads(symbol.tojson())
    nodes, heads = graph["nodes"], graph["heads"]
    if not any(node["op"] in LOSS_HEADS for node in nodes):  # an input named "label" alone is data
        return symbol, []
    loss = _loss_nodes(nodes, _label_nodes(nodes, params))
    frontier = []
    for i, node in enumerate(nodes):
        if i in loss:
            frontier += [tuple(e[:2]) for e in node["inputs"] if e[0] not in loss and nodes[e[0]]["op"] != "null"]
    frontier += [tuple(h[:2]) for h in heads if h[0] not in loss]
    frontier = list(dict.fromkeys(frontier))
    if not frontier:
        raise InputFileError(f"MXNet symbol: every output is loss ({[nodes[h[0]]['name'] for h in heads]}) and no "
                             f"prediction feeds it; export the network without its loss (sym.get_internals()).")
    cut = _graph_with_heads(graph, frontier) if plain else _symbol_with_heads(symbol, nodes, frontier)
    heads_cut = [f"{nodes[i]['op']} {nodes[i]['name']!r}" for i in sorted(loss) if nodes[i]["op"] in LOSS_HEADS]
    labels = [nodes[i]["name"] for i in sorted(loss) if nodes[i]["op"] == "null"]
    notes = [f"Module checkpoint: loss head {', '.join(heads_cut)} and label input {labels} cut from the graph; "
             f"matched up to {[nodes[i]['name'] for i, _ in frontier]}"]
    return cut, notes


def _symbol_with_heads(symbol, nodes: list, frontier: list):
    """The MXNet symbol whose outputs are the entries ``frontier`` of ``nodes`` (``symbol``'s own)."""
    import mxnet as mx
    internals = symbol.get_internals()
    names = internals.list_outputs()
    outputs = [internals[_output_name(names, nodes[i], k)] for i, k in frontier]
    return mx.sym.Group(outputs) if len(outputs) > 1 else outputs[0]


def _graph_with_heads(document: dict, frontier: list) -> SymbolGraph:
    """The ``SymbolGraph`` of ``document`` with outputs ``frontier``: the nodes they reach, in MXNet's order."""
    cut = dict(document, heads=[[i, k, 0] for i, k in frontier], attrs={"mxnet_version": ["int", MXNET_VERSION]})
    return symbol_from_json(json.dumps(cut), "the Module checkpoint's symbol without its loss heads")


def check_params_present(symbol, params: dict, params_path: str) -> None:
    """Raise InputFileError if the params file lacks an auxiliary state or a parameter-named argument of the symbol.

    Args:
        symbol: The symbol (loss heads cut or not): an ``mx.sym.Symbol`` or a ``SymbolGraph``.
        params: The parameter arrays read from ``params_path``.
        params_path: The params file, for the message.

    Raises:
        InputFileError: names the missing arrays and the fix.
    """
    if isinstance(symbol, SymbolGraph):
        aux = aux_state_names(symbol)
        arguments = [n for n in dict.fromkeys(symbol.nodes[i].name for i in symbol.arg_nodes) if n not in aux]
    else:
        aux, arguments = symbol.list_auxiliary_states(), symbol.list_arguments()
    missing = [n for n in aux if n not in params]
    missing += [n for n in arguments if n not in params and n.endswith(_PARAM_SUFFIXES)]
    if missing:
        raise InputFileError(f"MXNet params file {params_path!r} lacks {len(missing)} array(s) the symbol uses: "
                             f"{missing[:8]}; pass the params file saved with this symbol (Module.save_checkpoint "
                             f"writes PREFIX-symbol.json and PREFIX-EPOCH.params together)")


def check_files_exist(sym_path: str, params_path: str) -> None:
    """InputFileError naming the first of the two files that does not exist.

    Examples:
        >>> check_files_exist("net-symbol.json", "net-0000.params")  # doctest: +SKIP
    """
    for path, what in ((sym_path, "symbol JSON"), (params_path, "params")):
        if not os.path.isfile(path):
            raise InputFileError(f"MXNet {what} file {path!r}: not found; give the path of an existing file "
                                 f"(Gluon's HybridBlock.export writes NAME-symbol.json and NAME-0000.params)")


def named_params(raw, params_path: str) -> dict:
    """The arrays of a params file by parameter name: a Module checkpoint's ``arg:``/``aux:`` prefixes dropped; an
    empty list (a graph without parameters saves no names) is an empty dict.

    Raises:
        InputFileError: the file holds a list of unnamed arrays.

    Examples:
        >>> sorted(named_params({"arg:fc_weight": 1, "aux:bn_moving_var": 2}, "net-0000.params"))
        ['bn_moving_var', 'fc_weight']
    """
    raw = {} if isinstance(raw, list) and not raw else raw
    if not isinstance(raw, dict):
        raise InputFileError(f"MXNet params file {params_path!r}: expected a dict of named arrays, received a "
                             f"list of {len(raw)} unnamed arrays; save with mx.nd.save(path, dict)")
    return {k.split(":", 1)[1] if k.startswith(("arg:", "aux:")) else k: v for k, v in raw.items()}
