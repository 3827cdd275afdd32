"""MXNet's control-flow op ``_foreach`` (``F.contrib.foreach``): a loop in the generated forward.

``_foreach`` runs its body (a subgraph) once per slice of its data inputs along axis 0, carrying its states from one
step to the next; its outputs are the body's per-step outputs stacked along axis 0, then the final states. The node's
inputs are the data arrays, the initial states, then what else the body reads (parameters, outer values); the
attributes ``in_data_locs``, ``in_state_locs`` and ``remain_locs`` say which body input each one is. The translation
writes the loop before the node's line, the body's nodes translated one per line (as function calls: the parameters
stay the model's own), under names made from the node's (``foreach0_3``), so a forward reads::

    foreach0_out0 = []
    foreach0_s0, foreach0_s1 = h, c
    for foreach0_x0 in x.unbind(0):
        foreach0_3 = F.linear(foreach0_x0, self.cell.i2h_weight, self.cell.i2h_bias)
        ...
        foreach0_out0.append(foreach0_19)
        foreach0_s0, foreach0_s1 = foreach0_19, foreach0_17
    y = (torch.stack(foreach0_out0), foreach0_s0, foreach0_s1)
"""
from __future__ import annotations

import numpy as np

from migrate.generate.registry import MULTI_OUTPUT, OpNode, register, translator
from migrate.generate.shapes import translated_shapes

__all__ = []  # emits nothing; subgraph_lines and value_prefix serve ops/quantized.py too


@register("_foreach")
def _foreach(node: OpNode) -> str:
    data_locs, state_locs, remain_locs = (list(node.tuple_attr(key)) for key in
                                          ("in_data_locs", "in_state_locs", "remain_locs"))
    prefix = value_prefix(node.name)
    data = [f"{prefix}_x{i}" for i in range(len(data_locs))]
    states = [f"{prefix}_s{i}" for i in range(len(state_locs))]
    outputs = [f"{prefix}_out{i}" for i in range(int(node.attr("num_out_data")))]
    body_inputs, body_shapes = {}, {}
    for k, loc in enumerate(data_locs + state_locs + remain_locs):  # the node's inputs: data, states, the rest
        body_inputs[loc] = (data + states)[k] if k < len(data) + len(states) else node.inputs[k]
        shape = node.in_shapes[k] if k < len(node.in_shapes) else None
        body_shapes[loc] = shape[1:] if k < len(data) and shape is not None else shape
    lines, heads = subgraph_lines(node, body_inputs, body_shapes, prefix)
    slices = [f"{x}.unbind(0)" for x in node.inputs[:len(data)]]
    steps = slices[0] if len(slices) == 1 else f"zip({', '.join(slices)})"
    node.statements = [f"{out} = []" for out in outputs]
    if states:
        node.statements.append(f"{', '.join(states)} = {', '.join(node.inputs[len(data):len(data) + len(states)])}")
    node.statements.append(f"for {', '.join(data)} in {steps}:")
    node.statements += ["    " + line for line in lines]
    node.statements += [f"    {out}.append({head})" for out, head in zip(outputs, heads)]
    if states:
        node.statements.append(f"    {', '.join(states)} = {', '.join(heads[len(outputs):])}")
    results = [f"torch.stack({out})" for out in outputs] + states
    return results[0] if len(results) == 1 else f"({', '.join(results)})"


def value_prefix(name: str) -> str:
    """The last part of a node's name (``elmo_encoder__foreach0`` -> ``foreach0``; ``fused0`` for a bare number) as
    the prefix of the names its subgraph's values get."""
    last = [part for part in name.split("_") if part][-1:] or ["loop"]
    return last[0] if last[0].isidentifier() else f"fused{last[0]}"


def subgraph_lines(node: OpNode, inputs: dict, shapes: dict, prefix: str) -> tuple:
    """(lines, the expressions of its heads) of ``node``'s first subgraph, each of its op nodes translated as a
    function call (layers stay the model's parameters), its values named ``<prefix>_<node index>``.

    Args:
        node: the node holding the subgraph (its emitted helpers gain the subgraph's).
        inputs: subgraph input position (its variables in node order) -> the expression of its value.
        shapes: subgraph input position -> its shape.
        prefix: the names' prefix (``value_prefix``).

    Raises:
        UnsupportedOpError: an input's shape is unknown, a subgraph node has no translation, or a nested loop's
            names would overwrite this one's.
    """
    body = node.subgraphs[0]
    nodes = body["nodes"]
    variables = [i for i, n in enumerate(nodes) if n["op"] == "null"]
    if any(shapes.get(k) is None for k in range(len(variables))):
        raise node.unsupported("a loop input of unknown shape")
    out_shapes = translated_shapes(nodes, [nodes[i]["name"] for i in variables],
                                   [shapes[k] for k in range(len(variables))], [np.float32] * len(variables), {})
    exprs = {i: inputs[k] for k, i in enumerate(variables)}
    multi = {i for i, n in enumerate(nodes) if n["op"] in MULTI_OUTPUT or len(out_shapes[i]) > 1}

    def ref(entry):
        return f"{exprs[entry[0]]}[{entry[1]}]" if entry[0] in multi else exprs[entry[0]]

    def shape(entry):
        return out_shapes[entry[0]][entry[1]] if entry[1] < len(out_shapes[entry[0]]) else None
    lines = []
    for i, n in enumerate(nodes):
        if n["op"] == "null":
            continue
        if n["op"] == "_foreach" and value_prefix(n["name"]) == prefix:  # its names would overwrite this loop's
            raise node.unsupported(f"a loop {n['name']!r} in its body whose name ends as the outer loop's")
        step = OpNode(n["op"], n["name"], n.get("attrs", {}), [ref(e) for e in n["inputs"]],
                      [shape(e) for e in n["inputs"]], shape([i, 0]),
                      in_ops=[(nodes[e[0]]["op"], nodes[e[0]].get("attrs", {})) for e in n["inputs"]],
                      subgraphs=n.get("subgraphs", []))
        expression = translator(n["op"], n["name"])(step)
        exprs[i] = f"{prefix}_{i}"
        lines += step.statements + [f"{exprs[i]} = {expression}"]
        node.emitted |= step.emitted
    return lines, [ref(head) for head in body["heads"]]
