"""The parameter DAG of an ONNX graph and its canonical order, the same for any exporter.

A parameter node is an ONNX node that consumes a named parameter (Conv, Gemm, MatMul, BatchNormalization, Gather,
...). Its label (kind and normalised weight shape) is what can be compared across exporters. The canonical order is
a post-order walk from the graph outputs where Concat inputs are visited in slot order (slot order is channel
order), inputs of commutative ops (Add, Sum, Mul, ...) are sorted by the signature of the branch behind each of them,
and parameter-free ops pass through, which absorbs Identity/Dropout/Flatten/Reshape and concat nesting.

Every node's op type, inputs and outputs are copied out of the protobuf once (``_data_nodes``); only the nodes that
feed an output through data are kept, so shape arithmetic left in a graph (``migrate.onnx_export.simplify`` folds it at
export where the input shapes fix it) carries no parameter and does not count as a consumer of the value it takes
the shape of. Passes that look for one op type read an index of the nodes by op type.
"""
from __future__ import annotations

import functools
import gc
from dataclasses import dataclass, field
from typing import NamedTuple

import onnx
import onnx.helper

from migrate.mapping.graph_normalize import (PATTERN_STARTS, RECURRENT, fuse_patterns, packed_linear_nodes,
                                             recurrent_nodes, small_constants)

__all__ = ["ParamNode", "ParamGraph", "param_graph"]

PASS_THROUGH = frozenset({"Identity", "Dropout", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Cast"})
ACTIVATIONS = frozenset({"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Softplus", "Softsign", "HardSigmoid",
                         "HardSwish", "Clip", "Softmax", "LogSoftmax", "Gelu", "Mish", "PRelu"})
COMMUTATIVE = frozenset({"Add", "Sum", "Mul", "Max", "Min", "Mean"})
_LEAVES = frozenset({"Shape", "Size", "Constant", "ConstantOfShape"})
_VIEWS = frozenset({"Transpose", "Identity", "Cast"})
# ops whose inputs after the first are shapes, indices or sizes: the walk does not follow them (MXNet's exporter
# computes each Reshape's target with about 15 Shape/Where/Pad nodes; they carry no data and no parameter)
_SHAPE_ARGS = frozenset({"Reshape", "Expand", "Tile", "Slice", "Pad", "Squeeze", "Unsqueeze", "Resize", "Upsample"})
_ROLES = {
    "Conv": ("x", "weight", "bias"), "ConvTranspose": ("x", "weight", "bias"), "Gemm": ("x", "weight", "bias"),
    "MatMul": ("x", "weight"), "Gather": ("weight", "indices"), "PRelu": ("x", "weight"),
    "BatchNormalization": ("x", "weight", "bias", "running_mean", "running_var"),
    "InstanceNormalization": ("x", "weight", "bias"), "LayerNormalization": ("x", "weight", "bias"),
}


def gc_paused(fn):
    """Run ``fn`` with Python's cyclic garbage collector paused (and restored after, as it was).

    Building a graph allocates many small objects and no cycles; each generation-2 collection scans the whole heap
    (torch, mxnet and onnx included), which made matching a 2,000-layer chain 2.4x slower than with the collector
    paused and its growth superlinear (``bench/bench_mapping.py``).
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()
    return wrapper


@dataclass
class ParamNode:
    """One ONNX node that consumes parameters, with what is needed to pair it with its twin.

    Attributes:
        op: ONNX op type.
        name: ONNX node name (the first output name when the node has none).
        output: the node's first output value.
        tensors: role ('weight', 'bias', 'running_mean', ...) -> parameter name.
        shapes: role -> the parameter's stored shape.
        layout: role -> the steps that bring the stored tensor to the canonical layout (see ``_canonical``).
        attrs: the node's ONNX attributes (plus ``transB``/``perm`` as they were normalised).
        kind: 'conv', 'linear', 'bn', 'embed', or the op type in lower case.
        label: (kind, normalised weight shape...) as a tuple of strings and ints; equal labels may pair.
        post: activations applied right after the node (through pass-through ops), e.g. ('Relu',).
        feeds: index (in canonical order) of the parameter node that consumes this node's output directly.
        index: position in canonical order.
    """

    op: str
    name: str
    output: str
    tensors: dict = field(default_factory=dict)
    shapes: dict = field(default_factory=dict)
    layout: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    kind: str = ""
    label: tuple = ()
    post: tuple = ()
    feeds: int | None = None
    index: int = -1


@dataclass
class ParamGraph:
    """The parameter nodes of one ONNX graph in canonical order.

    Attributes:
        nodes: the parameter nodes, canonical order.
        params: parameter name -> stored shape, for every named parameter found among the initializers.
        unused: parameter names that no parameter node consumes.
    """

    nodes: list
    params: dict
    unused: list


@gc_paused
def param_graph(model: onnx.ModelProto, param_names=None) -> ParamGraph:
    """Return the parameter DAG of ``model`` in canonical order.

    Args:
        model: an ONNX model from ``migrate.onnx_export``.
        param_names: the names that are parameters (MXNet params or torch ``state_dict`` keys); None takes
            every floating-point initializer.

    Returns:
        A ``ParamGraph``.

    Examples:
        >>> g = param_graph(export_torch(torch.nn.Linear(4, 2), [(1, 4)], [np.float32]))  # doctest: +SKIP
        >>> g.nodes[0].label
        ('linear', 2, 4)
    """
    g = model.graph
    nodes, producer, sources = _data_nodes(g)
    consumers, by_op = _consumers(nodes), _op_index(nodes)
    params, scalars = _initializers(g, param_names, consumers)
    constants = [nodes[i] for i in by_op.get("Constant", [])]
    fused, dropped = fuse_patterns(nodes, producer, consumers, params,
                                   functools.partial(small_constants, scalars, constants), _new_node,
                                   indices=_of(by_op, PATTERN_STARTS))
    if fused:
        _apply_fusions(nodes, producer, consumers, sources, fused, dropped)
        by_op = _op_index(nodes)
    views = _param_views(nodes, params, _of(by_op, _VIEWS))
    linked = params.keys() | views.keys()
    recurrent, plumbing = recurrent_nodes(nodes, producer, params, indices=_of(by_op, RECURRENT))
    packed, packing = packed_linear_nodes(nodes, producer, params, views, indices=by_op.get("Gemm", []))
    plumbing |= packing
    # the weight plumbing of recurrent and packed nodes and a Shape of a parameter are no parameter nodes of their own
    biases = _bias_adds(nodes, params, linked, plumbing, by_op.get("Add", []))
    skip = plumbing.union(biases)
    pnodes = {i: _make_param_node(n, params, views) for i, n in enumerate(nodes)
              if not linked.isdisjoint(n.input) and i not in skip and n.op_type not in _LEAVES
              and (n.op_type not in _VIEWS or not all(v in linked for v in n.input if v))}
    _add_recurrent(nodes, params, recurrent, pnodes)
    _add_packed(nodes, params, packed, pnodes)
    fused = _fuse_biases(nodes, pnodes, biases, producer, consumers, params, views)
    sources = _without(sources, {producer[v] for v in views if v in producer})
    ctx = _Ctx(nodes, producer, pnodes, fused, _with_params_behind(sources, pnodes), sources)
    order = _post_order(ctx, [o.name for o in g.output])
    ranked = [pnodes[i] for i in order if i in pnodes]
    for k, p in enumerate(ranked):
        p.index = k
    for i in order:
        if i in pnodes:
            pnodes[i].post, feeds = _after(ctx, consumers, pnodes[i].output)
            pnodes[i].feeds = pnodes[feeds].index if feeds is not None and pnodes[feeds].index >= 0 else None
    used = {t for p in ranked for t in p.tensors.values()}
    return ParamGraph(ranked, params, [n for n in params if n not in used])


class _Node(NamedTuple):
    """A plain copy of an ONNX NodeProto's op type, inputs and outputs (protobuf field access is slow in pure
    python); the name and attributes, needed for parameter nodes only, are read from ``proto`` when asked for."""

    op_type: str
    input: list
    output: list
    proto: onnx.NodeProto

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def attribute(self):
        return self.proto.attribute


_DROPPED = _Node("", [], [], onnx.NodeProto())  # what a node fused into another leaves at its index


def _data_nodes(graph) -> tuple[list, dict, list]:
    """Copies of the nodes that feed a graph output through data, in file (topological) order, value name -> index
    of the node (in that list) that writes it, and each node's ``_data_sources``.

    A sweep back from the outputs follows the edges that ``_post_order`` and ``_branch_signatures`` walk
    (``_data_sources``): not the inputs of a leaf (``Shape``, ``Constant``, ...) nor the shape/index inputs of
    ``_SHAPE_ARGS`` ops. What this leaves out carries no parameter: shape arithmetic that ``simplify_graph`` could
    not fold (the export folds it where input shapes fix it), a node whose only reader is a ``Shape``.
    Every node's op type, inputs and outputs are copied in one sweep (protobuf field access is slow in pure
    python; it is most of what reading a graph costs); the name and attributes only when asked for.
    """
    protos = list(graph.node)
    nodes = list(map(_Node, [n.op_type for n in protos], [n.input[:] for n in protos],
                     [n.output[:] for n in protos], protos))
    producer = {v: i for i, n in enumerate(nodes) for v in n.output}
    sources = _data_sources(nodes, producer)
    live = bytearray(len(nodes))
    for o in graph.output:
        if o.name in producer:
            live[producer[o.name]] = 1
    for i in range(len(nodes) - 1, -1, -1):  # ONNX lists nodes in topological order: readers come after
        if live[i]:
            for j in sources[i]:
                live[j] = 1
    if all(live):
        return nodes, producer, sources
    nodes = [n for n, keep in zip(nodes, live) if keep]
    producer = {v: i for i, n in enumerate(nodes) for v in n.output}
    return nodes, producer, _data_sources(nodes, producer)


def _apply_fusions(nodes, producer, consumers, sources, fused: dict, dropped: set) -> None:
    """Put each fused node at its index and leave an empty node at each dropped index (indices stay valid), with
    ``producer``, ``consumers`` and ``sources`` kept in step."""
    changed = set()
    for i, node in [*fused.items(), *((i, _DROPPED) for i in dropped)]:
        old = nodes[i]
        for v in old.input:
            consumers[v].remove(i)
        for v in node.input:
            consumers.setdefault(v, []).append(i)
        for v in old.output:
            if v not in node.output:
                del producer[v]
                changed.update(consumers.get(v, ()))
        nodes[i] = node
        changed.add(i)
    for i in changed:
        sources[i] = _sources_of(nodes[i], producer.get)


def _op_index(nodes) -> dict:
    """Op type -> indices of the nodes of that type, in order (the passes that look for one op read only those)."""
    by_op: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        by_op.setdefault(n.op_type, []).append(i)
    return by_op


def _of(by_op: dict, ops) -> list:
    """The indices of the nodes of any of ``ops``, in order."""
    found = [by_op[op] for op in ops if op in by_op]
    return found[0] if len(found) == 1 else sorted(i for group in found for i in group)


def _consumers(nodes) -> dict:
    """Value name -> indices of the nodes that read it."""
    consumers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for v in n.input:
            consumers.setdefault(v, []).append(i)
    return consumers


def _initializers(graph, param_names, used) -> tuple[dict, list]:
    """Parameter name -> stored shape (initializer order), and the one-element float initializers in ``used``.

    Only names are read for every initializer; shapes and types for the parameters and the used ones.
    """
    wanted = set(param_names) if param_names is not None else None
    params, scalars = {}, []
    for t in graph.initializer:
        name = t.name
        if wanted is not None and name not in wanted and name not in used:
            continue
        floating = t.data_type in (1, 10, 11)
        if name in wanted if wanted is not None else floating:
            params[name] = tuple(t.dims)
        if floating and name in used and all(d == 1 for d in t.dims):
            scalars.append(t)
    return params, scalars


@dataclass
class _Ctx:
    nodes: list
    producer: dict
    pnodes: dict
    fused: set  # the bias Adds folded into the node before them
    behind: set  # the nodes with a parameter node at or behind them
    sources: list  # per node, the producers of its data inputs (``_data_sources``, parameter views left out)


def _data_sources(nodes, producer) -> list:
    """Per node, the indices of the nodes that write its data inputs, in slot order: none for a leaf (``Shape``,
    ``Constant``, ...), the first input only for a ``_SHAPE_ARGS`` op. These are the edges every walk of the graph
    follows (which nodes are data, canonical order, branch signatures, parameters behind); ``_without`` then drops
    the views of parameters."""
    get = producer.get
    return [_sources_of(n, get) for n in nodes]


def _sources_of(node, get):
    """One node's entry of ``_data_sources`` (``get``: the producer lookup)."""
    op = node.op_type
    if op in _LEAVES:
        return ()
    found = [get(v) for v in (node.input[:1] if op in _SHAPE_ARGS else node.input)]
    return [j for j in found if j is not None] if None in found else found


def _without(sources: list, drop: set) -> list:
    """``sources`` with the indices in ``drop`` left out."""
    if not drop:
        return sources
    return [srcs if drop.isdisjoint(srcs) else [j for j in srcs if j not in drop] for srcs in sources]


def _with_params_behind(sources, pnodes) -> set:
    """Indices of the nodes with a parameter node at or behind them, along ``sources``."""
    out: set = set()
    for i, srcs in enumerate(sources):  # ONNX lists nodes in topological order
        if i in pnodes or not out.isdisjoint(srcs):
            out.add(i)
    return out


def _param_views(nodes, params, indices) -> dict:
    """Values that are a parameter seen through Transpose/Identity/Cast (``indices``: those nodes, in order):
    value -> (param, perm or None)."""
    views: dict = {}
    for i in indices:
        n = nodes[i]
        if len(n.input) == 1 and (n.input[0] in params or n.input[0] in views):
            base, perm = views.get(n.input[0], (n.input[0], None))
            if n.op_type == "Transpose":
                new = next((list(a.ints) for a in n.attribute if a.name == "perm"), None) or None
                perm = tuple(new) if perm is None or new is None else tuple(perm[k] for k in new)
            views[n.output[0]] = (base, perm)
    return views


def _new_node(op_type, inputs, outputs, name, attrs) -> _Node:
    proto = onnx.NodeProto(op_type=op_type, name=name)
    proto.attribute.extend(onnx.helper.make_attribute(k, v) for k, v in attrs.items())
    return _Node(op_type, list(inputs), list(outputs), proto)


def _add_packed(nodes, params, parts, pnodes) -> None:
    """A Gemm whose weight packs several parameters (query/key/value) becomes one linear node per parameter
    (``parts`` from ``packed_linear_nodes``)."""
    attrs: dict = {}
    for i, (gemm, roles) in parts.items():
        n = nodes[gemm]
        if gemm not in attrs:
            attrs[gemm] = _attrs(n)
        p = ParamNode("Gemm", f"{n.name or n.output[0]}:{roles['weight']}", nodes[i].output[0], dict(roles),
                      {r: params[t] for r, t in roles.items()}, {r: [] for r in roles}, dict(attrs[gemm]))
        if not p.attrs.get("transB", 0):
            p.layout["weight"] = [("transpose", (1, 0))]
        w = p.shapes["weight"] if p.attrs.get("transB", 0) else p.shapes["weight"][::-1]
        p.kind, p.label = "linear", ("linear", *w)
        p.attrs["transB"] = 1
        pnodes[i] = p


def _add_recurrent(nodes, params, roles_by_node, pnodes) -> None:
    """Recurrent nodes become parameter nodes, tensors by torch's role names (``roles_by_node`` from
    ``recurrent_nodes``)."""
    for i, roles in roles_by_node.items():
        n = nodes[i]
        shapes = {r: params[t] for r, t in roles.items()}
        p = ParamNode(n.op_type, n.name or n.output[0], n.output[0], dict(roles), shapes,
                      {r: [] for r in roles}, _attrs(n))
        w = p.shapes.get("weight_ih", (0, 0))
        dirs = 2 if p.attrs.get("direction") == "bidirectional" else 1
        p.kind, p.label = p.op.lower(), (p.op.lower(), int(p.attrs.get("hidden_size", 0)), int(w[-1]), dirs)
        pnodes[i] = p


def _attrs(node) -> dict:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        v = v.decode() if isinstance(v, bytes) else v
        out[a.name] = tuple(x.decode() if isinstance(x, bytes) else x for x in v) if isinstance(v, list) else v
    return out


def _make_param_node(node, params, views) -> ParamNode | None:
    roles = _ROLES.get(node.op_type, ())
    tensors, shapes, layout = {}, {}, {}
    for slot, v in enumerate(node.input):
        if v in params or v in views:
            base, perm = views.get(v, (v, None))
            role = roles[slot] if slot < len(roles) else f"in{slot}"
            tensors[role], shapes[role] = base, params[base]
            layout[role] = [("transpose", perm)] if perm else []
    if not tensors:
        return None
    p = ParamNode(node.op_type, node.name or node.output[0], node.output[0], tensors, shapes, layout, _attrs(node))
    _label(p)
    return p


def _label(p: ParamNode) -> None:
    """Set kind, label and the layout steps that bring each tensor to its canonical shape."""
    w = _used_shape(p, "weight")
    if p.op in ("Conv", "ConvTranspose") and w is not None:
        group = int(p.attrs.get("group", 1))
        if p.op == "Conv" and group == 1 and all(k == 1 for k in w[2:]):
            p.kind, p.label = "linear", ("linear", w[0], w[1])
            p.layout["weight"] = p.layout["weight"] + [("reshape", (w[0], w[1]))]
        else:
            p.kind, p.label = p.op.lower(), (p.op.lower(), *w, group)
    elif p.op in ("Gemm", "MatMul") and w is not None and len(w) == 2:
        flip = (p.op == "MatMul") or not p.attrs.get("transB", 0)
        if flip:
            p.layout["weight"] = _then_transpose(p.layout["weight"], (1, 0))
            w = (w[1], w[0])
        p.kind, p.label = "linear", ("linear", *w)
    elif p.op == "BatchNormalization":
        c = next(iter(p.shapes.values()))
        p.kind, p.label = "bn", ("bn", *c)
    elif p.op == "Gather" and w is not None:
        p.kind, p.label = "embed", ("embed", *w)
    else:
        p.kind = p.op.lower()
        p.label = (p.kind, *[f"{r}{list(_used_shape(p, r))}" for r in sorted(p.tensors)])


def _then_transpose(layout: list, perm: tuple) -> list:
    """``layout`` followed by a transpose by ``perm``, composed with a transpose that ends it (torch's ``Linear``
    reads its weight through a Transpose that the MatMul's own flip undoes: no step at all)."""
    if layout and layout[-1][0] == "transpose":
        composed = tuple(layout[-1][1][k] for k in perm)
        rest = layout[:-1]
        return rest if composed == tuple(range(len(composed))) else rest + [("transpose", composed)]
    return layout + [("transpose", perm)]


def _used_shape(p: ParamNode, role: str):
    """The shape of a tensor as the node sees it (after any Transpose view)."""
    if role not in p.shapes:
        return None
    shape = p.shapes[role]
    for step, arg in p.layout.get(role, []):
        shape = tuple(shape[k] for k in arg) if step == "transpose" else tuple(arg)
    return shape


def _bias_adds(nodes, params, linked, plumbing, adds) -> list:
    """Indices of the ``Add`` nodes (among ``adds``) of one parameter and one data input: candidates for
    ``_fuse_biases``."""
    out = []
    for i in adds:
        n = nodes[i]
        if len(n.input) == 2 and i not in plumbing:
            a, b = n.input
            if (a in params) != (b in params) and (a if b in params else b) not in linked:
                out.append(i)
    return out


def _fuse_biases(nodes, pnodes, candidates, producer, consumers, params, views) -> set:
    """Fold each ``Add(MatMul/Gemm/Conv output, bias)`` among ``candidates`` (``_bias_adds``) into the producing
    node as its bias; the others become parameter nodes of their own. Return the folded Add indices."""
    fused = set()
    for i in candidates:
        node = nodes[i]
        name, data = node.input if node.input[0] in params else node.input[::-1]
        q = pnodes.get(producer.get(data))
        shape = params[name]
        if (q is None or "bias" in q.tensors or q.kind not in ("linear", "conv") or len(consumers[data]) != 1
                or _numel(shape) != int(q.label[1])):
            pnodes[i] = _make_param_node(node, params, views)
            continue
        q.tensors["bias"], q.shapes["bias"], q.layout["bias"] = name, shape, [("reshape", (q.label[1],))]
        q.output = node.output[0]
        fused.add(i)
    return fused


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _ordered_inputs(ctx: _Ctx, srcs: list) -> list:
    """The producers ``srcs`` of a commutative node's data inputs, in the order the canonical walk visits them."""
    with_params = [j in ctx.behind for j in srcs]
    # one branch with parameters: it sorts last, the others keep slot order (what the signatures would give,
    # without walking a constant branch back to the graph's start)
    keys = _branch_signatures(ctx, srcs) if sum(with_params) > 1 else with_params
    return [j for _, _, j in sorted(zip(keys, range(len(srcs)), srcs))]


def _branch_signatures(ctx: _Ctx, srcs) -> list:
    """For each input (by the index of its producer), (count, sorted labels) of the parameter nodes behind it and
    behind no sibling.

    Walks backwards in decreasing topological index and stops where all branches have met, so the cost is the
    size of the region between the fork and this node, not of the whole graph. Nodes are in topological order, so
    every node's producers come later in the walk: a scan down the indices (a dict lookup each) visits them in
    order without a heap.
    """
    full = (1 << len(srcs)) - 1
    mask: dict[int, int] = {}
    for b, src in enumerate(srcs):
        mask[src] = mask.get(src, 0) | (1 << b)
    labels: list[list[str]] = [[] for _ in srcs]
    single = {1 << b: b for b in range(len(srcs))}
    open_count = sum(1 for m in mask.values() if m != full)
    sources, pnodes, seen = ctx.sources, ctx.pnodes, mask.get
    i = max(mask) + 1
    while open_count > 0:
        i -= 1
        m = seen(i)
        if m is None or m == full:
            continue
        open_count -= 1
        if i in pnodes and m in single:
            labels[single[m]].append(repr(pnodes[i].label))
        for src in sources[i]:
            old = seen(src)
            new = (old or 0) | m
            if old is None:
                open_count += new != full
            elif old != full and new == full:
                open_count -= 1
            mask[src] = new
    return [(len(ls), tuple(sorted(ls))) for ls in labels]


def _post_order(ctx: _Ctx, outputs) -> list:
    """Node indices in post-order from the graph outputs (iterative: 1,000-layer chains need no recursion), each
    node's data inputs (``ctx.sources``) in slot order, those of a commutative node in ``_ordered_inputs`` order."""
    nodes, sources = ctx.nodes, ctx.sources
    order, done = [], set()
    for out in outputs:
        start = ctx.producer.get(out)
        if start is None or start in done:
            continue
        stack, pending = [None], [iter((start,))]  # a root above the output's node
        while pending:
            for j in pending[-1]:
                if j in done:
                    continue
                done.add(j)
                nxt = sources[j]
                if len(nxt) > 1 and nodes[j].op_type in COMMUTATIVE:
                    nxt = _ordered_inputs(ctx, nxt)
                stack.append(j)
                pending.append(iter(nxt))
                break
            else:
                pending.pop()
                i = stack.pop()
                if i is not None:
                    order.append(i)
    return order


def _after(ctx: _Ctx, consumers, value) -> tuple[tuple, int | None]:
    """Activations right after ``value`` (through pass-through ops) and the parameter node it feeds, if any."""
    post: list = []
    feeds = None
    while True:
        users = consumers.get(value, [])
        if len(users) != 1:
            break
        j = users[0]
        node = ctx.nodes[j]
        if j in ctx.pnodes:
            feeds = j if not post and ctx.nodes[j].input and ctx.nodes[j].input[0] == value else None
            break
        if node.op_type in ACTIVATIONS:
            alpha = _attrs(node).get("alpha")
            post.append(node.op_type if alpha is None else f"{node.op_type}(alpha={alpha:.4g})")
        elif node.op_type not in PASS_THROUGH and j not in ctx.fused:
            break
        value = node.output[0]
    return tuple(post), feeds
