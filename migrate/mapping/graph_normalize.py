"""Computations that two exporters write differently, brought to one form before matching.

Fused before the parameter graph is built (``fuse_patterns``): LayerNorm written as ReduceMean/Sub/Pow/Sqrt/Div
arithmetic (MXNet's exporter) becomes one ``LayerNormalization`` node with its ``epsilon``; GELU written as
``0.5 * x * (1 + erf(x / sqrt(2)))`` becomes one ``Gelu`` node; ``relu6(x + 3) / 6`` becomes ``HardSigmoid`` and
``x * relu6(x + 3) / 6`` ``HardSwish`` (GluonCV's MobileNetV3); a BatchNorm scale written ``gamma * 0 + 1`` (MXNet's
``fix_gamma=True``) becomes the ``BatchNormalization`` of ``gamma`` with ``fix_gamma=1``; a PReLU slope reshaped
for broadcasting (torch's export) is read as the stored slope. A packed input projection (GluonNLP's attention
concatenates the query/key/value weights per head into one ``FullyConnected``) is split back into one linear
node per source tensor (``packed_linear_nodes``).

Recurrent layers: an ONNX ``LSTM``/``GRU``/``RNN`` node reads its weights ``W``/``R``/``B`` through plumbing
(torch slices ``weight_ih_l0`` per gate and concatenates the slices; MXNet's export, through
``migrate.onnx_export.mxnet_converters``, splits and concatenates ``l0_i2h_weight``). The plumbing differs; which named
tensor feeds which input does not. ``recurrent_nodes`` walks back from each input through the plumbing and gives
each named tensor its role in torch's words (``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``, with
``_reverse`` for the second direction); both sides store these tensors with the same shape and gate order
(LSTM i,f,g,o; GRU r,z,n), so the mapping needs no transform.
"""
from __future__ import annotations

import math
import struct
from typing import Callable

__all__ = ["PATTERN_STARTS", "RECURRENT", "fuse_patterns", "packed_linear_nodes", "recurrent_nodes", "small_constants"]

RECURRENT = frozenset({"LSTM", "GRU", "RNN"})
_PLUMBING = frozenset({"Slice", "Split", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Transpose", "Identity",
                       "Cast", "Flatten"})
_SLOT_ROLES = {1: ("weight_ih",), 2: ("weight_hh",), 3: ("bias_ih", "bias_hh")}


def recurrent_nodes(nodes, producer, params, indices=None) -> tuple[dict, set]:
    """Return the recurrent nodes' tensors by role and the indices of the plumbing nodes that feed their weights.

    Args:
        nodes: the graph's nodes (``op_type``, ``input``, ``output``), in file order.
        producer: value name -> index of the node that writes it.
        params: the names that are parameters.
        indices: the indices of the nodes that may be recurrent, in order (default: all).

    Returns:
        ``({node index: {role: parameter name}}, plumbing node indices)``. The plumbing is not a parameter node
        of its own (torch's gate ``Slice`` of ``weight_ih_l0`` would otherwise look like one).

    Examples:
        >>> roles, plumbing = recurrent_nodes(nodes, producer, params)  # doctest: +SKIP
        >>> roles[12]
        {'weight_ih': 'weight_ih_l0', 'weight_hh': 'weight_hh_l0', 'bias_ih': 'bias_ih_l0', 'bias_hh': 'bias_hh_l0'}
    """
    roles_by_node, plumbing = {}, set()
    for i in range(len(nodes)) if indices is None else indices:
        node = nodes[i]
        if node.op_type not in RECURRENT:
            continue
        roles = {}
        for slot, names in _SLOT_ROLES.items():
            if slot >= len(node.input) or not node.input[slot]:
                continue
            sources = _sources(node.input[slot], nodes, producer, params, plumbing)
            per_dir = len(names)
            for k, src in enumerate(sources):
                suffix = "" if k < per_dir else "_reverse" if k < 2 * per_dir else f"_{k // per_dir}"
                roles[names[k % per_dir] + suffix] = src
        roles_by_node[i] = roles
    return roles_by_node, plumbing


def small_constants(tensors, nodes) -> dict:
    """Scalar and one-element float constants among initializers and ``Constant`` nodes.

    Args:
        tensors: initializers (``TensorProto``) to read; those that are not one-element floats are skipped.
        nodes: graph nodes (``op_type``, ``output``, ``attribute``); their ``Constant`` outputs are read.

    Returns:
        Value name -> float.

    Examples:
        >>> small_constants([onnx.numpy_helper.from_array(np.array([1e-5], np.float32), "eps")], [])  # doctest: +SKIP
        {'eps': 9.999999747378752e-06}
    """
    out = {}
    for t in tensors:
        if all(d == 1 for d in t.dims) and t.data_type in (1, 10, 11):
            out[t.name] = _scalar(t)
    for n in nodes:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            t = n.attribute[0].t
            if all(d == 1 for d in t.dims) and t.data_type in (1, 10, 11):
                out[n.output[0]] = _scalar(t)
    return out


def _scalar(t) -> float:
    """The value of a one-element float32/float64 tensor (float16 through onnx's converter)."""
    if t.data_type in (1, 11) and t.raw_data:
        return struct.unpack("<f" if t.data_type == 1 else "<d", t.raw_data)[0]
    if t.data_type == 1 and t.float_data:
        return float(t.float_data[0])
    if t.data_type == 11 and t.double_data:
        return float(t.double_data[0])
    import onnx.numpy_helper
    return float(onnx.numpy_helper.to_array(t).reshape(-1)[0])


def fuse_patterns(nodes: list, producer: dict, consumers: dict, params, consts: dict | Callable[[], dict],
                  make_node, indices=None) -> tuple[dict, set]:
    """Find the computations of the module docstring written in another form, each to be replaced by one node.

    Args:
        nodes: the graph's nodes (``op_type``, ``input``, ``output``, ``name``, ``attribute``) in file order.
        producer: value name -> index of the node that writes it.
        consumers: value name -> indices of the nodes that read it.
        params: the names that are parameters.
        consts: ``small_constants`` of the graph, or a function that returns them (called only when a pattern's
            first op is in the graph).
        make_node: ``(op_type, inputs, outputs, name, attrs dict) -> node`` of the caller's node type.
        indices: the indices of the nodes that may start a pattern, in order (default: all).

    Returns:
        ``({index: fused node}, indices of the nodes it replaces)``: the fused node takes the index of the
        pattern's last node (so topological order holds), and the other nodes of the pattern go.

    Examples:
        >>> fused, dropped = fuse_patterns(nodes, producer, consumers, params, consts, make)  # doctest: +SKIP
        >>> [n.op_type for n in fused.values()]
        ['Gelu', 'LayerNormalization']
    """
    starts = [i for i in (range(len(nodes)) if indices is None else indices) if nodes[i].op_type in _PATTERNS]
    if not starts:
        return {}, set()
    consts = consts() if callable(consts) else consts
    ctx = (nodes, producer, consumers, params, consts)
    replace, drop = {}, set()
    for i in starts:
        found = _PATTERNS[nodes[i].op_type](ctx, i)
        if found is None or drop & found[0]:
            continue
        matched, last, op, inputs, attrs = found
        drop |= matched
        replace[last] = make_node(op, inputs, [nodes[last].output[0]], nodes[last].name, attrs)
    return replace, drop - replace.keys()


def _single(ctx, value, op=None):
    """The index of the only consumer of ``value`` (of type ``op`` when given), else None."""
    nodes, _, consumers, _, _ = ctx
    users = consumers.get(value, [])
    if len(users) != 1 or (op is not None and nodes[users[0]].op_type not in op):
        return None
    return users[0]


def _made_by(ctx, value, op):
    nodes, producer, _, _, _ = ctx
    j = producer.get(value)
    return j if j is not None and nodes[j].op_type in op else None


def _other(node, value):
    rest = [v for v in node.input if v != value]
    return rest[0] if len(rest) == 1 else None


def _const(ctx, value, want) -> bool:
    c = ctx[4].get(value)
    return c is not None and math.isclose(c, want, rel_tol=1e-5)


def _layer_norm(ctx, i):
    """Div(x - mean(x), sqrt(mean((x - mean(x))^2) + eps)) * gamma + beta -> LayerNormalization(x, gamma, beta)."""
    nodes, _, _, params, consts = ctx
    d, s = nodes[i].input[:2]
    sub, sqrt = _made_by(ctx, d, ("Sub",)), _made_by(ctx, s, ("Sqrt",))
    if sub is None or sqrt is None:
        return None
    x, m = nodes[sub].input[:2]
    mean = _made_by(ctx, m, ("ReduceMean",))
    add = _made_by(ctx, nodes[sqrt].input[0], ("Add",))
    if mean is None or nodes[mean].input[0] != x or add is None:
        return None
    eps_name = next((v for v in nodes[add].input if v in consts), None)
    var = _made_by(ctx, _other(nodes[add], eps_name) or "", ("ReduceMean",)) if eps_name else None
    sq = _made_by(ctx, nodes[var].input[0], ("Pow", "Mul")) if var is not None else None
    if sq is None or nodes[sq].input[0] != d:
        return None
    scale = _single(ctx, nodes[i].output[0], ("Mul",))
    gamma = _other(nodes[scale], nodes[i].output[0]) if scale is not None else None
    shift = _single(ctx, nodes[scale].output[0], ("Add", "Sub")) if gamma in params else None
    if shift is None:
        return None
    beta, matched = _other(nodes[shift], nodes[scale].output[0]), {i, sub, sqrt, mean, add, var, sq, scale, shift}
    if nodes[shift].op_type == "Sub":
        neg = _made_by(ctx, beta or "", ("Neg",))
        if neg is None or nodes[shift].input[1] != beta:
            return None
        beta = nodes[neg].input[0]
        matched.add(neg)
    if beta not in params:
        return None
    return matched, shift, "LayerNormalization", [x, gamma, beta], {"epsilon": consts[eps_name], "axis": -1}


def _gelu(ctx, i):
    """0.5 * x * (1 + erf(x / sqrt(2))) in either multiplication order -> Gelu(x)."""
    nodes = ctx[0]
    pre = _made_by(ctx, nodes[i].input[0], ("Div", "Mul"))
    if pre is None:
        return None
    x, c = nodes[pre].input[:2]
    if not _const(ctx, c, math.sqrt(2) if nodes[pre].op_type == "Div" else 1 / math.sqrt(2)):
        return None
    one = _single(ctx, nodes[i].output[0], ("Add",))
    if one is None or not _const(ctx, _other(nodes[one], nodes[i].output[0]), 1.0):
        return None
    mul = _single(ctx, nodes[one].output[0], ("Mul",))
    if mul is None:
        return None
    other = _other(nodes[mul], nodes[one].output[0])
    if other == x:
        half = _single(ctx, nodes[mul].output[0], ("Mul",))
        if half is None or not _const(ctx, _other(nodes[half], nodes[mul].output[0]), 0.5):
            return None
        return {pre, i, one, mul, half}, half, "Gelu", [x], {}
    half = _made_by(ctx, other or "", ("Mul",))
    if half is None or x not in nodes[half].input or not _const(ctx, _other(nodes[half], x), 0.5):
        return None
    return {pre, i, one, mul, half}, mul, "Gelu", [x], {}


def _hard(ctx, i):
    """relu6(x + 3) / 6 -> HardSigmoid(x) (alpha 1/6, beta 0.5); x * that -> HardSwish(x)."""
    nodes = ctx[0]
    clip = nodes[i]
    if len(clip.input) != 3 or not (_const(ctx, clip.input[1], 0.0) and _const(ctx, clip.input[2], 6.0)):
        return None
    add = _made_by(ctx, clip.input[0], ("Add",))
    x = next((v for v in nodes[add].input if not _const(ctx, v, 3.0)), None) if add is not None else None
    if x is None or not _const(ctx, _other(nodes[add], x) or "", 3.0):
        return None
    scale = _single(ctx, clip.output[0], ("Div", "Mul"))
    if scale is None or not _const(ctx, nodes[scale].input[1], 6.0 if nodes[scale].op_type == "Div" else 1 / 6):
        return None
    times = _single(ctx, nodes[scale].output[0], ("Mul",))
    if times is not None and _other(nodes[times], nodes[scale].output[0]) == x:
        return {add, i, scale, times}, times, "HardSwish", [x], {}
    return {add, i, scale}, scale, "HardSigmoid", [x], {"alpha": 1 / 6, "beta": 0.5}


def _fix_gamma(ctx, i):
    """BatchNormalization(x, gamma * 0 + 1, ...) -> BatchNormalization(x, gamma, ...) with ``fix_gamma=1``: the
    scale MXNet's ``fix_gamma=True`` holds at 1 (``migrate.onnx_export.mxnet_converters`` writes it so, and so does the
    forward of a generated torch module)."""
    nodes, _, _, params, _ = ctx
    bn = nodes[i]
    add = _made_by(ctx, bn.input[1], ("Add",)) if len(bn.input) > 1 else None
    if add is None or _single(ctx, nodes[add].output[0]) != i:
        return None
    one = next((v for v in nodes[add].input if _const(ctx, v, 1.0)), None)
    mul = _made_by(ctx, _other(nodes[add], one) or "", ("Mul",)) if one is not None else None
    if mul is None or _single(ctx, nodes[mul].output[0]) != add:
        return None
    zero = next((v for v in nodes[mul].input if _const(ctx, v, 0.0)), None)
    gamma = _other(nodes[mul], zero) if zero is not None else None
    if gamma not in params:
        return None
    attrs = dict(_attributes(bn), fix_gamma=1)
    return {mul, add, i}, i, "BatchNormalization", [bn.input[0], gamma, *bn.input[2:]], attrs


def _prelu_slope(ctx, i):
    """PRelu(x, Unsqueeze(slope)) -> PRelu(x, slope): torch's ``nn.PReLU(C)`` and ``F.prelu`` export the slope
    reshaped to (C, 1, 1); MXNet's ``LeakyReLU(act_type='prelu')`` feeds its (C,) ``gamma`` as it is."""
    nodes, _, _, params, _ = ctx
    prelu = nodes[i]
    view = _made_by(ctx, prelu.input[1], ("Unsqueeze", "Reshape")) if len(prelu.input) > 1 else None
    if view is None or nodes[view].input[0] not in params or _single(ctx, nodes[view].output[0]) != i:
        return None
    return {view, i}, i, "PRelu", [prelu.input[0], nodes[view].input[0]], {}


def _attributes(node) -> dict:
    """A node's ONNX attributes as plain values."""
    import onnx.helper
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


_PATTERNS = {"Div": _layer_norm, "Erf": _gelu, "Clip": _hard, "BatchNormalization": _fix_gamma,
             "PRelu": _prelu_slope}
PATTERN_STARTS = frozenset(_PATTERNS)  # the op types a pattern of ``fuse_patterns`` starts at


def packed_linear_nodes(nodes, producer, params, views, indices=None) -> tuple[dict, set]:
    """Linear nodes whose weight is several parameters packed together, split into one entry per parameter.

    Args:
        nodes: the graph's nodes in file order.
        producer: value name -> index of the node that writes it.
        params: parameter name -> stored shape.
        views: values that are a parameter seen through Transpose/Identity/Cast.
        indices: the indices of the nodes that may be such a Gemm, in order (default: all).

    Returns:
        ``({plumbing node index: (gemm index, {'weight': name, 'bias': name})}, plumbing node indices)``; each
        entry sits on the node that first reads its weight, so canonical order visits them in packing order.

    Examples:
        >>> parts, plumbing = packed_linear_nodes(nodes, producer, params, views)  # doctest: +SKIP
        >>> [roles["weight"] for _, roles in parts.values()]
        ['cell0_query_weight', 'cell0_key_weight', 'cell0_value_weight']
    """
    parts, plumbing = {}, set()
    for i in range(len(nodes)) if indices is None else indices:
        node = nodes[i]
        if node.op_type != "Gemm" or len(node.input) < 2 or node.input[1] in params or node.input[1] in views:
            continue
        seen: set = set()
        weights = _sources(node.input[1], nodes, producer, params, seen)
        if len(weights) < 2 or any(len(params[w]) != 2 for w in weights):
            continue
        biases = _sources(node.input[2], nodes, producer, params, seen) if len(node.input) > 2 else []
        if biases and len(biases) != len(weights):
            continue
        plumbing |= seen
        for k, w in enumerate(weights):
            reader = min(j for j in seen if w in nodes[j].input)
            parts[reader] = (i, {"weight": w, **({"bias": biases[k]} if biases else {})})
    return parts, plumbing


def _sources(value: str, nodes, producer, params, plumbing: set) -> list:
    """Parameters behind ``value`` through plumbing ops, first reached first (data inputs of each op in order)."""
    found, stack, seen = [], [value], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in params:
            found.append(v)
            continue
        j = producer.get(v)
        if j is None or nodes[j].op_type not in _PLUMBING:
            continue
        plumbing.add(j)
        data = nodes[j].input if nodes[j].op_type == "Concat" else nodes[j].input[:1]
        stack.extend(reversed([d for d in data if d]))
    return found
