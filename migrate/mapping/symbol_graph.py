"""The plain symbol graph (``mxformats.symbol.SymbolGraph``, read without MXNet) in the forms migrate reads an
``mx.sym.Symbol`` in: its symbol JSON document (``Symbol.tojson()``), its auxiliary states
(``Symbol.list_auxiliary_states()``), and the node that first reads each parameter.

Examples:
    >>> graph = read_symbol("bnnet-symbol.json")  # doctest: +SKIP
    >>> graph_document(graph)["nodes"][0]["name"], aux_state_names(graph)  # doctest: +SKIP
    ('data', ['bn1_moving_mean', 'bn1_moving_var'])
"""
from __future__ import annotations

import json

from mxformats.symbol import INPUT_NAMES, SymbolGraph

__all__ = ["aux_state_names", "graph_document", "parameter_users", "symbol_document"]

_AUX_INPUTS = ("moving_mean", "moving_var", "moving_avg")  # the op inputs MXNet keeps as auxiliary states


def graph_document(graph: SymbolGraph) -> dict:
    """The symbol JSON document of ``graph`` (as ``Symbol.tojson()`` writes it), subgraphs included.

    Examples:
        >>> graph_document(read_symbol("net-symbol.json"))["nodes"][0]["op"]  # doctest: +SKIP
        'null'
    """
    nodes = [{"op": n.op, "name": n.name, "attrs": dict(n.attrs), "inputs": [[i, k, 0] for i, k in n.inputs],
              **({"control_deps": list(n.control_deps)} if n.control_deps else {}),
              **({"subgraphs": [graph_document(g) for g in n.subgraphs]} if n.subgraphs else {})}
             for n in graph.nodes]
    return {"nodes": nodes, "arg_nodes": list(graph.arg_nodes), "heads": [[i, k, 0] for i, k in graph.heads],
            "attrs": {"mxnet_version": ["int", graph.mxnet_version]}}


def aux_state_names(graph: SymbolGraph) -> list:
    """The auxiliary states of ``graph`` (what ``Symbol.list_auxiliary_states()`` lists), without MXNet: the
    variables at an op's auxiliary inputs (BatchNorm's ``moving_mean``/``moving_var``, ...), in node order.

    Examples:
        >>> aux_state_names(read_symbol("bn-symbol.json"))  # doctest: +SKIP
        ['bn1_moving_mean', 'bn1_moving_var']
    """
    aux = set()
    for node in graph.nodes:
        names = INPUT_NAMES[node.op](node.attrs) if node.op in INPUT_NAMES else ()
        aux |= {node.inputs[k][0] for k, name in enumerate(names) if name in _AUX_INPUTS and k < len(node.inputs)}
    return list(dict.fromkeys(graph.nodes[i].name for i in sorted(aux) if graph.nodes[i].is_variable))


def symbol_document(symbol) -> dict:
    """The symbol JSON document of ``symbol``: a ``SymbolGraph`` (``graph_document``) or an ``mx.sym.Symbol``.

    Examples:
        >>> symbol_document(source.symbol)["heads"]  # doctest: +SKIP
        [[12, 0, 0]]
    """
    return graph_document(symbol) if isinstance(symbol, SymbolGraph) else json.loads(symbol.tojson())


def parameter_users(document: dict, params) -> dict:
    """Parameter name -> ``(node, input position)`` of the first op node reading it, in node order.

    Args:
        document: a symbol JSON document (``symbol_document``).
        params: the names that are parameters or auxiliary states.

    Examples:
        >>> parameter_users(symbol_document(source.symbol), source.params)["fc_weight"][0]["name"]  # doctest: +SKIP
        'fc'
    """
    nodes, users = document["nodes"], {}
    for node in nodes:
        for position, entry in enumerate(node["inputs"] if node["op"] != "null" else []):
            name = nodes[entry[0]]["name"]
            if nodes[entry[0]]["op"] == "null" and name in params:
                users.setdefault(name, (node, position))
    return users
