"""Input transforms (scaling, mean subtraction) that one model applies before its first layer and the other does not:
the likely cause of a first divergence there. insightface's ArcFace graphs compute ``(data - 127.5) * 0.0078125``
before their first convolution while its torch twins (arcface_torch's iresnet) expect the data scaled already: every
node differs from the first one on, and the mapping is right.

MXNet's side is read from the graph (the chain of elementwise ops between a graph input and the diverging node);
torch's is measured (the input the diverging module receives, caught by a forward pre-hook, against the raw input).

Examples:
    >>> input_transform_cause(source, model, "conv0_fwd", "conv1", inputs)  # doctest: +SKIP
    "input scaling in MXNet only: MXNet's graph computes ((data - 127.5) * 0.0078125) before 'conv0_fwd' ..."
"""
from __future__ import annotations

import numpy as np

from migrate.module_outputs import torch_inputs

__all__ = ["TRANSFORM_OPS", "input_transform_cause"]

#: MXNet op -> its expression, ``{x}`` the input on the path from the data, ``{s}`` the scalar or other operand.
TRANSFORM_OPS = {
    "_minus_scalar": "({x} - {s})", "_plus_scalar": "({x} + {s})", "_mul_scalar": "{x} * {s}",
    "_div_scalar": "{x} / {s}", "_rminus_scalar": "({s} - {x})", "_rdiv_scalar": "{s} / {x}",
    **{op: "({x} - {s})" for op in ("broadcast_sub", "broadcast_minus", "elemwise_sub", "_sub", "_minus", "_Minus")},
    **{op: "({x} + {s})" for op in ("broadcast_add", "broadcast_plus", "elemwise_add", "_add", "_plus", "_Plus")},
    **{op: "{x} * {s}" for op in ("broadcast_mul", "elemwise_mul", "_mul", "_Mul")},
    **{op: "{x} / {s}" for op in ("broadcast_div", "elemwise_div", "_div", "_Div")},
}
_REVERSED = {"({x} - {s})": "({s} - {x})", "{x} / {s}": "{s} / {x}"}  # the data on the right of a - or /


def input_transform_cause(source, model, mx_node: str, torch_module: str, inputs: list) -> str:
    """The likely cause of a first divergence at ``mx_node`` / ``torch_module`` when one model transforms its input
    before that layer and the other does not, or ``""``.

    Args:
        source: the ``MxSource`` (its graph and input names).
        model: the torch model (run once, in eval mode, on ``inputs``).
        mx_node: the MXNet op of the first diverging pair (``VerifyReport.first_divergence.mx_node``).
        torch_module: its torch module path (``first_divergence.torch_node``).
        inputs: the numpy inputs both models ran on (``nodes.seeded_inputs``), in ``source.input_names`` order.

    Returns:
        One sentence naming the transform (MXNet's ops and their expression, or torch's measured scale and offset),
        or ``""`` when both or neither transform the input before that layer.

    Examples:
        >>> input_transform_cause(source, model, report.first_divergence.mx_node,
        ...                       report.first_divergence.torch_node, seeded_inputs(shapes, dtypes, mapping, 0))
        ''
    """
    chain = _mx_chain(source.document, mx_node, source.input_names)
    if chain is None:
        return ""
    data, ops, expression = chain
    raw = inputs[source.input_names.index(data)]
    received = _torch_input(model, torch_module, inputs)
    if received is None or received.shape != raw.shape or not np.issubdtype(raw.dtype, np.floating):
        return ""
    unchanged = np.allclose(received, raw, rtol=1e-6, atol=1e-6)
    if ops and unchanged:
        return (f"input scaling in MXNet only: MXNet's graph computes {expression} before {mx_node!r} (ops "
                f"{', '.join(ops)}), torch's {torch_module!r} receives the input unchanged; give the torch model "
                f"the same transform (or scaled data), or export the MXNet model without it")
    if not ops and not unchanged:
        scale, offset = np.polyfit(raw.astype(np.float64).ravel(), received.astype(np.float64).ravel(), 1)
        return (f"input scaling in torch only: torch's model transforms its input before {torch_module!r} (about "
                f"x * {scale:.6g} + {offset:.6g}), MXNet's {mx_node!r} takes {data!r} unchanged; feed MXNet the same "
                f"transform, or leave it out of the torch model")
    return ""


def _mx_chain(document: dict, mx_node: str, input_names: list):
    """(graph input, transform op names, expression) of the elementwise chain from a graph input to ``mx_node``'s
    data input (its first input); None when another op lies on the way."""
    nodes = document["nodes"]
    by_name = {node["name"]: node for node in nodes}
    if mx_node not in by_name or not by_name[mx_node]["inputs"]:
        return None
    ops, index = [], by_name[mx_node]["inputs"][0][0]
    while nodes[index]["op"] in TRANSFORM_OPS:
        ops.append(index)
        index = _data_input(nodes, nodes[index], input_names)
        if index is None:
            return None
    data = nodes[index]["name"]
    if nodes[index]["op"] != "null" or data not in input_names:
        return None
    expression = data
    for position in reversed(ops):
        expression = _applied(nodes, nodes[position], expression, input_names)
    return data, [nodes[i]["name"] for i in reversed(ops)], expression


def _is_parameter(node: dict, input_names: list) -> bool:
    """A variable that holds a value (a parameter, a constant), not one of the graph's data inputs."""
    return node["op"] == "null" and node["name"] not in input_names


def _data_input(nodes: list, node: dict, input_names: list):
    """The input of ``node`` that carries the data: its only one, or the one that is no parameter (None when both or
    neither are)."""
    entries = [entry[0] for entry in node["inputs"]]
    if len(entries) == 1:
        return entries[0]
    carrying = [i for i in entries if not _is_parameter(nodes[i], input_names)]
    return carrying[0] if len(carrying) == 1 else None


def _applied(nodes: list, node: dict, expression: str, input_names: list) -> str:
    """``expression`` through ``node``: the scalar from its attributes, or its other operand's name."""
    form = TRANSFORM_OPS[node["op"]]
    if "scalar" in node["op"]:
        return form.format(x=expression, s=node.get("attrs", {}).get("scalar", "?"))
    entries = [entry[0] for entry in node["inputs"]]
    other = next(nodes[i]["name"] for i in entries if _is_parameter(nodes[i], input_names))
    data_first = nodes[entries[0]]["name"] != other
    return (form if data_first else _REVERSED.get(form, form)).format(x=expression, s=other)


def _torch_input(model, module_path: str, inputs: list):
    """The first input ``module_path`` receives when ``model`` runs on ``inputs`` (eval mode, no gradients), numpy;
    None when it is not a module of the model or receives no tensor."""
    import torch
    module = dict(model.named_modules()).get(module_path)
    if module is None or isinstance(model, torch.jit.ScriptModule):
        return None
    found = []
    handle = module.register_forward_pre_hook(lambda _m, args: found.append(args[0].detach().clone())
                                              if args and torch.is_tensor(args[0]) and not found else None)
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(*torch_inputs(inputs))
    finally:
        handle.remove()
        model.train(was_training)
    return found[0].numpy() if found else None
