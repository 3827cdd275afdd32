"""The nodes a comparison pairs and what it feeds them: which MXNet op pairs with which torch module, the seeded
inputs both models run on, and how two outputs differ. ``verify`` (eval mode) and ``migrate.check`` (a training step)
read them.

Examples:
    >>> node_pairs(source, mapping)[0]  # doctest: +SKIP
    ('resnetv10_conv0_fwd', 'conv1', None)
"""
from __future__ import annotations

import itertools

import numpy as np

from migrate.mapping.table import NameMapping
from migrate.module_outputs import node_sites

__all__ = ["max_diff", "node_pairs", "seeded_inputs", "without_folded_bias"]


def seeded_inputs(shapes, dtypes, mapping: NameMapping, seed: int) -> list:
    """Seeded numpy inputs: standard normal floats; integers in ``[0, rows of the smallest embedding)`` (10 without
    one), so token ids index every embedding of the model.

    Examples:
        >>> [x.shape for x in seeded_inputs([(2, 3)], [np.dtype("float32")], mapping, seed=0)]  # doctest: +SKIP
        [(2, 3)]
    """
    rng = np.random.default_rng(seed)
    vocab = [mapping.entry(k)["mx_shape"][0] for k in mapping if mapping.entry(k).get("kind") == "embed"]
    high = min(vocab) if vocab else 10
    return [rng.integers(0, high, size=s).astype(d) if np.issubdtype(d, np.integer)
            else rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]


def node_pairs(source, mapping: NameMapping, model=None) -> list:
    """(MXNet op name, torch module path, folded bias or None) per matched node, in the mapping's canonical order:
    the op that first reads a mapped parameter (``MxSource.parameter_users``) and the module holding its torch key.

    With the torch ``model``, a node whose parameter is read by the model's code rather than a layer is named by the
    parameter's key instead of a module path (``module_outputs.node_sites``): ``captured_module_outputs`` reads its
    output at the statement reading it.

    Examples:
        >>> node_pairs(source, mapping)[0]  # doctest: +SKIP
        ('resnetv10_conv0_fwd', 'conv1', None)
    """
    consumer = {name: node["name"] for name, (node, _) in source.parameter_users().items()}
    folded = {consumer.get(k): k for k in mapping if mapping.entry(k).get("fold")}
    sites = node_sites(model, [mapping.entry(k)["torch"] for k in mapping]) if model is not None else {}
    seen, out = set(), []
    for name in mapping:
        e = mapping.entry(name)
        if e.get("fold") or consumer.get(name) is None:
            continue
        op, module = consumer[name], e["torch"].rsplit(".", 1)[0] if "." in e["torch"] else ""
        if (op, module) in seen:
            continue
        seen.add((op, module))
        out.append((op, sites.get(e["torch"], module), folded.get(op)))
    return out


def max_diff(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(largest absolute difference, largest ``|a|``) of two outputs; ``b`` is read in ``a``'s shape (reshaped, or
    the closest axis permutation: GluonNLP's encoder runs time-major where HF runs batch-major); ``inf`` when the
    sizes differ.

    Examples:
        >>> max_diff(np.ones((2, 3)), np.ones((3, 2)).T)
        (0.0, 1.0)
    """
    if a.shape != b.shape:
        if a.size != b.size:
            return float("inf"), 0.0
        return min(max_diff(a, c) for c in _layouts(b, a.shape))
    scale = float(np.max(np.abs(a))) if a.size else 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0, scale


def _layouts(b: np.ndarray, shape: tuple) -> list:
    """``b`` read in ``shape``: reshaped, and as each axis permutation with that shape."""
    out = [b.reshape(shape)]
    if b.ndim == len(shape) and b.ndim <= 4:
        out += [b.transpose(p) for p in itertools.permutations(range(b.ndim))
                if tuple(b.shape[k] for k in p) == tuple(shape) and p != tuple(range(b.ndim))]
    return out


def without_folded_bias(output, bias):
    """The output of an MXNet conv whose bias was folded into the next BatchNorm, without that bias (as is when
    there is none)."""
    if output is None or bias is None:
        return output
    b = bias.asnumpy() if hasattr(bias, "asnumpy") else np.asarray(bias)
    return output - b.reshape((1, -1) + (1,) * (output.ndim - 2))
