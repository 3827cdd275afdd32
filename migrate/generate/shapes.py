"""Each MXNet graph node's output shapes without MXNet: its torch translation run on the given input shapes.

``generate_torch`` needs the shapes MXNet's ``infer_shape`` gives (translators read them). Where the graph was read
without MXNet, ``translated_shapes`` walks the nodes in graph order and evaluates each node's expression, written
by the same translator generation uses (one translation table serves both), on zeros of the input shapes and the
model's own parameter values, in eval mode without gradients. A ``_zeros`` state whose batch axis MXNet leaves to
inference (Gluon's RNN begin states) takes the shape its ``RNN`` (or ``_contrib_quantized_rnn``) consumer gives it, as
MXNet's inference does.

Examples:
    >>> shapes = translated_shapes(nodes, ["data"], [(1, 3, 8, 8)], [np.float32], params)  # doctest: +SKIP
    >>> shapes[-1]  # the last node's outputs  # doctest: +SKIP
    [(1, 10)]
"""
from __future__ import annotations

import re

import numpy as np

from migrate.errors import InputShapeError, UnsupportedOpError
from migrate.generate.registry import OpNode, translator

__all__ = ["LOSS_HEADS", "translated_shapes", "translated_values"]

LOSS_HEADS = {"SoftmaxOutput", "Softmax", "LinearRegressionOutput", "MAERegressionOutput", "LogisticRegressionOutput"}
_INFERRED_BY_CONSUMER = {"_zeros", "zeros", "_ones", "ones", "_full", "full"}
_MXNET_HINT = ("with MXNet 1.9.1 installed (Python <= 3.11, numpy < 1.24), generate_torch reads the shapes from "
               "MXNet's own shape inference instead")


class _Pending:
    """A node whose output shape only its consumer tells (a ``_zeros`` with an axis left to inference)."""

    def __init__(self, index: int):
        self.index = index


class _Module:
    """What ``self`` is in a translated expression while shapes are computed: a module in eval mode, on the CPU."""

    training = False

    @staticmethod
    def _device():
        import torch
        return torch.device("cpu")


def translated_shapes(nodes: list, inputs: list, shapes: list, dtypes: list, params: dict) -> list:
    """Each node's output shapes (a list per node, in node order), as MXNet's shape inference gives them.

    Args:
        nodes: the graph's nodes as a symbol JSON lists them (``op``, ``name``, ``attrs``, ``inputs``).
        inputs: the data input names, in order.
        shapes: one shape per data input.
        dtypes: one numpy dtype per data input.
        params: parameter and auxiliary-state name -> numpy array.

    Returns:
        ``[[shape, ...], ...]``: per node the shape of each output (None for a 0-d or unknown one, as MXNet's
        partial inference reads them).

    Raises:
        InputShapeError: a node's translation fails on these shapes (names the node, the op and the error, and says
            that MXNet's inference is the alternative).
        UnsupportedOpError: a node has no translation (names the op and the node).

    Examples:
        >>> translated_shapes(nodes, ["data"], [(2, 4)], [np.float32], params)[-1]  # doctest: +SKIP
        [(2, 10)]
    """
    import torch
    given = {name: torch.zeros(shape, dtype=_torch_dtype(dtype)) for name, shape, dtype in zip(inputs, shapes, dtypes)}
    return _run(nodes, given, params, range(len(nodes)), shapes)[1]


def translated_values(nodes: list, inputs: dict, params: dict, wanted: list) -> dict:
    """The values of the nodes at indices ``wanted``: each node they read, and they, evaluated by its translation in
    graph order, in eval mode without gradients (what MXNet would compute, where MXNet is not here).

    Args:
        nodes: the graph's nodes as a symbol JSON lists them.
        inputs: data input name -> numpy array (integers run as int64).
        params: parameter and auxiliary-state name -> numpy array.
        wanted: node indices.

    Returns:
        Node index -> its value (a torch tensor; a tuple for several outputs).

    Raises:
        As ``translated_shapes``.

    Examples:
        >>> translated_values(nodes, {"data": x}, params, [5])[5].shape  # doctest: +SKIP
        torch.Size([2, 10])
    """
    import torch
    keep, todo = set(), list(wanted)
    while todo:
        i = todo.pop()
        if i not in keep:
            keep.add(i)
            todo.extend(entry[0] for entry in nodes[i]["inputs"])
    given = {name: torch.from_numpy(np.asarray(x)).to(_torch_dtype(np.asarray(x).dtype)) for name, x in inputs.items()}
    values, _ = _run(nodes, given, params, sorted(keep), [tuple(np.shape(x)) for x in inputs.values()])
    return {i: values[i] for i in wanted}


def _run(nodes: list, given: dict, params: dict, indices, shapes) -> tuple[dict, list]:
    """(value, output shapes) of the nodes at ``indices`` (graph order; every node they read among them): a variable
    is its parameter or its ``given`` tensor, an op its translation evaluated."""
    import torch
    values, out = {}, [[] for _ in nodes]
    with torch.no_grad():
        for i in indices:
            node = nodes[i]
            if node["op"] == "null":
                value = params.get(node["name"])
                values[i] = given.get(node["name"]) if value is None else torch.from_numpy(np.asarray(value))
            else:
                values[i] = _evaluate(i, nodes, values, out, shapes)
            out[i] = _output_shapes(values[i])
    return values, out


def _evaluate(index: int, nodes: list, values: dict, out: list, shapes: list):
    """The value of op node ``index``: its translation evaluated on its inputs' values."""
    node = nodes[index]
    entries = node["inputs"][:1] if node["op"] in LOSS_HEADS else node["inputs"]
    names = [f"_input{k}" for k in range(len(entries))]
    op_node = OpNode(node["op"], node["name"], node.get("attrs", {}), names, [_shape(out, e) for e in entries], None,
                     in_ops=[(nodes[e[0]]["op"], nodes[e[0]].get("attrs", {})) for e in entries],
                     subgraphs=node.get("subgraphs", []))
    try:
        expression = translator(node["op"], node["name"])(op_node)
    except UnsupportedOpError:
        if node["op"] in _INFERRED_BY_CONSUMER:
            return _Pending(index)
        raise
    local = {name: _entry_value(values, entry) for name, entry in zip(names, entries)}
    code = "\n".join(op_node.statements + [expression])
    for name, value in local.items():
        if isinstance(value, _Pending) and re.search(rf"\b{name}\b", code):
            raise _pending_error(nodes[value.index], node)
    try:
        namespace = {**op_node.namespace(), "self": _Module()}
        exec("\n".join(op_node.statements), namespace, local)  # a loop's lines (_foreach), as the generator writes
        value = eval(expression, namespace, local)  # the generator's expression
    except Exception as exc:
        raise InputShapeError(f"MXNet node {node['name']!r} (op {node['op']}) rejects the input shapes {shapes}: "
                              f"its translation fails on inputs of shapes {op_node.in_shapes} ({type(exc).__name__}:"
                              f" {str(exc).splitlines()[0][:200] if str(exc) else ''}); give the shapes the model "
                              f"accepts; {_MXNET_HINT}") from None
    if node["op"] in ("RNN", "_contrib_quantized_rnn"):
        _fill_rnn_states(op_node, entries, values, out)
    return value


def _pending_error(pending: dict, consumer: dict) -> UnsupportedOpError:
    return UnsupportedOpError(f"MXNet node {pending['name']!r} (op {pending['op']}) has shape "
                              f"{pending.get('attrs', {}).get('shape')}, whose unknown (0) axes only MXNet's shape "
                              f"inference fills in (from its consumer {consumer['name']!r}, op {consumer['op']}), and "
                              f"MXNet is not here: {_MXNET_HINT}; or save the symbol with the full shape")


def _entry_value(values: dict, entry):
    value = values[entry[0]]
    return value[entry[1]] if isinstance(value, tuple) else value


def _shape(out: list, entry):
    shapes = out[entry[0]]
    return shapes[entry[1]] if entry[1] < len(shapes) else None


def _output_shapes(value) -> list:
    """The shapes of a node's outputs: a tuple is several outputs, a list one (``_rnn_param_concat``'s pieces,
    concatenated by MXNet into one flat vector)."""
    import torch
    if isinstance(value, tuple):
        return [_mx_shape(v.shape) if isinstance(v, torch.Tensor) else None for v in value]
    if isinstance(value, list):
        return [(sum(int(v.numel()) for v in value),)]
    return [_mx_shape(value.shape)] if isinstance(value, torch.Tensor) else []


def _mx_shape(shape):
    """A torch shape as MXNet's partial inference gives it: a 0-d shape reads as unknown (None)."""
    return tuple(int(d) for d in shape) or None


def _fill_rnn_states(node: OpNode, entries: list, values: dict, out: list) -> None:
    """The shape of a pending ``_zeros`` begin state of an RNN (or MXNet's int8 LSTM, ``_contrib_quantized_rnn``):
    (layers x directions, batch, state size)."""
    dirs = 2 if node.attr("bidirectional", False) else 1
    x_shape = node.in_shapes[0]
    for k in (2, 3):
        if k < len(entries) and isinstance(values[entries[k][0]], _Pending) and x_shape is not None:
            out[entries[k][0]] = [(node.attr("num_layers", 1) * dirs, x_shape[1], node.attr("state_size"))]


def _torch_dtype(dtype):
    import torch
    if np.issubdtype(dtype, np.integer):
        return torch.long
    return torch.from_numpy(np.zeros(0, dtype)).dtype
