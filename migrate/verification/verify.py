"""Numeric verification of a ``NameMapping``: copy the weights, run both models, compare every matched node.

The MXNet side is whatever the source runs in MXNet's place (``MxSource.node_outputs``): MXNet itself, or the graph's
torch translation where the files were read without MXNet. Nodes are paired by ``nodes.node_pairs``; a node the MXNet
side cannot show on its own is skipped and named; the final outputs are always compared.
"""
from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field

import numpy as np

from migrate import arguments
from migrate.mapping.table import NameMapping
from migrate.mapping.weights import load_mxnet_weights
from migrate.module_outputs import captured_module_outputs, torch_inputs
from migrate.source.reading import model_source
from migrate.verification.nodes import max_diff, node_pairs, seeded_inputs, without_folded_bias

__all__ = ["verify", "VerifyReport", "NodeCheck", "MEMORY_BUDGET"]

MEMORY_BUDGET = 1 << 30
"""Default bytes of node outputs ``verify`` holds at once (both frameworks together); more means more passes."""
_HELD_BYTES = 3 * 4  # per output element during a pass: MXNet's array, its numpy copy and torch's copy, float32


@dataclass
class NodeCheck:
    """The comparison of one matched node's outputs.

    Attributes:
        mx_node: the MXNet op name (its output is ``<mx_node>_output``).
        torch_node: the torch module path whose forward output is compared.
        max_abs_diff: largest absolute difference (None when the node could not be compared).
        scale: largest absolute MXNet output value; the limit is ``atol * max(1, scale)``.
        ok: within the limit (True for skipped nodes: see ``skipped``).
        note: why a node was skipped, or a shape difference.
    """

    mx_node: str
    torch_node: str
    max_abs_diff: float | None
    scale: float
    ok: bool
    note: str = ""

    @property
    def skipped(self) -> bool:
        """True when the node could not be compared (its ``ok`` says nothing then)."""
        return self.max_abs_diff is None and self.note.startswith("skipped")


@dataclass
class VerifyReport:
    """What ``verify`` measured.

    Attributes:
        ok: every compared node and the final output are within tolerance.
        max_abs_diff: largest absolute difference of the final output(s).
        atol: the tolerance used.
        rows: one ``NodeCheck`` per matched node, in canonical (topological) order.
        first_divergence: the first row out of tolerance, or None.
        passes: forward passes of each model: 1, or more when the node outputs exceed the memory budget (the
            nodes are then compared layer by layer, a budget's worth per pass, on the same input).
        output_bytes: estimated bytes of all compared node outputs held at once (both frameworks).
    """

    ok: bool
    max_abs_diff: float
    atol: float
    rows: list = field(default_factory=list)
    first_divergence: NodeCheck | None = None
    passes: int = 1
    output_bytes: int = 0

    @property
    def skipped(self) -> list:
        """The rows that could not be compared (``ok`` rests on the others and the final output)."""
        return [row for row in self.rows if row.skipped]

    @property
    def verified(self) -> bool:
        """``ok`` and every matched node compared: what ``migrate`` reports as "verified"."""
        return self.ok and not self.skipped

    def to_dict(self) -> dict:
        """Return the report as a JSON-ready dict (each row with ``skipped``; ``compared``/``skipped`` counts)."""
        document = asdict(self)
        for row, data in zip(self.rows, document["rows"]):
            data["skipped"] = row.skipped
        document.update(compared=len(self.rows) - len(self.skipped), skipped=len(self.skipped))
        return document

    def __str__(self) -> str:
        w0 = max([len(r.mx_node) for r in self.rows] + [10])
        w1 = max([len(r.torch_node) for r in self.rows] + [10])
        lines = [f"{'MXNet node':<{w0}}  {'torch module':<{w1}}  {'max abs diff':>12}  result"]
        for r in self.rows:
            diff = "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.3g}"
            result = "skipped" if r.skipped else "ok" if r.ok else "DIVERGES"
            lines.append(f"{r.mx_node:<{w0}}  {r.torch_node:<{w1}}  {diff:>12}  {result}"
                         f"{'  ' + r.note if r.note else ''}")
        first = self.first_divergence
        lines.append(f"final output: max abs diff {self.max_abs_diff:.3g} (atol {self.atol:g}): "
                     f"{'OK' if self.ok else 'NOT EQUIVALENT'}")
        if self.passes > 1:
            lines.append(f"compared layer by layer in {self.passes} passes: node outputs "
                         f"{self.output_bytes / 2 ** 30:.2f} GiB exceed the memory budget")
        if self.skipped:
            lines.append(f"{len(self.skipped)} of {len(self.rows)} matched nodes skipped (not compared): "
                         f"{', '.join(r.mx_node for r in self.skipped[:10])}")
        if first is not None:
            lines.append(f"first divergence: MXNet {first.mx_node!r} vs torch {first.torch_node!r} "
                         f"({first.note or f'max abs diff {first.max_abs_diff:.3g}'})")
        return "\n".join(lines)

    def to_json(self) -> str:
        """Return ``to_dict()`` as JSON text."""
        return json.dumps(self.to_dict(), indent=1)


def verify(mx_model, torch_model, mapping: NameMapping, input_shapes, *, atol=1e-5, seed=0,
           input_dtypes=None, in_place=False, memory_budget=MEMORY_BUDGET, progress=None) -> VerifyReport:
    """Copy the MXNet weights into (a copy of) the torch model and compare outputs node by node.

    Both models run in eval mode on the same seeded random input. MXNet files read without MXNet (not installed, or
    ``MIGRATE_WITHOUT_MXNET=1``) are compared with the graph's torch translation instead (``MxSource.node_outputs``).
    A node passes when its largest absolute difference is at most ``atol * max(1, largest |MXNet output|)``; the final
    output uses the same rule. When the outputs of all matched nodes would take more than ``memory_budget`` bytes,
    the nodes are compared layer by layer: each pass runs both models and keeps only the next budget's worth of
    outputs (``report.passes``; the translation's outputs are held at once).

    Args:
        mx_model: Gluon ``HybridBlock``, ``(symbol_json_path, params_path)`` or an ``MxSource``.
        torch_model: the torch module: left untouched (a deep copy receives the weights) unless ``in_place``.
        mapping: from ``name_mapping``.
        input_shapes: one shape or a list of shapes.
        atol: absolute tolerance (relative above magnitude 1).
        seed: seed of the random input (normal floats; integers in ``[0, smallest embedding rows)``).
        input_dtypes: None (float32), one dtype, or one per input.
        in_place: load the MXNet weights into ``torch_model`` itself, tensor by tensor, and keep them there (no
            second copy of the model: for models near the memory limit; ``migrate all`` does this).
        memory_budget: bytes of node outputs held at once, both frameworks together.
        progress: optional callable ``progress(n)`` called with the number of nodes compared after each pass.

    Returns:
        A ``VerifyReport``.

    Raises:
        MappingError, WeightShapeError: ``mapping`` is not a name -> name mapping, or the weights cannot be copied by
            it.
        InputShapeError: the shapes are malformed, or a model rejects them.
        ModelTypeError: ``torch_model`` is not a ``torch.nn.Module`` instance.
        ArgumentError: ``atol`` is not a finite number >= 0, or ``in_place`` is not a bool.
        UnsupportedOpError: read without MXNet, the graph has an op with no translation (names it and the node).

    Examples:
        >>> report = verify(net, torchvision.models.resnet18(), mapping, (1, 3, 64, 64))  # doctest: +SKIP
        >>> report.ok, report.max_abs_diff < 1e-5
        (True, True)
    """
    arguments.torch_model(torch_model, "verify(torch_model)")
    arguments.name_table(mapping, "verify(mapping)")
    atol = arguments.tolerance(atol, "verify(atol)")
    shapes, dtypes = arguments.normalize_shapes(input_shapes, input_dtypes)
    source = model_source(mx_model, shapes, dtypes)
    model = torch_model if arguments.flag(in_place, "verify(in_place=...)") else copy.deepcopy(torch_model)
    reference = source.node_outputs(shapes, dtypes, mapping)
    load_mxnet_weights(model, source.params, mapping)
    was_training = model.training
    model.eval()
    try:
        return _compare_all(source, reference, model, mapping, shapes, dtypes, atol, seed, memory_budget, progress)
    finally:
        model.train(was_training)


def _compare_all(source, reference, model, mapping, shapes, dtypes, atol, seed, budget, progress) -> VerifyReport:
    inputs = seeded_inputs(shapes, dtypes, mapping, seed)
    nodes = node_pairs(source, mapping, model)
    heads = {source.document["nodes"][h[0]]["name"] for h in source.document["heads"]}
    sizes = {op: _HELD_BYTES * n for op, n in reference.output_sizes([n[0] for n in nodes]).items()}
    passes = _passes(nodes, sizes, budget)
    rows, mx_final, torch_final = [], [], []
    for index, part in enumerate(passes):
        mx_outs, mx_final = reference.run(inputs, part, with_final=index == len(passes) - 1)
        torch_outs, torch_final = _run_torch(model, inputs, [n[1] for n in part])
        rows += [_row(reference, _skip_note(reference, mx_node, t_node, heads), (mx_node, t_node), mx_out,
                      torch_outs.get(t_node), source.params.get(bias), bias, atol)
                 for (mx_node, t_node, bias), mx_out in zip(part, mx_outs)]
        del mx_outs, torch_outs
        if progress is not None:
            progress(len(part))
    final = [max_diff(a, b) for a, b in zip(mx_final, torch_final)]
    diff = max((d for d, _ in final), default=float("inf")) if len(mx_final) == len(torch_final) else float("inf")
    final_ok = all(d <= atol * max(1.0, s) for d, s in final) and len(mx_final) == len(torch_final)
    first = next((r for r in rows if not r.ok), None)
    return VerifyReport(final_ok and first is None, float(diff), atol, rows, first, len(passes),
                        sum(sizes.values()))


def _passes(nodes, sizes, budget) -> list:
    """``nodes`` in consecutive parts whose outputs fit ``budget`` bytes (a node larger than it gets a pass alone)."""
    parts, part, held = [], [], 0
    for node in nodes:
        need = sizes.get(node[0], 0)
        if part and held + need > budget:
            parts.append(part)
            part, held = [], 0
        part.append(node)
        held += need
    return parts + [part] if part or not parts else parts


def _run_torch(model, inputs, modules) -> tuple[dict, list]:
    import torch
    with captured_module_outputs(model, modules) as found, torch.no_grad():
        final = model(*torch_inputs(inputs))
    final = list(final) if isinstance(final, (tuple, list)) else [final]
    as_np = {k: v.detach().numpy() for k, v in found.items() if isinstance(v, torch.Tensor)}
    return as_np, [f.detach().numpy() for f in final]


def _skip_note(reference, mx_node: str, torch_node: str, heads: set) -> str | None:
    """Why a pair is not compared: the MXNet side cannot show the node alone, or the torch model holds the parameter
    itself (its module path is ``""``: its output is the model's, comparable only with a graph output)."""
    if torch_node == "" and mx_node not in heads:
        return "skipped: the torch model holds the parameter itself, no layer of its own (checked at the final output)"
    return reference.skip_note(mx_node)


def _row(reference, skipped, pair, a, b, bias, folded_bias, atol) -> NodeCheck:
    """The comparison of one pair ``(MXNet node, torch module)``: skipped where ``skipped`` says why (``_skip_note``)
    or either output is missing, else within ``atol`` (relative above magnitude 1)."""
    mx_node, torch_node = pair
    if skipped is not None:
        return NodeCheck(mx_node, torch_node, None, 0.0, True, skipped)
    if a is None or b is None:
        side = reference.missing if a is None else "torch module output not captured"
        return NodeCheck(mx_node, torch_node, None, 0.0, True, f"skipped: {side}")
    a = without_folded_bias(a, bias)
    note = f"compared without {folded_bias!r} (folded into the next BatchNorm)" if folded_bias else ""
    diff, scale = max_diff(a, b)
    if not np.isfinite(diff):
        return NodeCheck(mx_node, torch_node, None, scale, False,
                         f"output shapes differ: {a.shape} vs {tuple(b.shape)}")
    return NodeCheck(mx_node, torch_node, diff, scale, diff <= atol * max(1.0, scale), note)
