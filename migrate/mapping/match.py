"""Pair the parameter nodes of two graphs and check that every pair computes the same thing.

Pairing never looks at names or declaration order: both graphs are put in canonical order (``migrate.mapping.graph``);
equal label sequences zip, otherwise a global alignment (Needleman-Wunsch over the part between the common prefix
and suffix) pairs what is compatible and leaves the rest unmatched.
"""
from __future__ import annotations

import math

from migrate.mapping.graph import ParamGraph, ParamNode, gc_paused
from migrate.mapping.table import NameMapping

__all__ = ["match_graphs", "align"]

_ATTR_DEFAULTS = {"Conv": {"group": 1, "auto_pad": "NOTSET"},
                  "Gemm": {"alpha": 1.0, "beta": 1.0, "transA": 0},
                  "BatchNormalization": {"epsilon": 1e-5, "momentum": 0.9, "fix_gamma": 0},
                  "Gather": {"axis": 0},
                  "LSTM": {"direction": "forward", "layout": 0, "input_forget": 0},
                  "GRU": {"direction": "forward", "layout": 0, "linear_before_reset": 0},
                  "RNN": {"direction": "forward", "layout": 0},
                  "LayerNormalization": {"axis": -1, "stash_type": 1}}
_IGNORED_ATTRS = {"training_mode", "transB", "kernel_shape", "spatial"}


@gc_paused
def match_graphs(mx_graph: ParamGraph, torch_graph: ParamGraph, torch_keys=None) -> NameMapping:
    """Return the ``NameMapping`` between two parameter graphs (see ``name_mapping``).

    Args:
        mx_graph: the MXNet side, from ``param_graph``.
        torch_graph: the torch side, from ``param_graph``.
        torch_keys: every torch ``state_dict`` key (keys absent from the graph are reported or defaulted).

    Returns:
        A ``NameMapping``.

    Examples:
        >>> m = match_graphs(param_graph(mx_onnx, mx_names), param_graph(torch_onnx, keys), keys)  # doctest: +SKIP
    """
    acc = _Acc()
    pairs = align([n.label for n in mx_graph.nodes], [n.label for n in torch_graph.nodes])
    by_index = {i: j for i, j in pairs if i is not None and j is not None}
    for i, j in pairs:
        a = mx_graph.nodes[i] if i is not None else None
        b = torch_graph.nodes[j] if j is not None else None
        if a is None or b is None:
            _unpaired(acc, a, b)
        else:
            _pair(acc, a, b, mx_graph, torch_graph, by_index)
    acc.unmatched_mx += [n for n in mx_graph.unused if n not in acc.entries]
    mapped_torch = {e["torch"] for e in acc.entries.values()} | set(acc.defaults)
    for key in list(torch_graph.unused) + [k for k in (torch_keys or []) if k not in torch_graph.params]:
        if key in mapped_torch or key in acc.unmatched_torch:
            continue
        if key.endswith("num_batches_tracked"):
            acc.defaults[key] = "kept from the torch model (torch-only BatchNorm counter)"
        else:
            acc.unmatched_torch.append(key)
            acc.differences.append(f"torch tensor {key!r} is not used by the exported graph and has no MXNet source")
    return NameMapping(acc.entries, acc.unmatched_mx, acc.unmatched_torch, acc.differences, acc.defaults)


class _Acc:
    def __init__(self):
        self.entries, self.defaults = {}, {}
        self.unmatched_mx, self.unmatched_torch, self.differences = [], [], []


def align(mx_labels: list, torch_labels: list) -> list[tuple[int | None, int | None]]:
    """Return index pairs ``(i, j)`` aligning two label sequences; None marks a node with no counterpart.

    Equal sequences zip in O(n). Otherwise the common prefix and suffix zip and the middle is aligned globally
    (Needleman-Wunsch: +2 for equal labels, -1 for a gap, pairs of unequal labels are not allowed).

    Args:
        mx_labels: labels of the MXNet parameter nodes in canonical order.
        torch_labels: labels of the torch parameter nodes in canonical order.

    Returns:
        A list of ``(i, j)`` in order, where ``i`` or ``j`` may be None.

    Examples:
        >>> align([("bn", 4), ("linear", 2, 4)], [("bn", 4), ("bn", 4), ("linear", 2, 4)])
        [(0, 0), (None, 1), (1, 2)]
    """
    n, m = len(mx_labels), len(torch_labels)
    lo = 0
    while lo < min(n, m) and mx_labels[lo] == torch_labels[lo]:
        lo += 1
    hi = 0
    while hi < min(n, m) - lo and mx_labels[n - 1 - hi] == torch_labels[m - 1 - hi]:
        hi += 1
    middle = _needleman_wunsch(mx_labels[lo:n - hi], torch_labels[lo:m - hi])
    return ([(k, k) for k in range(lo)] + [(i + lo if i is not None else None, j + lo if j is not None else None)
                                           for i, j in middle] + [(n - hi + k, m - hi + k) for k in range(hi)])


def _needleman_wunsch(a: list, b: list) -> list:
    n, m = len(a), len(b)
    if not n or not m:
        return [(i, None) for i in range(n)] + [(None, j) for j in range(m)]
    neg = -math.inf
    score = [[-(i + j) if i == 0 or j == 0 else neg for j in range(m + 1)] for i in range(n + 1)]
    for i in range(1, n + 1):
        row, prev, ai = score[i], score[i - 1], a[i - 1]
        for j in range(1, m + 1):
            diag = prev[j - 1] + 2 if ai == b[j - 1] else neg
            row[j] = max(diag, prev[j] - 1, row[j - 1] - 1)
    out, i, j = [], n, m
    while i or j:
        if i and j and a[i - 1] == b[j - 1] and score[i][j] == score[i - 1][j - 1] + 2:
            out.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i and score[i][j] == score[i - 1][j] - 1:
            out.append((i - 1, None))
            i -= 1
        else:
            out.append((None, j - 1))
            j -= 1
    return out[::-1]


def _node_name(p: ParamNode) -> str:
    return p.tensors.get("weight") or next(iter(p.tensors.values()))


def _unpaired(acc: _Acc, a: ParamNode | None, b: ParamNode | None) -> None:
    if a is not None:
        acc.unmatched_mx += list(a.tensors.values())
        acc.differences.append(f"MXNet {a.op} {_node_name(a)!r} {a.label} has no counterpart in the torch model")
    if b is not None:
        acc.unmatched_torch += list(b.tensors.values())
        acc.differences.append(f"torch {b.op} {_node_name(b)!r} {b.label} has no counterpart in the MXNet model")


def _pair(acc: _Acc, a: ParamNode, b: ParamNode, mx_graph, torch_graph, by_index) -> None:
    where = f"MXNet {a.op} {_node_name(a)!r} vs torch {b.op} {_node_name(b)!r}"
    acc.differences += [f"{where}: {d}" for d in _attr_differences(a, b)]
    if a.post != b.post:
        acc.differences.append(f"{where}: activation after the node {list(a.post)} vs {list(b.post)}")
    for role in sorted(set(a.tensors) | set(b.tensors)):
        if role in a.tensors and role in b.tensors:
            acc.entries[a.tensors[role]] = _entry(a, b, role, fold=False)
            if role == "weight" and _held_scale(a):
                acc.entries[a.tensors[role]]["held"] = 1.0
        elif role in b.tensors and role == "bias":
            acc.defaults[b.tensors[role]] = f"zeros (MXNet {_node_name(a)!r} has no bias)"
        elif role == "bias":
            _fold_bias(acc, a, b, mx_graph, torch_graph, by_index, where)
        elif role in a.tensors:
            acc.unmatched_mx.append(a.tensors[role])
            acc.differences.append(f"{where}: MXNet {role} {a.tensors[role]!r} has no torch counterpart")
        else:
            acc.unmatched_torch.append(b.tensors[role])
            acc.differences.append(f"{where}: torch {role} {b.tensors[role]!r} has no MXNet counterpart")


def _fold_bias(acc: _Acc, a, b, mx_graph, torch_graph, by_index, where) -> None:
    """An MXNet conv bias with no torch bias folds into the next BatchNorm's running mean (exact in eval)."""
    bn_mx = mx_graph.nodes[a.feeds] if a.feeds is not None else None
    bn_t = torch_graph.nodes[b.feeds] if b.feeds is not None else None
    if bn_mx and bn_t and bn_mx.kind == bn_t.kind == "bn" and by_index.get(a.feeds) == b.feeds:
        e = _entry(bn_mx, bn_t, "running_mean", fold=False)
        e.update(fold=True, mx_shape=tuple(a.shapes["bias"]), mx_node=a.name, steps=[])
        acc.entries[a.tensors["bias"]] = e
        return
    acc.unmatched_mx.append(a.tensors["bias"])
    acc.differences.append(f"{where}: MXNet bias {a.tensors['bias']!r} has no torch bias and no BatchNorm "
                           f"right after to fold it into; give the torch layer bias=True")


def _entry(a: ParamNode, b: ParamNode, role: str, fold: bool) -> dict:
    return {"torch": b.tensors[role], "steps": _steps(a, b, role), "fold": fold, "kind": a.kind, "mx_node": a.name,
            "torch_node": b.name, "mx_shape": tuple(a.shapes[role]), "torch_shape": tuple(b.shapes[role])}


def _steps(a: ParamNode, b: ParamNode, role: str) -> list:
    """Layout steps MXNet stored -> canonical -> torch stored, with identities dropped and reshapes merged."""
    if not a.layout.get(role) and not b.layout.get(role) and tuple(a.shapes[role]) == tuple(b.shapes[role]):
        return []  # both stored in the canonical layout (most tensors)
    steps, shape = [], tuple(a.shapes[role])
    for step, arg in a.layout.get(role, []):
        steps.append((step, tuple(arg)))
        shape = tuple(shape[k] for k in arg) if step == "transpose" else tuple(arg)
    back, tshape = [], tuple(b.shapes[role])
    for step, arg in b.layout.get(role, []):
        back.append((step, tuple(arg), tshape))
        tshape = tuple(tshape[k] for k in arg) if step == "transpose" else tuple(arg)
    if shape != tshape:
        steps.append(("reshape", tshape))
    for step, arg, before in reversed(back):
        inverse = tuple(int(k) for k in sorted(range(len(arg)), key=lambda k: arg[k]))
        steps.append(("transpose", inverse) if step == "transpose" else ("reshape", before))
    return _simplify(steps, tuple(a.shapes[role]))


def _simplify(steps: list, shape: tuple) -> list:
    out, shapes = [], [tuple(shape)]
    for step, arg in steps:
        if step == "transpose" and out and out[-1][0] == "transpose":
            arg = tuple(out[-1][1][k] for k in arg)
            out.pop()
            shapes.pop()
        if step == "transpose" and arg == tuple(range(len(arg))):
            continue
        if step == "reshape" and out and out[-1][0] == "reshape":
            out.pop()
            shapes.pop()
        new = tuple(shapes[-1][k] for k in arg) if step == "transpose" else tuple(arg)
        if step == "reshape" and new == shapes[-1]:
            continue
        out.append((step, arg))
        shapes.append(new)
    return out


def _held_scale(a: ParamNode) -> bool:
    """The MXNet node is a BatchNorm whose scale MXNet holds at 1 (``fix_gamma=True``): its torch counterpart's
    scale, trainable or held, pairs with it and is held at 1 (an MXNet scale that trains never pairs with a held
    one: that is an attribute difference)."""
    return a.op == "BatchNormalization" and a.attrs.get("fix_gamma", 0) == 1


def _attr_differences(a: ParamNode, b: ParamNode) -> list[str]:
    if a.op == b.op:
        return _compare_attrs(a.op, a.attrs, dict(b.attrs, fix_gamma=1) if _held_scale(a) else b.attrs)
    conv = a if a.op == "Conv" else b if b.op == "Conv" else None
    diffs = []
    if conv is not None:
        rank = len(conv.shapes["weight"]) - 2
        want = {"strides": (1,) * rank, "pads": (0,) * (2 * rank), "dilations": (1,) * rank}
        side = "MXNet" if conv is a else "torch"
        diffs += [f"{side} 1x1 Conv has {k}={tuple(conv.attrs[k])}, a linear layer needs {v}"
                  for k, v in want.items() if k in conv.attrs and tuple(conv.attrs[k]) != v]
    gemm = [p for p in (a, b) if p.op == "Gemm"]
    diffs += [d for p in gemm for d in _compare_attrs("Gemm", p.attrs, {})]
    return diffs


def _compare_attrs(op: str, left: dict, right: dict) -> list[str]:
    defaults = _ATTR_DEFAULTS.get(op, {})
    diffs = []
    for key in sorted((set(left) | set(right) | set(defaults)) - _IGNORED_ATTRS):
        x, y = left.get(key, defaults.get(key)), right.get(key, defaults.get(key))
        if x is None and op == "Conv":
            continue
        if not _same(x, y):
            diffs.append(f"{key} {_shown(x)} vs {_shown(y)}")
    return diffs


def _same(x, y) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        return x is not None and y is not None and math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9)
    return x == y


def _shown(v):
    """A float attribute as people write it (ONNX stores float32: 1e-12 reads 9.999999960041972e-13 unrounded)."""
    return f"{v:.6g}" if isinstance(v, float) else v
