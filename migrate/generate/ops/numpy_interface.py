"""Ops of MXNet 1.9.1's numpy interface (``_np_*``) that legacy Gluon code records: ``_np_cumsum``, which
``F.cumsum`` writes (GluonTS's quantile outputs and temporal point processes call it; GluonTS 0.17's and GluonNLP
0.10's other ops are the legacy ones).
"""
from __future__ import annotations

from migrate.generate.registry import OpNode, register

__all__ = []


@register("_np_cumsum")
def _np_cumsum(node: OpNode) -> str:
    """Running sums along ``axis`` (None: over the flattened input), in the node's ``dtype`` or else the input's
    (torch would sum integers as int64)."""
    x, axis = node.inputs[0], node.attr("axis")
    dtype = f"{x}.dtype" if node.attr("dtype") in (None, "None") else node.torch_dtype()
    return f"{x}.reshape(-1).cumsum(0, dtype={dtype})" if axis is None else f"{x}.cumsum({int(axis)}, dtype={dtype})"
