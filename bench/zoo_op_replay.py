"""Op-by-op replay of zoo models: each op's translation run on MXNet's own input values for that op, against
MXNet's output of it, and chained as the generated module runs it (each op on the translations' own outputs). A
translation that is right op by op differs from MXNet by float32 rounding per op; where a whole model still parts
from MXNet, that rounding is amplified by the graph (exp in box decoding, ROI sampling, selections), not
mistranslated: the chained replay shows the op where the difference grows, and for a selection op (box_nms, topk,
sort, argsort) how many of MXNet's ranked candidates lie within that rounding of the next one (near ties, which
the two runs may order either way).

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/zoo_op_replay.py REGEX [--over 1e-5] [--growth 5]
     [--shape 1,3,512,512] [--low 0] [--seed 0] [--rnd-type uniform] [--proposals 300]

Prints per model (built as ``bench/zoo_report.py`` builds it; ``--shape``/``--low``/``--seed``: one input of that
shape, uniform in [low, 1), instead of the zoo report's candidates; ``--rnd-type``: the Xavier draw;
``--proposals``: the R-CNN proposal count, 100 as in the zoo report unless given): how many op outputs were
replayed, the largest relative difference max |torch - mxnet| / max(1, max |mxnet|) of an op run on MXNet's inputs
with its op and node, the ops over ``--over``, the chained difference of the outputs (beside how far MXNet's own
move with every weight x (1 + 1e-7 noise)), and the nodes where the chained difference grows past ``--over`` (to
``--growth`` times its inputs' or more, relative and absolute), with a selection op's near ties and the first rank
where its chained output departs from MXNet's. MXNet runs the graph node by node (``MXNET_SUBGRAPH_BACKEND=NONE``,
as the Gluon Block runs imperatively). Nodes the generator drops (``amp_multicast``, which MXNet's ``tojson``
leaves out) pass their inputs on.
"""
import argparse
import json
import math
import os
import re
import sys
import types
import warnings
from typing import NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models  # noqa: E402 (bench/ is not a package)

warnings.filterwarnings("ignore")


def _node_values(net, inputs) -> tuple:
    """(graph nodes, per node the list of MXNet's output values, the graph's heads) of ``net`` on ``inputs``,
    variables included."""
    import mxnet as mx
    names = ["data"] if len(inputs) == 1 else [f"data{i}" for i in range(len(inputs))]
    symbol = net(*[mx.sym.var(n) for n in names])
    symbol = mx.sym.Group(list(zoo_models._flat(symbol))) if isinstance(symbol, (list, tuple)) else symbol
    graph = json.loads(symbol.tojson(remove_amp_cast=False))
    nodes = graph["nodes"]
    internals, params = symbol.get_internals(), {k: p.data() for k, p in net.collect_params().items()}
    data = {n: mx.nd.array(x, dtype=x.dtype) for n, x in zip(names, inputs)}
    args = [data[k] if k in data else params[k] for k in internals.list_arguments()]  # a list: names repeat
    before = os.environ.get("MXNET_SUBGRAPH_BACKEND")
    os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"
    try:
        executor = internals.bind(mx.cpu(), args, aux_states=[params[k] for k in internals.list_auxiliary_states()])
        values = [v.asnumpy() for v in executor.forward()]
    finally:
        if before is None:
            del os.environ["MXNET_SUBGRAPH_BACKEND"]
        else:
            os.environ["MXNET_SUBGRAPH_BACKEND"] = before
    outputs, k, per_node = internals.list_outputs(), 0, []
    for node in nodes:  # internals list every node's outputs in node order
        name, mine = node["name"], []
        if k < len(outputs) and outputs[k] in (name, f"{name}_output"):
            mine, k = [values[k]], k + 1
        else:
            while k < len(outputs) and outputs[k] == f"{name}_output{len(mine)}":
                mine, k = mine + [values[k]], k + 1
        per_node.append(mine)
    return nodes, per_node, graph["heads"]


class Row(NamedTuple):
    """One op output: its relative difference from MXNet's with the op run on MXNet's inputs (``alone``) and run
    on the translations' own outputs (``chained``, as the generated module runs), the chained relative difference
    of its inputs, the largest absolute chained differences of the output and of its inputs, and for a selection
    op its near ties (a text, else empty)."""

    alone: float
    chained: float
    inputs: float
    op: str
    name: str
    ties: str = ""
    absolute: float = 0.0
    inputs_absolute: float = 0.0

    def grows(self, over: float, factor: float) -> bool:
        """Whether the chained difference passes ``over`` here, ``factor`` times its inputs' or more both relative
        and absolute (a clip to a smaller range raises the relative one alone)."""
        return (self.chained > over and self.chained >= factor * self.inputs
                and self.absolute >= factor * self.inputs_absolute)


_SELECTIONS = ("_contrib_box_nms", "topk", "sort", "argsort")


def _translation(node, nodes, ins, out_shape) -> list:
    """The outputs (a list) of ``node``'s translation evaluated on the torch tensors ``ins`` (``out_shape``: its
    first output's shape, as MXNet's inference gives it to the translator)."""
    import torch

    from migrate.generate import ops  # noqa: F401  (fills the registry)
    from migrate.generate.registry import OpNode, translator
    names = [f"in{j}" for j in range(len(ins))]
    op = OpNode(node["op"], node["name"], node.get("attrs", {}), names, [tuple(x.shape) for x in ins], out_shape,
                in_ops=[(nodes[e[0]]["op"], nodes[e[0]].get("attrs", {})) for e in node["inputs"]])
    module = types.SimpleNamespace(training=False, _device=lambda: torch.device("cpu"))
    expression = translator(op.op, op.name)(op)  # fills the node's namespace with what it emits
    scope = {**op.namespace(), "self": module, **dict(zip(names, ins))}
    with torch.no_grad():
        out = eval(expression, scope)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def near_ties(node, want, got) -> str:
    """For a selection op: how many adjacent pairs of MXNet's ranked keys (box_nms: the scores; topk/sort/argsort:
    the values along the axis, flattened where it is None) are closer than the largest |difference| of those keys
    between ``want`` (MXNet's input) and ``got`` (the chained one), among the first ``topk`` (all where none)."""
    from migrate.generate.registry import OpNode
    op = OpNode(node["op"], node["name"], node.get("attrs", {}), [])
    if node["op"] == "_contrib_box_nms":
        keys, other = want[..., op.attr("score_index", 1)], got[..., op.attr("score_index", 1)]
    elif op.attr("axis", -1) is None:
        keys, other = want.reshape(1, -1), got.reshape(1, -1)
    else:
        keys, other = np.moveaxis(want, op.attr("axis", -1), -1), np.moveaxis(got, op.attr("axis", -1), -1)
    keys, other = keys.reshape(-1, keys.shape[-1]).astype(np.float64), other.reshape(-1, keys.shape[-1])
    rounding = float(np.abs(keys - other).max()) if keys.size else 0.0
    ranked = np.sort(keys, axis=-1) if op.attr("is_ascend", False) else -np.sort(-keys, axis=-1)
    k = op.attr("topk", op.attr("k", -1))
    ranked = ranked[:, :ranked.shape[1] if k is None or k < 1 else min(k + 1, ranked.shape[1])]
    gaps = np.abs(ranked[:, :-1] - ranked[:, 1:])
    return (f"of its first {gaps.size} ranked candidates {int((gaps == 0).sum())} tie the next exactly and "
            f"{int(((gaps > 0) & (gaps <= rounding)).sum())} more lie within {rounding:.2g} (the largest chained "
            f"difference of the keys) of it")


def first_departure(node, want, got) -> str:
    """For a selection op: the first rank (box_nms: output row; topk/sort/argsort: position along the axis) where
    the chained output ``got`` departs from MXNet's ``want`` by more than the zoo report's tolerance."""
    from migrate.generate.registry import OpNode
    axis = -2 if node["op"] == "_contrib_box_nms" else OpNode(node["op"], node["name"], node.get("attrs", {}),
                                                               []).attr("axis", -1)
    if axis is None:  # the op ranks the flattened input
        want, got, axis = want.reshape(-1), got.reshape(-1), 0
    want, got = np.moveaxis(want, axis, 0).astype(np.float64), np.moveaxis(got, axis, 0)
    far = (np.abs(want - got) > zoo_models.TOL * max(1.0, float(np.abs(want).max()))).reshape(len(want), -1).any(1)
    return f"its output first departs from MXNet's at rank {int(np.argmax(far))}" if far.any() else ""


def _selection_notes(node, want_in, got_in, want_out, got_out) -> str:
    """``near_ties`` and ``first_departure`` of a selection op (MXNet's and the chained inputs, a list each, and
    first output), else empty."""
    if node["op"] not in _SELECTIONS:
        return ""
    notes = (near_ties(node, want_in[0], got_in[0].numpy()), first_departure(node, want_out, got_out))
    return "; ".join(t for t in notes if t)


def replay(net, inputs) -> tuple:
    """([Row] of every op output the translation replays, in graph order; the chained outputs of the graph)."""
    import torch
    nodes, values, heads = _node_values(net, inputs)
    chained, rows = {}, []
    for i, node in enumerate(nodes):
        if node["op"] == "null":
            chained[i] = [torch.from_numpy(np.ascontiguousarray(v)) for v in values[i]]
            continue
        ours = [chained[e[0]][e[1]] for e in node["inputs"]]
        if node["op"] == "amp_multicast" or not values[i]:
            chained[i] = ours
            continue
        theirs = [values[e[0]][e[1]] for e in node["inputs"]]
        shape = values[i][0].shape
        alone = _translation(node, nodes, [torch.from_numpy(np.ascontiguousarray(x)) for x in theirs], shape)
        chained[i] = _translation(node, nodes, ours, shape)
        before = max([zoo_models.relative_difference([w], [g.numpy()]) for w, g in zip(theirs, ours)] + [0.0])
        ties = _selection_notes(node, theirs, ours, values[i][0], chained[i][0].numpy())
        for want, one, chain in zip(values[i], alone, chained[i]):
            rows.append(Row(zoo_models.relative_difference([want], [one.numpy()]),
                            zoo_models.relative_difference([want], [chain.numpy()]), before, node["op"],
                            node["name"], ties, _absolute(want, chain.numpy()),
                            max([_absolute(w, g.numpy()) for w, g in zip(theirs, ours)] + [0.0])))
    return rows, [chained[h[0]][h[1]].numpy() for h in heads]


def _absolute(want, got) -> float:
    """Largest |got - want| (inf if the shapes differ, 0 if empty)."""
    if want.shape != got.shape:
        return math.inf
    return float(np.abs(want.astype(np.float64) - got).max()) if want.size else 0.0


def _inputs(args) -> list:
    """The one input of ``--shape`` (uniform in [--low, 1), seeded by ``--seed``), or None: the zoo report's
    candidates."""
    if not args.shape:
        return None
    shape = tuple(int(d) for d in args.shape.split(","))
    return [np.random.RandomState(args.seed).uniform(args.low, 1, shape).astype(np.float32)]


def _report(name, inputs, want, rows, outputs, over, factor, control) -> list:
    """The lines printed for one model (``want``: MXNet's outputs; ``outputs``: the chained ones; ``control``: how
    far MXNet's own outputs move with its weights x (1 + 1e-7 noise))."""
    shapes = " ".join("x".join(map(str, x.shape)) for x in inputs)
    worst = max(rows, key=lambda r: r.alone, default=Row(0.0, 0.0, 0.0, "-", "-"))
    ops = sorted({r.op for r in rows if r.alone > over})
    grows = [r for r in rows if r.grows(over, factor)]
    lines = [f"{name} ({shapes}): {len(rows)} op outputs replayed",
             f"  each op on MXNet's inputs: largest {worst.alone:.2g} ({worst.op} {worst.name}); ops over {over:g}: "
             f"{', '.join(ops) or 'none'}",
             f"  chained as the generated module runs: outputs {zoo_models.relative_difference(want, outputs):.2g} "
             f"from MXNet's (MXNet with every weight x (1 + 1e-7 noise): {control:.2g}); where the difference grows "
             f"past {over:g} (to {factor:g}x its inputs' or more):"]
    lines += [_row_line(r) for r in grows[:8]] or ["    nowhere"]
    listed, selections = {r.name for r in grows}, []
    for row in rows:  # one line per node (topk's two outputs share it)
        if row.op in _SELECTIONS and row.name not in listed:
            listed.add(row.name)
            selections.append(row)
    return lines + (["  other selection ops:"] + [_row_line(r) for r in selections[:8]] if selections else [])


def _row_line(row) -> str:
    return (f"    {row.op} {row.name}: on MXNet's inputs {row.alone:.2g}, chained {row.chained:.2g}, its inputs "
            f"{row.inputs:.2g}" + (f"; {row.ties}" if row.ties else ""))


def main(argv=None) -> int:
    """Replay the models whose name matches; print one block per model."""
    parser = argparse.ArgumentParser(description=__doc__.split(":")[0])
    parser.add_argument("only", help="regex: the models to replay")
    parser.add_argument("--over", type=float, default=1e-5, help="list the ops over this relative difference")
    parser.add_argument("--growth", type=float, default=5.0,
                        help="list the nodes whose chained difference is this many times their inputs'")
    parser.add_argument("--shape", default=None, help="one input of this shape (e.g. 1,3,512,512) instead of the "
                                                       "zoo report's candidates")
    parser.add_argument("--low", type=float, default=-1.0, help="with --shape: the input is uniform in [low, 1)")
    parser.add_argument("--seed", type=int, default=0, help="with --shape: the input's seed")
    parser.add_argument("--proposals", type=int, default=zoo_models.RCNN_PROPOSALS,
                        help="R-CNN proposals kept after the RPN's NMS (their test default: 300)")
    parser.add_argument("--rnd-type", default="gaussian", choices=("gaussian", "uniform"),
                        help="Xavier's draw (magnitude 2)")
    args = parser.parse_args(argv)
    zoo_models.RCNN_PROPOSALS = args.proposals  # read when an R-CNN entry builds its network
    for entry in zoo_models.entries():
        if not re.search(args.only, entry.name):
            continue
        net, inputs, want = zoo_models.build(entry, _inputs(args), args.rnd_type)
        rows, outputs = replay(net, inputs)
        control = zoo_models.mxnet_self_difference(net, inputs, want)
        print("\n".join(_report(entry.name, inputs, want, rows, outputs, args.over, args.growth, control)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
