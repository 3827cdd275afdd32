"""Op-by-op replay of zoo models: each op's translation run on MXNet's own input values for that op, against
MXNet's output of it. A translation that is right op by op differs from MXNet by float32 rounding per op; where a
whole model still parts from MXNet, that rounding is amplified by the graph (exp in box decoding, ROI sampling,
selections), not mistranslated.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/zoo_op_replay.py REGEX [--over 1e-5]

Prints per model (built as ``bench/zoo_report.py`` builds it): how many op outputs were replayed, the largest
relative difference max |torch - mxnet| / max(1, max |mxnet|) with its op and node, and the ops over ``--over``.
MXNet runs the graph node by node (``MXNET_SUBGRAPH_BACKEND=NONE``, as the Gluon Block runs imperatively). Nodes
the generator drops (``amp_multicast``, which MXNet's ``tojson`` leaves out) are skipped.
"""
import argparse
import json
import os
import re
import sys
import types
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models  # noqa: E402 (bench/ is not a package)

warnings.filterwarnings("ignore")


def _node_values(net, inputs) -> tuple:
    """(graph nodes, per node the list of MXNet's output values) of ``net`` on ``inputs``, variables included."""
    import mxnet as mx
    names = ["data"] if len(inputs) == 1 else [f"data{i}" for i in range(len(inputs))]
    symbol = net(*[mx.sym.var(n) for n in names])
    symbol = mx.sym.Group(list(zoo_models._flat(symbol))) if isinstance(symbol, (list, tuple)) else symbol
    nodes = json.loads(symbol.tojson(remove_amp_cast=False))["nodes"]
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
    return nodes, per_node


def replay(net, inputs) -> list:
    """Sorted [(relative difference, op, node name)] of every op output the translation replays."""
    import torch

    from migrate.generate import ops  # noqa: F401  (fills the registry)
    from migrate.generate.registry import OpNode, translator
    nodes, values = _node_values(net, inputs)
    rows = []
    for i, node in enumerate(nodes):
        if node["op"] == "null" or not values[i] or node["op"] == "amp_multicast":
            continue
        ins = [values[e[0]][e[1]] for e in node["inputs"]]
        op = OpNode(node["op"], node["name"], node.get("attrs", {}), [f"in{j}" for j in range(len(ins))],
                    [x.shape for x in ins], values[i][0].shape,
                    in_ops=[(nodes[e[0]]["op"], nodes[e[0]].get("attrs", {})) for e in node["inputs"]])
        expression = translator(op.op, op.name)(op)
        scope = {**op.namespace(), "self": types.SimpleNamespace(training=False)}
        with torch.no_grad():
            out = eval(expression, {**scope, **{f"in{j}": torch.from_numpy(np.ascontiguousarray(x))
                                                for j, x in enumerate(ins)}})
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        for want, got in zip(values[i], outs):
            rows.append((zoo_models.relative_difference([want], [got.numpy()]), node["op"], node["name"]))
    return sorted(rows, reverse=True)


def main(argv=None) -> int:
    """Replay the models whose name matches; print one block per model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", help="regex: the models to replay")
    parser.add_argument("--over", type=float, default=1e-5, help="list the ops over this relative difference")
    args = parser.parse_args(argv)
    for entry in zoo_models.entries():
        if not re.search(args.only, entry.name):
            continue
        net, inputs, _ = zoo_models.build(entry)
        rows = replay(net, inputs)
        worst = rows[0] if rows else (0.0, "-", "-")
        over = sorted({op for d, op, _ in rows if d > args.over})
        print(f"{entry.name}: {len(rows)} op outputs replayed; largest {worst[0]:.2g} ({worst[1]} {worst[2]}); "
              f"ops over {args.over:g}: {', '.join(over) or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
