"""ONNX converters for what MXNet 1.9.1's exporter lacks or gets wrong, installed only while ``export_mxnet`` runs.

- ``RNN`` (``gluon.rnn.LSTM``/``GRU``/``RNN``): MXNet's converter refuses ``bidirectional=True`` (but for a 1-layer
  LSTM), and its 2-layer LSTM slices the fused parameter blob at offsets that assume ``input_size == hidden_size``.
  This one emits one ONNX ``LSTM``/``GRU``/``RNN`` node per layer whose ``W``/``R``/``B`` inputs are built from the
  named parameters themselves (``l0_i2h_weight``, ``r0_h2h_bias``, ...), not from slices of the blob, so the
  parameter names survive and ``migrate.mapping.graph_normalize`` can read which tensor feeds which role.
- ``Reshape`` with the output shape known at export (``mxnet_converters(static_shapes)``): one ``Reshape`` to a
  constant target.
  MXNet's converter computes the target in the graph from ``Shape`` of the input for every ``0`` code and for
  ``reverse=True`` (18 nodes per Reshape: a GluonNLP BERT-base graph spends 1,525 of its 2,933 nodes on it), and
  refuses the ``-2``/``-3``/``-4`` codes outside a few listed cases. The input shapes are fixed at export, so the
  target is a constant: the graph computes the same and matching reads 1,400 nodes less.
- GluonNLP's interleaved attention (``_contrib_interleaved_matmul_selfatt_qk``/``_valatt``) with the projection's
  shape known at export: 7 nodes each, where MXNet's converters compute every shape in the graph (29 and 19 nodes,
  of which 12 and 9 carry data).
- ``LayerNorm`` over the last axis: one ONNX ``LayerNormalization`` (opset 17), as torch exports it, where MXNet's
  converter writes 10 nodes of arithmetic (``migrate.mapping.graph_normalize`` still fuses that form when a torch
  model writes it by hand).
- ``BatchNorm`` with ``fix_gamma=True`` (the op's default): MXNet's converter feeds ``gamma`` to the ONNX node as it
  is, while MXNet reads it as 1 (and gives it zero gradient). This one writes ``gamma * 0 + 1`` (``Mul``, ``Add``) in
  the scale slot, the form a generated torch module exports; ``migrate.mapping.graph_normalize`` reads it back as a
  ``BatchNormalization`` with ``fix_gamma=1``, so matching knows the scale is held at 1.
- The opset: MXNet's converters are written for opsets 12 and 13 (``LayerNorm`` emits ``ReduceMean`` with an
  ``axes`` attribute, an input from opset 18 on); ``EXPORT_OPSET`` (17) keeps every one of them valid.
"""
from __future__ import annotations

import contextlib
import re

__all__ = ["EXPORT_OPSET", "mxnet_converters"]

EXPORT_OPSET = 17
_PARAM = re.compile(r"([lr])(\d+)_(i2h|h2h)_(weight|bias)$")


def _without_shape_only(graph):
    """``graph``, or a copy without its shape-only initializers (no bytes: the checker would look for the file);
    MXNet's exporter lists every parameter among the graph inputs too, so the copy is still a valid graph."""
    import onnx
    if not any(t.data_location == onnx.TensorProto.EXTERNAL for t in graph.initializer):
        return graph
    copy = onnx.GraphProto()
    copy.CopyFrom(graph)
    kept = [t for t in copy.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    del copy.initializer[:]
    copy.initializer.extend(kept)
    return copy


# ONNX gate order from MXNet's (== torch's) gate order: LSTM i,f,g,o -> i,o,f,c; GRU r,z,n -> z,r,h
_GATES = {"lstm": (0, 3, 1, 2), "gru": (1, 0, 2), "rnn_tanh": (0,), "rnn_relu": (0,)}


@contextlib.contextmanager
def mxnet_converters(static_shapes=None):
    """Install this module's converters in MXNet's ONNX registry (opset 13), have ``mx.onnx.export_model`` target
    ``EXPORT_OPSET`` (it takes ``onnx.defs.onnx_opset_version()`` and has no argument for it), restore both after.

    ``static_shapes``: ``{MXNet node name: output shape}`` of the symbol being exported (from
    ``mxnet_export``); with it, a Reshape whose node is listed gets a constant target."""
    import onnx.checker
    import onnx.defs
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
    table = MXNetGraph.registry_.setdefault(13, {})
    converters = dict(_CONVERTERS)
    converters["LayerNorm"] = _fused_layer_norm(_registered("LayerNorm", 13))
    converters["BatchNorm"] = _held_gamma_batch_norm(_registered("BatchNorm", 13))
    if static_shapes:
        converters["Reshape"] = _static_reshape(static_shapes, _registered("Reshape", 13))
        converters.update(_static_attention(static_shapes, {op: _registered(op, 13) for op in _ATTENTION}))
    saved = {op: table.get(op) for op in converters}
    table.update(converters)
    newest, check_graph = onnx.defs.onnx_opset_version, onnx.checker.check_graph
    opset = min(EXPORT_OPSET, newest())
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version, ctx.opset_imports = onnx.checker.DEFAULT_CONTEXT.ir_version, {"": opset}
    onnx.defs.onnx_opset_version = lambda: opset
    onnx.checker.check_graph = lambda graph, _ctx=None: check_graph(_without_shape_only(graph), ctx)
    try:
        yield opset
    finally:
        onnx.defs.onnx_opset_version, onnx.checker.check_graph = newest, check_graph
        for op, func in saved.items():
            if func is None:
                table.pop(op, None)
            else:
                table[op] = func


def _registered(op: str, opset: int):
    """The converter MXNet's exporter would pick for ``op`` at ``opset`` (the newest registered at or below it)."""
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
    for version in range(opset, 11, -1):
        func = MXNetGraph.registry_.get(version, {}).get(op)
        if func is not None:
            return func
    return None


def _static_reshape(shapes: dict, original):
    """A Reshape converter: a constant target from ``shapes`` where the node is listed, else ``original``."""
    def convert_reshape(node, **kwargs):
        shape = shapes.get(node["name"])
        if shape is None:
            return original(node, **kwargs)
        from onnx.helper import make_node
        name = node["name"]
        target = _int64(kwargs, f"{name}_static_shape", list(shape))
        return [make_node("Reshape", [_inputs(node, kwargs)[0].name, target], [name], name=name)]
    return convert_reshape


def _inputs(node, kwargs) -> list:
    """The ONNX values (``name``, ``dtype``) MXNet's exporter made of ``node``'s inputs, in slot order."""
    lookup = kwargs["outputs_lookup"]
    return [lookup[source][index] for source, index, *_ in node["inputs"]]


def _int64(kwargs, name: str, values) -> str:
    """Add an int64 initializer (a scalar when ``values`` is an int) and return its name."""
    import numpy as np
    import onnx.numpy_helper
    kwargs["initializer"].append(onnx.numpy_helper.from_array(np.array(values, np.int64), name))
    return name


def _heads_first(kwargs, name: str, qkv: str, shape: tuple, heads: int) -> tuple[list, str, int]:
    """Nodes that bring an interleaved ``(L, B, heads * 3 * D)`` projection to ``(3, B * heads, L, D)``."""
    from onnx.helper import make_node
    length, batch, width = shape
    depth = width // (3 * heads)
    target = _int64(kwargs, f"{name}_qkv_shape", [length, batch * heads, 3, depth])
    return [make_node("Reshape", [qkv, target], [f"{name}_qkv"]),
            make_node("Transpose", [f"{name}_qkv"], [f"{name}_qkv_t"], perm=[2, 1, 0, 3])], f"{name}_qkv_t", depth


def _static_attention(shapes: dict, originals: dict) -> dict:
    """GluonNLP's interleaved attention converters (``_contrib_interleaved_matmul_selfatt_qk``/``_valatt``) with
    the projection's shape known: 7 nodes each, where MXNet's compute every shape in the graph (29 and 19 nodes,
    12 and 9 once ``simplify_graph`` has folded the shapes). Where the shape is unknown, ``originals`` convert."""
    import numpy as np
    import onnx.numpy_helper
    from onnx.helper import make_node

    def convert_qk(node, **kwargs):
        qkv, heads = _inputs(node, kwargs)[0], int(node["attrs"]["heads"])
        qkv, dtype = qkv.name, qkv.dtype
        shape = shapes.get(qkv)
        if shape is None or len(shape) != 3:
            return originals["_contrib_interleaved_matmul_selfatt_qk"](node, **kwargs)
        name = node["name"]
        nodes, qkv_t, depth = _heads_first(kwargs, name, qkv, shape, heads)
        scale = np.array(np.float32(1) / np.sqrt(np.float32(depth)), dtype=np.dtype(dtype))
        kwargs["initializer"].append(onnx.numpy_helper.from_array(scale, f"{name}_scale"))
        return nodes + [
            make_node("Gather", [qkv_t, _int64(kwargs, f"{name}_q", 0)], [f"{name}_query"], axis=0),
            make_node("Gather", [qkv_t, _int64(kwargs, f"{name}_k", 1)], [f"{name}_key"], axis=0),
            make_node("Mul", [f"{name}_query", f"{name}_scale"], [f"{name}_query_scaled"]),
            make_node("Transpose", [f"{name}_key"], [f"{name}_key_t"], perm=[0, 2, 1]),
            make_node("MatMul", [f"{name}_query_scaled", f"{name}_key_t"], [name], name=name)]

    def convert_valatt(node, **kwargs):
        (qkv, att), heads = (v.name for v in _inputs(node, kwargs)[:2]), int(node["attrs"]["heads"])
        shape = shapes.get(qkv)
        if shape is None or len(shape) != 3:
            return originals["_contrib_interleaved_matmul_selfatt_valatt"](node, **kwargs)
        name = node["name"]
        nodes, qkv_t, depth = _heads_first(kwargs, name, qkv, shape, heads)
        length, batch, _ = shape
        return nodes + [
            make_node("Gather", [qkv_t, _int64(kwargs, f"{name}_v", 2)], [f"{name}_value"], axis=0),
            make_node("MatMul", [att, f"{name}_value"], [f"{name}_heads"]),
            make_node("Reshape", [f"{name}_heads", _int64(kwargs, f"{name}_split", [batch, heads, length, depth])],
                      [f"{name}_split_heads"]),
            make_node("Transpose", [f"{name}_split_heads"], [f"{name}_seq_first"], perm=[2, 0, 1, 3]),
            make_node("Reshape", [f"{name}_seq_first", _int64(kwargs, f"{name}_merge", [length, batch, -1])],
                      [name], name=name)]

    return {"_contrib_interleaved_matmul_selfatt_qk": convert_qk,
            "_contrib_interleaved_matmul_selfatt_valatt": convert_valatt}


def _rnn_params(node, mx_graph) -> dict:
    """(direction 'l'/'r', layer, 'i2h'/'h2h', 'weight'/'bias') -> MXNet parameter name (``_rnn_param_concat``'s)."""
    concat = mx_graph[node["inputs"][1][0]]
    if concat["op"] != "_rnn_param_concat":
        raise NotImplementedError(f"RNN {node['name']!r}: its parameters come from a {concat['op']!r} node, "
                                  f"not gluon.rnn's _rnn_param_concat; export of a hand-built RNN op is unsupported")
    out = {}
    for src, *_ in concat["inputs"]:
        var = mx_graph[src]
        while var["op"] != "null" and var["inputs"]:  # gluon reshapes each parameter to 1-D first
            var = mx_graph[var["inputs"][0][0]]
        found = _PARAM.search(var["name"])
        if var["op"] != "null" or not found:
            raise NotImplementedError(f"RNN {node['name']!r}: parameter {var['name']!r} is not named like gluon.rnn's "
                                      f"'l0_i2h_weight'; export of a hand-built RNN op is unsupported")
        d, layer, g, t = found.groups()
        out[(d, int(layer), g, t)] = var["name"]
    return out


def _gate_reorder(make_node, src: str, out: str, order: tuple) -> list:
    if len(order) == 1:
        return [make_node("Identity", [src], [out])]
    parts = [f"{out}_g{k}" for k in range(len(order))]
    return [make_node("Split", [src], parts, axis=0),  # equal parts at opset 13-17
            make_node("Concat", [parts[k] for k in order], [out], axis=0)]


def _stacked(make_node, names: list, out: str, order: tuple, axes: str) -> list:
    """Gate-reordered tensors, one per direction, unsqueezed on axis 0 and concatenated: ONNX's (D, ...) layout."""
    nodes, per_dir = [], []
    for k, group in enumerate(names):
        pieces = []
        for m, name in enumerate(group):
            nodes += _gate_reorder(make_node, name, f"{out}_d{k}_{m}", order)
            pieces.append(f"{out}_d{k}_{m}")
        if len(pieces) > 1:
            nodes.append(make_node("Concat", pieces, [f"{out}_d{k}"], axis=0))
        else:
            nodes.append(make_node("Identity", pieces, [f"{out}_d{k}"]))
        nodes.append(make_node("Unsqueeze", [f"{out}_d{k}", axes], [f"{out}_d{k}_u"]))
        per_dir.append(f"{out}_d{k}_u")
    nodes.append(make_node("Concat", per_dir, [out], axis=0))
    return nodes


def convert_rnn(node, **kwargs):
    """MXNet ``RNN`` (as gluon.rnn builds it) -> one ONNX recurrent node per layer, weights by parameter name."""
    from onnx.helper import make_node
    attrs = node.get("attrs", {})
    name, mode = node["name"], attrs.get("mode", "lstm")
    layers, hidden = int(attrs.get("num_layers", "1")), int(attrs["state_size"])
    dirs = 2 if attrs.get("bidirectional", "False") == "True" else 1
    for key, bad in (("use_sequence_length", "True"), ("projection_size", None)):
        if attrs.get(key, "None" if bad is None else "False") not in ("False", "None"):
            raise NotImplementedError(f"RNN {name!r}: {key}={attrs[key]} has no ONNX translation here")
    ins = [v.name for v in _inputs(node, kwargs)]
    params = _rnn_params(node, kwargs["mx_graph"])
    consts = {f"{name}_axes0": [0], f"{name}_shape": [0, 0, -1]}
    for layer in range(layers):
        consts[f"{name}_s{layer}"], consts[f"{name}_e{layer}"] = [layer * dirs], [(layer + 1) * dirs]
    for cname, value in consts.items():
        _int64(kwargs, cname, value)
    op = {"lstm": "LSTM", "gru": "GRU"}.get(mode, "RNN")
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    if mode in ("rnn_relu", "rnn_tanh"):
        extra["activations"] = ["Relu" if mode == "rnn_relu" else "Tanh"] * dirs
    order, ds = _GATES[mode], "lr"[:dirs]
    nodes, x, hs, cs = [], ins[0], [], []
    for layer in range(layers):
        p = f"{name}_L{layer}"
        w = [[params[(d, layer, "i2h", "weight")]] for d in ds]
        r = [[params[(d, layer, "h2h", "weight")]] for d in ds]
        b = [[params[(d, layer, "i2h", "bias")], params[(d, layer, "h2h", "bias")]] for d in ds]
        for tag, names in (("W", w), ("R", r), ("B", b)):
            nodes += _stacked(make_node, names, f"{p}_{tag}", order, f"{name}_axes0")
        states = [f"{p}_h0"] + ([f"{p}_c0"] if op == "LSTM" else [])
        for state, src in zip(states, ins[2:]):
            nodes.append(make_node("Slice", [src, f"{name}_s{layer}", f"{name}_e{layer}", f"{name}_axes0"], [state]))
        outs = [f"{p}_Y", f"{p}_h"] + ([f"{p}_c"] if op == "LSTM" else [])
        nodes.append(make_node(op, [x, f"{p}_W", f"{p}_R", f"{p}_B", "", states[0]] + states[1:], outs,
                               hidden_size=hidden, direction="bidirectional" if dirs == 2 else "forward",
                               name=f"{p}_{op.lower()}", **extra))
        y = name if layer == layers - 1 else f"{p}_out"
        nodes += [make_node("Transpose", [f"{p}_Y"], [f"{p}_Yt"], perm=[0, 2, 1, 3]),
                  make_node("Reshape", [f"{p}_Yt", f"{name}_shape"], [y])]
        x = y
        hs.append(f"{p}_h")
        cs += [f"{p}_c"] if op == "LSTM" else []
    nodes.append(make_node("Concat", hs, [f"{name}1"], axis=0))
    if cs:
        nodes.append(make_node("Concat", cs, [f"{name}2"], axis=0))
    return nodes


def _fused_layer_norm(original):
    """A LayerNorm converter: one ONNX ``LayerNormalization`` over the last axis (the form torch exports), else
    ``original``. MXNet's converter writes it as 10 nodes of ReduceMean/Sub/Pow/Sqrt/Div arithmetic; ONNX's op
    normalises every axis from ``axis`` on, so it is the same computation only for the last one."""
    def convert_layer_norm(node, **kwargs):
        attrs = node.get("attrs", {})
        if (int(attrs.get("axis", -1)) != -1 or attrs.get("output_mean_var", "False") in ("True", "1", "true")
                or kwargs.get("opset_version", 0) < 17):
            return original(node, **kwargs)
        from onnx.helper import make_node
        name = node["name"]
        x, gamma, beta = (v.name for v in _inputs(node, kwargs))
        return [make_node("LayerNormalization", [x, gamma, beta], [name], name=name, axis=-1,
                          epsilon=float(attrs.get("eps", 1e-5)))]
    return convert_layer_norm


def _held_gamma_batch_norm(original):
    """A BatchNorm converter: ``original``'s node, its scale input replaced by ``gamma * 0 + 1`` when ``fix_gamma``
    (default True) is set."""
    def convert_batch_norm(node, **kwargs):
        nodes = original(node, **kwargs)
        if node.get("attrs", {}).get("fix_gamma", "True") not in ("True", "true", "1"):
            return nodes
        import numpy as np
        import onnx.numpy_helper
        from onnx.helper import make_node
        name, gamma = node["name"], _inputs(node, kwargs)[1]
        for value, suffix in ((0, "zero"), (1, "one")):
            kwargs["initializer"].append(onnx.numpy_helper.from_array(np.array([value], np.dtype(gamma.dtype)),
                                                                      f"{name}_fix_gamma_{suffix}"))
        bn = nodes[-1]
        bn.input[1] = f"{name}_gamma_held"
        return nodes[:-1] + [
            make_node("Mul", [gamma.name, f"{name}_fix_gamma_zero"], [f"{name}_gamma_times_zero"]),
            make_node("Add", [f"{name}_gamma_times_zero", f"{name}_fix_gamma_one"], [f"{name}_gamma_held"]), bn]
    return convert_batch_norm


_CONVERTERS = {"RNN": convert_rnn}
_ATTENTION = ("_contrib_interleaved_matmul_selfatt_qk", "_contrib_interleaved_matmul_selfatt_valatt")
