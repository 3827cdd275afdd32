"""Computations that two exporters write differently, brought to one form before matching.

Recurrent layers: an ONNX ``LSTM``/``GRU``/``RNN`` node reads its weights ``W``/``R``/``B`` through plumbing
(torch slices ``weight_ih_l0`` per gate and concatenates the slices; MXNet's export, through
``migrate.mapping.onnx_converters``, splits and concatenates ``l0_i2h_weight``). The plumbing differs; which named
tensor feeds which input does not. ``recurrent_nodes`` walks back from each input through the plumbing and gives
each named tensor its role in torch's words (``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``, with
``_reverse`` for the second direction); both sides store these tensors with the same shape and gate order
(LSTM i,f,g,o; GRU r,z,n), so the mapping needs no transform.
"""
from __future__ import annotations

__all__ = ["RECURRENT", "recurrent_nodes"]

RECURRENT = frozenset({"LSTM", "GRU", "RNN"})
_PLUMBING = frozenset({"Slice", "Split", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Transpose", "Identity",
                       "Cast", "Flatten"})
_SLOT_ROLES = {1: ("weight_ih",), 2: ("weight_hh",), 3: ("bias_ih", "bias_hh")}


def recurrent_nodes(nodes, producer, params) -> tuple[dict, set]:
    """Return the recurrent nodes' tensors by role and the indices of the plumbing nodes that feed their weights.

    Args:
        nodes: the graph's nodes (``op_type``, ``input``, ``output``), in file order.
        producer: value name -> index of the node that writes it.
        params: the names that are parameters.

    Returns:
        ``({node index: {role: parameter name}}, plumbing node indices)``. The plumbing is not a parameter node
        of its own (torch's gate ``Slice`` of ``weight_ih_l0`` would otherwise look like one).

    Example:
        >>> roles, plumbing = recurrent_nodes(nodes, producer, params)  # doctest: +SKIP
        >>> roles[12]
        {'weight_ih': 'weight_ih_l0', 'weight_hh': 'weight_hh_l0', 'bias_ih': 'bias_ih_l0', 'bias_hh': 'bias_hh_l0'}
    """
    roles_by_node, plumbing = {}, set()
    for i, node in enumerate(nodes):
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
