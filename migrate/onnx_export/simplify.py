"""Exported graphs made static: shape arithmetic folded into constants, no-op and repeated nodes removed.

Both exporters compute shapes inside the graph. torch's builds each ``view`` target from ``Shape``, ``Gather``,
``Unsqueeze`` and ``Concat`` nodes; MXNet's builds each ``FullyConnected(flatten=False)`` output shape from
``Shape``/``Slice``/``Concat`` nodes. The input shapes are fixed at export, so these values are constants.
``simplify_graph`` computes them once with onnx's reference evaluator and stores each one as an initializer; the
nodes that computed them go, and so does any node that only fed them. Then:

- ``Identity`` nodes and ``Dropout`` nodes that drop nothing (ratio 0, or not training) go: MXNet writes an
  ``Identity`` for each dropout layer, torch's training-mode export a ``Dropout`` for each;
- equal small constants become one initializer (MXNet's converters write the same shape vectors and scalars once
  per layer);
- a node that repeats an earlier one (same op, inputs and attributes) goes, its readers read the earlier one's
  outputs (GluonNLP's attention reshapes its projection once for the scores and once for the values);
- a chain of ``Reshape``/``Flatten``/``Squeeze``/``Unsqueeze`` nodes, each read only by the next, becomes one
  ``Reshape`` to the chain's static output shape.

A parameter is never read and never removed: a ``Shape`` of a parameter folds, any other reader of a parameter
stays a reader of that parameter, so every parameter keeps its name. A graph with subgraphs (``If``, ``Loop``) is
left as it is. The outputs stay the same (``tests/migrate/onnx_export/test_simplify.py`` runs both forms with onnx's reference
evaluator); GluonNLP BERT-base and HF BERT go from 10.2 to 4.9 nodes per parameter tensor, resnet50 stays at 1.2
(``bench/bench_mapping.py``).
"""
from __future__ import annotations

import collections

__all__ = ["simplify_graph"]

# a folded value holds at most this many elements (shape vectors and scalars are far below it)
MAX_ELEMENTS = 4096
_SHAPE_READERS = frozenset({"Shape", "Size"})
# output no larger than the first input
_UNARY = frozenset({"Identity", "Cast", "Neg", "Abs", "Sqrt", "Floor", "Ceil", "Not", "Reciprocal", "Exp", "Log",
                    "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Slice", "ReduceProd", "ReduceSum",
                    "ReduceMax", "ReduceMin", "ReduceMean", "Sign", "Relu"})
# output no larger than the product of the inputs (broadcasting; Gather's data times its indices)
_PRODUCT = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Equal", "Less", "Greater",
                      "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Gather"})
_SUM = frozenset({"Concat"})
_RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
# two of these with the same inputs may still differ
_RANDOM = frozenset({"Dropout", "Multinomial", "Bernoulli", "RandomNormal", "RandomUniform", "RandomNormalLike",
                     "RandomUniformLike"})


def simplify_graph(model, params) -> None:
    """Make ``model``'s graph static and small, in place: fold constants, remove no-op and repeated nodes, collapse
    reshape chains (see the module docstring).

    Args:
        model: an ``onnx.ModelProto`` from ``migrate.onnx_export`` (changed in place).
        params: the names that are parameters: never treated as constants, never removed.

    Examples:
        >>> model = export_torch(bert, [(1, 32)] * 2, [np.int64] * 2)  # doctest: +SKIP
        >>> simplify_graph(model, bert.state_dict())  # doctest: +SKIP
        >>> sum(n.op_type == "Shape" for n in model.graph.node)
        0
    """
    graph, params = model.graph, set(params)
    if _has_subgraphs(graph):
        return
    shapes = _static_shapes(model, params)
    _fold_constants(model, params, shapes)
    _remove_no_ops(graph)
    _share_constants(graph, params)
    _merge_repeats(graph)
    if _collapse_reshapes(graph, shapes):
        _share_constants(graph, params)
    _drop_unread_constants(graph, params)


def _has_subgraphs(graph) -> bool:
    import onnx
    kinds = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    return any(a.type in kinds for node in graph.node for a in node.attribute)


def _fold_constants(model, params: set, shapes: dict) -> None:
    """Replace every value computed from constants and known ``shapes`` alone by an initializer."""
    import numpy as np
    import onnx.numpy_helper
    from onnx.reference import ReferenceEvaluator
    graph = model.graph
    folded = _foldable(graph, params, shapes)
    outputs = {o.name for o in graph.output}
    consumed = {v for i, n in enumerate(graph.node) if i not in folded for v in n.input} | outputs
    boundary = [v for i in sorted(folded) for v in graph.node[i].output if v in consumed]
    if not boundary or outputs.intersection(boundary):
        return
    try:
        values = ReferenceEvaluator(_subgraph(model, folded, boundary, shapes)).run(None, {})
    except Exception:  # an op the reference evaluator lacks: matching reads the unfolded graph as well
        return
    for name, value in zip(boundary, values):  # equal values become one in _share_constants
        graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(value), name))
    _keep_live(graph, [n for i, n in enumerate(graph.node) if i not in folded])


def _rename_inputs(nodes, rename: dict) -> None:
    for node in nodes:
        for k, v in enumerate(node.input):
            if v in rename:
                node.input[k] = rename[v]


def _merge_repeats(graph) -> None:
    """Remove each node that repeats an earlier one (same op, inputs and attributes; not a random op, no graph
    output); its readers read the earlier node's outputs."""
    outputs = {o.name for o in graph.output}
    first, rename, kept = {}, {}, []
    for node in graph.node:
        _rename_inputs([node], rename)
        if node.op_type in _RANDOM or node.op_type.startswith("Random") or not outputs.isdisjoint(node.output):
            kept.append(node)
            continue
        key = (node.domain, node.op_type, tuple(node.input), tuple(a.SerializeToString() for a in node.attribute),
               len(node.output))
        if key in first:
            rename.update(zip(node.output, first[key].output))
        else:
            first[key] = node
            kept.append(node)
    if rename:
        del graph.node[:]
        graph.node.extend(kept)


def _collapse_reshapes(graph, shapes: dict) -> bool:
    """Turn each chain of reshape-like nodes, each read only by the next, into one ``Reshape`` to the last one's
    static shape (when known); return whether any chain was collapsed."""
    import numpy as np
    import onnx.numpy_helper
    readers = collections.Counter(v for node in graph.node for v in node.input)
    readers.update(o.name for o in graph.output)
    names = {t.name for t in graph.initializer} | set(readers) | {v for node in graph.node for v in node.output}
    made, dropped, targets = {}, set(), {}
    for i, node in enumerate(graph.node):
        if node.op_type not in _RESHAPES:
            continue
        source, out = made.get(node.input[0]), node.output[0]
        shape = shapes.get(out)
        if source is not None and readers[node.input[0]] == 1 and shape is not None and 0 not in shape:
            j, inner = source
            if shape not in targets:
                targets[shape] = _unused_name(f"{out}_shape", names)
                graph.initializer.append(onnx.numpy_helper.from_array(np.array(shape, np.int64), targets[shape]))
            data = inner.input[0]
            node.op_type = "Reshape"
            del node.attribute[:]
            del node.input[:]
            node.input.extend([data, targets[shape]])
            dropped.add(j)
        made[out] = (i, node)
    if dropped:
        kept = [n for i, n in enumerate(graph.node) if i not in dropped]
        del graph.node[:]
        graph.node.extend(kept)
    return bool(dropped)


def _unused_name(name: str, names: set) -> str:
    """``name``, or ``name_1``, ``name_2``, ...: the first not in ``names`` (added to it)."""
    candidate, k = name, 0
    while candidate in names:
        k += 1
        candidate = f"{name}_{k}"
    names.add(candidate)
    return candidate


def _drop_unread_constants(graph, params: set) -> None:
    """Remove the initializers that no node reads and that are no parameter, graph input or output."""
    keep = {v for node in graph.node for v in node.input} | params | {i.name for i in graph.input} | {
        o.name for o in graph.output}
    _remove_initializers(graph, lambda t: t.name not in keep)


def _remove_initializers(graph, gone) -> None:
    """Delete the initializers for which ``gone(tensor)`` is true, one by one: the others are not copied (a model
    exported with its weights may hold gigabytes)."""
    for k in [k for k, t in enumerate(graph.initializer) if gone(t)][::-1]:
        del graph.initializer[k]


def _static_shapes(model, params) -> dict:
    """Value name -> shape for every value whose shape onnx's shape inference (with data propagation) fixes.

    Inference runs on a copy without the parameters' bytes (they become typed graph inputs), so a model of any
    size stays under protobuf's 2 GB and nothing is read from a structure-only initializer.
    """
    import onnx
    import onnx.helper
    import onnx.shape_inference
    graph = model.graph
    copy = onnx.GraphProto(name=graph.name, node=graph.node, input=graph.input, output=graph.output)
    shapes, inputs = {}, {i.name for i in graph.input}
    for t in graph.initializer:
        shapes[t.name] = tuple(t.dims)
        if _is_constant(t, params):
            copy.initializer.append(t)
        elif t.name not in inputs:
            copy.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    light = onnx.helper.make_model(copy, opset_imports=model.opset_import, ir_version=model.ir_version)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, data_prop=True).graph
    except Exception:  # a graph onnx cannot infer: only the initializers' shapes are known
        return shapes
    for info in (*inferred.value_info, *inferred.input, *inferred.output):
        tensor_type = info.type.tensor_type
        if tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in tensor_type.shape.dim):
            shapes[info.name] = tuple(d.dim_value for d in tensor_type.shape.dim)
    return shapes


def _is_constant(tensor, params) -> bool:
    """A small initializer with its bytes that is no parameter."""
    import onnx
    return (tensor.name not in params and tensor.data_location != onnx.TensorProto.EXTERNAL
            and _numel(tensor.dims) <= MAX_ELEMENTS)


def _foldable(graph, params, shapes) -> set:
    """Indices of the nodes whose outputs follow from constants and known shapes, each output at most
    ``MAX_ELEMENTS`` long (an upper bound from the op when inference left its shape open)."""
    size = {t.name: _numel(t.dims) for t in graph.initializer if _is_constant(t, params)}
    folded = set()
    for i, node in enumerate(graph.node):
        op, ins = node.op_type, [v for v in node.input if v]
        if op in _SHAPE_READERS and ins and ins[0] in shapes:
            bound = len(shapes[ins[0]]) if op == "Shape" else 1
        elif op == "Constant" or (ins and all(v in size for v in ins)):  # a Constant's size: from inference
            bound = _bound(op, [size[v] for v in ins])
        else:
            continue
        known = [_numel(shapes[v]) for v in node.output if v in shapes]
        bound = max(known) if known and len(known) == len(node.output) else bound
        if bound is not None and bound <= MAX_ELEMENTS and not op.startswith("Random"):
            folded.add(i)
            size.update((v, bound) for v in node.output)
    return folded


def _bound(op: str, sizes: list):
    """An upper bound on the elements of ``op``'s output from its inputs' sizes, None when the op can make more."""
    if op in _UNARY:
        return sizes[0]
    if op in _SUM:
        return sum(sizes)
    if op in _PRODUCT:
        return _numel(sizes)
    return None


def _subgraph(model, folded: set, boundary: list, shapes: dict):
    """A model of the folded nodes alone (``Shape``/``Size`` as constants) whose outputs are ``boundary``."""
    import numpy as np
    import onnx
    import onnx.helper
    import onnx.numpy_helper
    graph = model.graph
    known = {t.name: t for t in graph.initializer}
    nodes, used = [], set()
    for i in sorted(folded):
        node = graph.node[i]
        if node.op_type in _SHAPE_READERS:
            value = np.array(_shape_read(node, shapes[node.input[0]]), np.int64)
            node = onnx.helper.make_node("Constant", [], [node.output[0]], value=onnx.numpy_helper.from_array(value))
        else:
            used.update(v for v in node.input if v in known)
        nodes.append(node)
    outputs = [onnx.helper.make_tensor_value_info(v, onnx.TensorProto.UNDEFINED, None) for v in boundary]
    sub = onnx.helper.make_graph(nodes, "fold", [], outputs, [known[v] for v in sorted(used)])
    return onnx.helper.make_model(sub, opset_imports=model.opset_import, ir_version=model.ir_version)


def _shape_read(node, shape: tuple):
    """What a ``Shape`` node (with its ``start``/``end`` attributes) or a ``Size`` node gives on ``shape``."""
    if node.op_type == "Size":
        return _numel(shape)
    import onnx.helper
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return list(shape)[attrs.get("start", 0):attrs.get("end", len(shape))]


def _keep_live(graph, nodes: list) -> None:
    """Set the graph's nodes to those of ``nodes`` that feed an output, and drop the value infos of the others
    (the constants they read go in ``_drop_unread_constants``)."""
    needed = {o.name for o in graph.output}
    live = []
    for node in reversed(nodes):
        if any(v in needed for v in node.output):
            live.append(node)
            needed.update(node.input)
    live.reverse()
    del graph.node[:]
    graph.node.extend(live)
    infos = [info for info in graph.value_info if info.name in needed]
    del graph.value_info[:]
    graph.value_info.extend(infos)


def _remove_no_ops(graph) -> None:
    """Remove ``Identity`` nodes and ``Dropout`` nodes that drop nothing, where only their first output is read
    and it is no graph output; their readers read the node's input instead."""
    outputs = {o.name for o in graph.output}
    read = {v for node in graph.node for v in node.input}
    constants = {t.name: t for t in graph.initializer}
    rename, kept = {}, []
    for node in graph.node:
        _rename_inputs([node], rename)
        no_op = node.op_type == "Identity" or (node.op_type == "Dropout" and _drops_nothing(node, constants))
        if no_op and node.output[0] not in outputs and not read.intersection(node.output[1:]):
            rename[node.output[0]] = node.input[0]
        else:
            kept.append(node)
    if rename:
        del graph.node[:]
        graph.node.extend(kept)


def _share_constants(graph, params: set) -> None:
    """Keep one initializer of each set of equal small constants (no parameters, no graph inputs or outputs); their
    readers read the one kept."""
    import onnx.numpy_helper
    inputs = {i.name for i in graph.input} | {o.name for o in graph.output}
    first, rename = {}, {}
    for t in graph.initializer:
        if _is_constant(t, params) and t.name not in inputs:
            try:
                value = onnx.numpy_helper.to_array(t)
            except Exception:  # a type numpy cannot hold: stays as it is
                continue
            key = (t.data_type, value.shape, value.tobytes())
            if key in first:
                rename[t.name] = first[key]
            else:
                first[key] = t.name
    if rename:
        _rename_inputs(graph.node, rename)
        _remove_initializers(graph, lambda t: t.name in rename)


def _drops_nothing(node, constants) -> bool:
    """A ``Dropout`` whose ``training_mode`` is absent or a constant False, or whose ``ratio`` is a constant 0."""
    import onnx.numpy_helper

    def value(slot):
        name = node.input[slot] if len(node.input) > slot else ""
        return None if name not in constants else onnx.numpy_helper.to_array(constants[name]).reshape(-1)

    ratio, training = value(1), value(2)
    not_training = len(node.input) < 3 or not node.input[2] or (training is not None and not training.any())
    return not_training or (ratio is not None and not ratio.any())


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n
