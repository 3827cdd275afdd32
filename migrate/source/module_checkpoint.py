"""Module checkpoints (``prefix-symbol.json`` + ``prefix-0000.params``): loss heads and label inputs cut away.

A symbol saved by ``mx.mod.Module.save_checkpoint`` ends in a loss head (``SoftmaxOutput``, ``*RegressionOutput``,
``MakeLoss``, ...) fed by label inputs (``softmax_label``) that are not data. ``cut_loss_heads`` returns the symbol
whose outputs are what feeds the loss (the prediction), so the graph matches the torch model's ``forward``; each cut is
described in a note that the mapping carries into the report. ``loss_cut`` finds the cut on the graph's symbol JSON
document; each kind that reads files builds its graph with those outputs (``CheckpointSource`` an ``mx.sym.Symbol``,
``FileSource`` a ``SymbolGraph``).
"""
from __future__ import annotations

import os

from migrate.errors import InputFileError

__all__ = ["LOSS_HEADS", "check_files_exist", "check_params_present", "loss_cut", "named_params"]

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


def loss_cut(document: dict, params: dict) -> tuple[list, list] | None:
    """Where a graph's loss heads are cut: ``(outputs, notes)``, or None when it has no loss head.

    Args:
        document: The graph's symbol JSON document (``MxSource.document``).
        params: Its parameter names -> arrays (arguments and auxiliary states).

    Returns:
        The entries ``(node index, output index)`` that fed the loss and are not loss themselves (the new outputs),
        and one note naming the cut heads, the label inputs and the new outputs.

    Raises:
        InputFileError: every output is loss and no prediction feeds it.

    Examples:
        >>> outputs, notes = loss_cut(source.document, source.params)  # doctest: +SKIP
        >>> notes
        ["Module checkpoint: loss head SoftmaxOutput 'softmax' cut ..."]
    """
    nodes, heads = document["nodes"], document["heads"]
    if not any(node["op"] in LOSS_HEADS for node in nodes):  # an input named "label" alone is data
        return None
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
    heads_cut = [f"{nodes[i]['op']} {nodes[i]['name']!r}" for i in sorted(loss) if nodes[i]["op"] in LOSS_HEADS]
    labels = [nodes[i]["name"] for i in sorted(loss) if nodes[i]["op"] == "null"]
    notes = [f"Module checkpoint: loss head {', '.join(heads_cut)} and label input {labels} cut from the graph; "
             f"matched up to {[nodes[i]['name'] for i, _ in frontier]}"]
    return frontier, notes


def check_params_present(aux_names: list, argument_names: list, params: dict, params_path: str) -> None:
    """Raise InputFileError if the params file lacks an auxiliary state or a parameter-named argument of the graph.

    Args:
        aux_names: The graph's auxiliary states (loss heads cut or not).
        argument_names: Its arguments (data inputs and parameters).
        params: The parameter arrays read from ``params_path``.
        params_path: The params file, for the message.

    Raises:
        InputFileError: names the missing arrays and the fix.
    """
    missing = [n for n in aux_names if n not in params]
    missing += [n for n in argument_names if n not in params and n.endswith(_PARAM_SUFFIXES)]
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
