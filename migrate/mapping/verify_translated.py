"""``verify`` without MXNet: a torch model against the MXNet graph's own torch translation, node by node.

Where MXNet is not installed (or ``MIGRATE_WITHOUT_MXNET=1``), the MXNet model cannot be run; its graph read from
``symbol.json`` is translated to torch by the translators ``generate_torch`` uses (``translated_module``, tested
against MXNet op by op), with MXNet's weights. The user's model receives the weights by the mapping, both run in eval
mode on the same seeded input, and each matched layer's output and the final outputs are compared as ``verify``
compares them with MXNet (a node passes within ``atol * max(1, largest |output|)``). All node outputs are held at
once (one pass).

Examples:
    >>> report = verify_translated(read_mxnet_files(*files), twin, mapping, (2, 3, 32, 32))  # doctest: +SKIP
    >>> report.ok  # doctest: +SKIP
    True
"""
from __future__ import annotations

import numpy as np

from migrate.generate.generator import translated_module
from migrate.mapping.export import MxSource, normalize_shapes
from migrate.mapping.symbol_graph import parameter_users, symbol_document
from migrate.mapping.node_outputs import (captured_module_outputs, max_diff, seeded_inputs, torch_inputs,
                                          without_folded_bias)
from migrate.mapping.table import NameMapping
from migrate.mapping.verify import NodeCheck, VerifyReport
from migrate.mapping.weights import load_mxnet_weights

__all__ = ["verify_translated"]


def verify_translated(source: MxSource, torch_model, mapping: NameMapping, input_shapes, *, atol=1e-5, seed=0,
                      input_dtypes=None) -> VerifyReport:
    """Load MXNet's weights into ``torch_model`` (in place) by ``mapping`` and compare it with the translated graph.

    Args:
        source: the MXNet model (``file_source.read_mxnet_files``).
        torch_model: the user's torch module; receives the weights, tensor by tensor.
        mapping: from ``name_mapping``.
        input_shapes: one shape or a list of shapes.
        atol: absolute tolerance (relative above magnitude 1).
        seed: seed of the random input.
        input_dtypes: None (float32), one dtype, or one per input.

    Returns:
        A ``VerifyReport`` whose rows pair each MXNet node (by its graph name) with the torch module; a node no layer
        of the translation computes (parameters of several blocks, or read by function calls) is skipped.

    Raises:
        UnsupportedOpError: the graph has an op with no translation (names it and the node).
        InputShapeError: the shapes do not fit the graph.
        MappingError, WeightShapeError: the weights cannot be copied by ``mapping``.

    Examples:
        >>> twin = torchvision.models.resnet18()  # doctest: +SKIP
        >>> verify_translated(source, twin, mapping, (2, 3, 64, 64)).ok  # doctest: +SKIP
        True
    """
    import torch
    shapes, dtypes = normalize_shapes(input_shapes, input_dtypes)
    reference = translated_module(source, shapes, dtypes).eval()
    load_mxnet_weights(torch_model, source.params, mapping)
    pairs = _node_pairs(source, mapping, reference.MXNET_NAMES)
    inputs = torch_inputs(seeded_inputs(shapes, dtypes, mapping, seed))
    was_training = torch_model.training
    try:
        with torch.no_grad(), captured_module_outputs(reference, [p[2] for p in pairs]) as mx_outs, \
                captured_module_outputs(torch_model.eval(), [p[1] for p in pairs]) as torch_outs:
            mx_final, torch_final = _listed(reference(*inputs)), _listed(torch_model(*inputs))
    finally:
        torch_model.train(was_training)
    rows = [_compare(op, module, _numpy(mx_outs.get(owner)), _numpy(torch_outs.get(module)), source, bias, atol)
            for op, module, owner, bias in pairs]
    final = [max_diff(a.numpy(), b.numpy()) for a, b in zip(mx_final, torch_final)]
    same_count = len(mx_final) == len(torch_final)
    diff = max((d for d, _ in final), default=float("inf")) if same_count else float("inf")
    final_ok = same_count and all(d <= atol * max(1.0, s) for d, s in final)
    first = next((r for r in rows if not r.ok), None)
    return VerifyReport(final_ok and first is None, float(diff), atol, rows, first, 1, 0)


def _node_pairs(source: MxSource, mapping: NameMapping, mx_names: dict) -> list:
    """(MXNet node name, torch module path, translated module path, folded bias or None) per matched node."""
    consumer = {name: node["name"] for name, (node, _) in parameter_users(symbol_document(source.symbol),
                                                                           source.params).items()}
    folded = {consumer.get(k): k for k in mapping if mapping.entry(k).get("fold")}
    seen, out = set(), []
    for name in mapping:
        entry = mapping.entry(name)
        if entry.get("fold") or name not in consumer or name not in mx_names:
            continue
        op, module = consumer[name], entry["torch"].rsplit(".", 1)[0] if "." in entry["torch"] else ""
        if (op, module) not in seen:
            seen.add((op, module))
            owner = mx_names[name].rsplit(".", 1)[0] if "." in mx_names[name] else ""
            out.append((op, module, owner, folded.get(op)))
    return out


def _compare(op, module, a, b, source, folded_bias, atol) -> NodeCheck:
    if a is None or b is None:
        side = "no layer of the translation computes it" if a is None else "torch module output not captured"
        return NodeCheck(op, module, None, 0.0, True, f"skipped: {side}")
    a = without_folded_bias(a, source.params.get(folded_bias))
    note = f"compared without {folded_bias!r} (folded into the next BatchNorm)" if folded_bias else ""
    diff, scale = max_diff(a, b)
    if not np.isfinite(diff):
        return NodeCheck(op, module, None, scale, False, f"output shapes differ: {a.shape} vs {tuple(b.shape)}")
    return NodeCheck(op, module, diff, scale, diff <= atol * max(1.0, scale), note)


def _listed(result) -> list:
    return [t.detach() for t in (result if isinstance(result, (tuple, list)) else [result])]


def _numpy(value):
    import torch
    return value.detach().numpy() if isinstance(value, torch.Tensor) else None
