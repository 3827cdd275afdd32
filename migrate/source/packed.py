"""Parameters packed into one ``FullyConnected`` (GluonNLP's self-attention concatenates the query, key and value
weights and biases per head): which slice of that node's output each parameter makes.

Matching splits such a node into one linear node per parameter (``mapping.graph_normalize.packed_linear_nodes``); a
torch model holds the parts as separate layers (transformers' ``query``, ``key``, ``value``). Verification compares
each part's layer with its slice of MXNet's packed output, here found from the graph:

- from the op that first reads a parameter, through the packing ops (``Reshape``, ``Concat``, ``stack``, ...), to the
  ``FullyConnected`` input it feeds (the weight or the bias);
- which rows of that input come from which rows of the parameter: the packing is run on coded values (every element of
  every parameter behind it its own number), and each packed row is read back as (parameter, row).

Examples:
    >>> slices = packed_slices(source.document, source.params, evaluate)  # doctest: +SKIP
    >>> slices["bertencoder0_transformer0_dotproductselfattentioncell0_reshape0"]  # doctest: +SKIP
    PackedSlice(node=32, name='bertencoder0_transformer0_dotproductselfattentioncell0_fullyconnected0', indices=[0, ...])
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

__all__ = ["PACKING_OPS", "PackedSlice", "packed_slices", "packing_consumers"]

PACKING_OPS = frozenset({"Reshape", "reshape", "_rnn_param_concat", "Concat", "concat", "stack", "expand_dims",
                         "transpose", "SliceChannel", "split"})
"""The ops that only repack parameters (gluon.rnn's blob, GluonNLP's q/k/v) before the op that computes with them."""
_LINEAR = {"FullyConnected": (1, 2)}  # op -> input positions of its weight and bias


class PackedSlice(NamedTuple):
    """Where a packed parameter's node output is: ``output[..., indices]`` of the node ``name`` (at ``node`` in the
    graph's node list), the ``FullyConnected`` computing with it and its packed siblings."""

    node: int
    name: str
    indices: list


def packing_consumers(document: dict) -> dict:
    """MXNet op name -> op type, for the ops of the symbol JSON ``document`` that only repack parameters
    (gluon.rnn's blob, GluonNLP's q/k/v)."""
    return {n["name"]: n["op"] for n in document["nodes"] if n["op"] in PACKING_OPS}


def packed_slices(document: dict, params: dict, evaluate: Callable) -> dict:
    """Packing op name -> ``PackedSlice`` for each packing op that first reads one parameter on its way into a
    ``FullyConnected``'s weight or bias: the parameter's part of that node's output is ``output[..., indices]`` (in the
    parameter's row order).

    Args:
        document: the graph's symbol JSON document.
        params: parameter name -> array (its shape is read).
        evaluate: ``evaluate(node index, output index, values) -> numpy array``: that output of the graph with the
            parameters set to ``values`` (name -> numpy array; the packing reads parameters only).

    Returns:
        A dict; a packing op left out (its packing not a row permutation, or reaching no ``FullyConnected``) is
        compared at the final output only.
    """
    nodes = document["nodes"]
    readers: dict = {}
    for i, node in enumerate(nodes):
        for position, entry in enumerate(node["inputs"] if node["op"] != "null" else []):
            readers.setdefault(entry[0], []).append((i, position, tuple(entry[:2])))
    out, rows_of = {}, {}
    for name, (op, target) in _packed_parameters(nodes, readers, params).items():
        if target not in rows_of:
            rows_of[target] = _packed_rows(nodes, target[2], params, evaluate)
        indices = rows_of[target].get(name)
        if indices is not None:
            out.setdefault(op, PackedSlice(target[0], nodes[target[0]]["name"], indices))
    return out


def _packed_parameters(nodes: list, readers: dict, params: dict) -> dict:
    """Parameter name -> (the packing op that first reads it, ``(FullyConnected index, input position, entry)``) for
    each parameter that reaches one ``FullyConnected``'s weight or bias through packing ops only."""
    found = {}
    for index, node in enumerate(nodes):
        if node["op"] != "null" or node["name"] not in params:
            continue
        first = min((i for i, _, _ in readers.get(index, [])), default=None)
        if first is None or nodes[first]["op"] not in PACKING_OPS:
            continue
        targets, todo, seen = set(), [first], set()
        while todo:
            i = todo.pop()
            for j, position, entry in readers.get(i, []) if i not in seen else []:
                if nodes[j]["op"] in PACKING_OPS:
                    todo.append(j)
                elif position in _LINEAR.get(nodes[j]["op"], ()):
                    targets.add((j, position, entry))
            seen.add(i)
        if len(targets) == 1:
            found[node["name"]] = (nodes[first]["name"], targets.pop())
    return found


def _packed_rows(nodes: list, entry: tuple, params: dict, evaluate: Callable) -> dict:
    """Parameter name -> the rows of the packed tensor at ``entry`` (node index, output index) holding its rows, in
    order, for each parameter behind it whose rows the packing moves whole; ``{}`` when the packing cannot be run."""
    behind = _parameters_behind(nodes, entry[0], params)
    offsets, values, start = {}, {}, 0
    for name in behind:
        shape = tuple(params[name].shape)
        offsets[name] = start
        values[name] = np.arange(start, start + int(np.prod(shape)), dtype=np.float64).reshape(shape)
        start += values[name].size
    try:
        packed = np.asarray(evaluate(entry[0], entry[1], values))
    except Exception:  # the packing reads something other than parameters
        return {}
    rows = packed.reshape(packed.shape[0], -1) if packed.ndim else packed.reshape(1, 1)
    placed: dict = {}
    for j, row in enumerate(rows):
        name = next((n for n in behind if offsets[n] <= row[0] < offsets[n] + values[n].size), None)
        width = values[name][0].size if name is not None and values[name].ndim else 1
        k = int(row[0] - offsets[name]) // width if name is not None else -1
        if name is None or width != row.size or not np.array_equal(row, values[name].reshape(-1, width)[k]):
            return {}
        placed.setdefault(name, {})[k] = j
    out = {}
    for name, by_row in placed.items():
        count = values[name].size // (values[name][0].size if values[name].ndim else 1)
        if sorted(by_row) == list(range(count)):
            out[name] = [by_row[k] for k in range(count)]
    return out


def _parameters_behind(nodes: list, index: int, params: dict) -> list:
    """The parameters the node at ``index`` is made of through packing ops, in node order."""
    found, todo, seen = set(), [index], set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        if nodes[i]["op"] == "null":
            if nodes[i]["name"] in params:
                found.add(i)
        elif nodes[i]["op"] in PACKING_OPS:
            todo.extend(entry[0] for entry in nodes[i]["inputs"])
    return [nodes[i]["name"] for i in sorted(found)]
