"""The likely cause of a difference ``check_training`` found, recognised from the two models, the settings, the
optimizers and the values around the step; each names both values.

One recognizer per pattern; ``RECOGNIZERS`` lists them per kind of row, tried in order (the first that recognises
the row names its cause). Adding a pattern is one function and one entry.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from migrate.check.rounding import NOT_FINITE, non_finite

__all__ = ["Evidence", "RECOGNIZERS", "likely_cause"]

_EPS_DEFAULT = {"BatchNorm": 1e-3, "LayerNorm": 1e-5, "InstanceNorm": 1e-3, "GroupNorm": 1e-5}
"""MXNet's default ``eps`` of each normalisation op (Gluon's BatchNorm block passes 1e-5 explicitly)."""
_AVG_POOLS = (torch.nn.AvgPool1d, torch.nn.AvgPool2d, torch.nn.AvgPool3d)
_BATCH_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm)


@dataclass
class Evidence:
    """What the recognizers read; ``check_training`` fills the step's values as it goes.

    Attributes:
        symbol: MXNet's (dropout-free) symbol.
        modules: torch module path -> module, of the torch copy that trains.
        mapping, settings: the ``NameMapping`` and the settings document (or None).
        batch: the batch size B.
        matched_ops: the MXNet ops that have a torch counterpart.
        loss: the ``BatchLoss``; losses: step -> (MXNet sum, torch value, both times their rescale_grad).
        norm_counts: MXNet op -> values per channel of its output (BatchNorm's n).
        gradients: MXNet name -> (MXNet, torch) gradient times each rescale_grad, torch layout (step 1).
        step: the step whose update is examined; mx_before/mx_after (MXNet names) and torch_before/torch_after
            (torch keys): numpy values around it; mx_gradients: MXNet's raw gradients of that step; mx_lrs,
            torch_lrs: the learning rate each side used.
        torch_side: the ``TorchTraining``; mx_optimizer: MXNet's optimizer (None without settings).
        inputs: the batch (numpy arrays).
    """

    symbol: object
    modules: dict
    mapping: object
    settings: dict | None
    batch: int
    matched_ops: set
    loss: object = None
    losses: dict = field(default_factory=dict)
    norm_counts: dict = field(default_factory=dict)
    gradients: dict = field(default_factory=dict)
    step: int = 1
    mx_before: dict = field(default_factory=dict)
    mx_after: dict = field(default_factory=dict)
    torch_before: dict = field(default_factory=dict)
    torch_after: dict = field(default_factory=dict)
    mx_gradients: dict = field(default_factory=dict)
    mx_lrs: dict = field(default_factory=dict)
    torch_lrs: dict = field(default_factory=dict)
    torch_side: object = None
    mx_optimizer: object = None
    inputs: list = field(default_factory=list)

    def __post_init__(self):
        document = json.loads(self.symbol.tojson())
        self.nodes, self.heads = document["nodes"], document["heads"]
        self.by_name = {node["name"]: node for node in self.nodes}
        self.cache = {}  # what recognizers measure once (the gradients' ratios, the slopes at step 1)

    def attrs(self, op: str) -> dict:
        """The attributes of MXNet op ``op`` (empty when unknown)."""
        return self.by_name.get(op, {}).get("attrs", {})

    def module_of(self, key: str):
        """The torch module that holds state_dict key ``key`` (or is named ``key``), or None."""
        return self.modules.get(key) if key in self.modules else self.modules.get(key.rsplit(".", 1)[0])


def likely_cause(row, evidence: Evidence) -> str:
    """The cause of ``row``'s difference that the first matching recognizer names, or ``""``.

    Examples:
        >>> likely_cause(report.first_divergence, evidence)  # doctest: +SKIP
        'eps: MXNet BatchNorm ...'
    """
    for recognize in RECOGNIZERS.get(row.kind, ()):
        found = recognize(row, evidence)
        if found:
            return found
    return ""


# ---------------------------------------------------------------- any row


def _not_finite(row, ev: Evidence) -> str | None:
    """NaN or inf in a compared tensor: traced to the weights, the optimizer states, the batch or the labels that
    hold them, else named as arising at this tensor."""
    if not row.note.startswith(NOT_FINITE):
        return None
    counts = row.note[len(NOT_FINITE):].strip(" ()")
    sources = _non_finite_sources(ev)
    if sources:
        return (f"not finite: {', '.join(sources[:4])}{' ...' if len(sources) > 4 else ''} before step {ev.step}; "
                f"every tensor computed from them is NaN or inf on both sides ({counts}): give finite values (load "
                f"the weights again, check the data pipeline and the labels)")
    return (f"not finite: the values turn NaN or inf first here ({counts}) from finite weights, states, batch and "
            f"labels: the computation overflows or divides by zero at this step in "
            f"{'one framework' if 'MXNet: 0 NaN, 0 inf' in counts or 'torch: 0 NaN, 0 inf' in counts else 'both'} "
            f"(a float16 overflow, a log or sqrt of a negative, a learning rate that diverges); float64=True "
            f"(--float64) tells rounding from a real overflow")


def _non_finite_sources(ev: Evidence) -> list:
    """What holds NaN or inf before the step: MXNet parameters (by name), torch optimizer states (by key), inputs,
    labels; each with its counts."""
    found = [f"MXNet weight {name!r} ({non_finite(value)})" for name, value in ev.mx_before.items() if _bad(value)]
    states = ev.torch_side.optimizer.state if ev.torch_side is not None and ev.torch_side.optimizer else {}
    names = {id(p): k for k, p in (ev.torch_side.named.items() if ev.torch_side is not None else ())}
    found += [f"the optimizer state of {names.get(id(param), '?')!r} ({non_finite(value)})"
              for param, state in states.items() for value in state.values() if torch.is_tensor(value)
              and _bad(value.detach().cpu().numpy())]
    found += [f"input {i} of the batch ({non_finite(x)})" for i, x in enumerate(ev.inputs) if _bad(x)]
    if ev.loss is not None and ev.loss.criterion != "projection":
        found += [f"the labels ({non_finite(t)})" for t in ev.loss.targets if _bad(t)]
    return found


def _bad(value) -> bool:
    array = np.asarray(value)
    return np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all()


# ---------------------------------------------------------------- forward outputs


def _norm_eps(row, ev: Evidence) -> str | None:
    """A normalisation layer whose eps differs (BatchNorm, LayerNorm, InstanceNorm, GroupNorm)."""
    op = ev.by_name.get(row.name, {}).get("op")
    module = ev.modules.get(row.torch_name)
    if op not in _EPS_DEFAULT or getattr(module, "eps", None) is None:
        return None
    mx_eps = float(ev.attrs(row.name).get("eps", _EPS_DEFAULT[op]))
    if math.isclose(mx_eps, module.eps, rel_tol=1e-6):
        return None
    return (f"eps: MXNet {op} {row.name!r} uses eps {mx_eps:g}, torch {type(module).__name__} {row.torch_name!r} "
            f"eps {module.eps:g}; build the torch layer with eps={mx_eps:g}")


def _avg_pool_padding(row, ev: Evidence) -> str | None:
    """An average pooling over padding between the last matched node and this one that counts the padded zeros on
    one side only (``count_include_pad``)."""
    start = [row.name] if row.kind == "forward" else [ev.nodes[head[0]]["name"] for head in ev.heads]
    for op in _upstream(ev, start):
        attrs = ev.attrs(op)
        pads = [int(p) for p in attrs.get("pad", "()").strip("()[] ").split(",") if p.strip()]
        if attrs.get("pool_type") != "avg" or attrs.get("global_pool") in ("True", "1") or not any(pads):
            continue
        mx_counts = attrs.get("count_include_pad", "True") in ("True", "1", "true")
        for path, module in ev.modules.items():
            if isinstance(module, _AVG_POOLS) and _any(module.padding) and module.count_include_pad != mx_counts:
                return (f"average pooling over padding: MXNet {op!r} (pad {tuple(pads)}) has count_include_pad="
                        f"{mx_counts}, torch {path!r} count_include_pad={module.count_include_pad} (the padded zeros "
                        f"{'count' if mx_counts else 'do not count'} in MXNet's average); build the torch pooling "
                        f"with count_include_pad={mx_counts}")
    return None


def _upstream(ev: Evidence, start: list) -> list:
    """The MXNet ops feeding ``start`` (themselves included) back to the nearest matched ops, nearest first."""
    seen, order, todo = set(), [], list(start)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        node = ev.by_name[name]
        if node["op"] == "null":
            continue
        order.append(name)
        for source, *_ in node["inputs"]:
            upstream = ev.nodes[source]["name"]
            if upstream not in ev.matched_ops:
                todo.append(upstream)
    return order


def _any(value) -> bool:
    return any(value) if isinstance(value, (tuple, list)) else bool(value)


# ---------------------------------------------------------------- loss and gradients


def _batch_reduction(row, ev: Evidence) -> str | None:
    """torch's loss or gradient is 1/B of MXNet's (a mean loss still rescaled by 1/B) or B times (a sum not
    rescaled). A reduction scales every gradient alike: a gradient's ratio counts only where most gradients share it
    (the PReLU slopes of MXNet's gradient bug have ratio 1/slope, 4 for slopes 0.25, and the batch may be 4)."""
    if ev.batch < 2:
        return None
    b = ev.batch
    if row.kind == "loss":
        mx_value, torch_value, mx_scaled, torch_scaled = ev.losses[row.step]
        ratio = torch_scaled / mx_scaled if mx_scaled else math.nan
        shown = f"MXNet loss {mx_value:.6g} (sum) and torch's {torch_value:.6g} ({ev.loss.reduction})"
    elif row.name in ev.gradients:
        mx_grad, torch_grad = (g.astype(np.float64).ravel() for g in ev.gradients[row.name])
        norm = float(mx_grad @ mx_grad)
        ratio = _ratio(*ev.gradients[row.name])
        shared, counted = _sharing(ev, ratio)
        if shared < _SHARED * counted:
            return None
        shown = (f"gradient norms {math.sqrt(norm):.6g} (MXNet) and {float(np.linalg.norm(torch_grad)):.6g} "
                 f"(torch), the same ratio in {shared} of {counted} gradients")
    else:
        return None
    if math.isclose(ratio * b, 1.0, rel_tol=1e-3):
        return (f"mean vs sum: torch averages the loss over the batch of {b} and its optimizer still multiplies the "
                f"gradients by rescale_grad (MXNet sums the loss, then rescales by 1/{b} once): torch's values are "
                f"1/{b} of MXNet's ({shown}, each times its rescale_grad: ratio {ratio:.4g}); sum the loss over the "
                f"batch, or build the optimizer with rescale_grad=1.0")
    if math.isclose(ratio / b, 1.0, rel_tol=1e-3):
        return (f"sum vs mean: torch sums the loss over the batch of {b} but its optimizer does not rescale by 1/{b} "
                f"as MXNet's rescale_grad does: torch's values are {b} times MXNet's ({shown}; ratio {ratio:.4g}); "
                f"average the loss, or scale the gradients by 1/{b}")
    return None


_SHARED = 0.9
"""The part of the gradients (of norm above 1e-3 of the largest) that must share a ratio for a batch reduction."""


def _ratio(mx_grad: np.ndarray, torch_grad: np.ndarray) -> float:
    """torch's gradient over MXNet's as one number (the projection of one on the other); NaN for a zero gradient."""
    mx_grad, torch_grad = mx_grad.astype(np.float64).ravel(), torch_grad.astype(np.float64).ravel()
    norm = float(mx_grad @ mx_grad)
    return float(mx_grad @ torch_grad) / norm if norm else math.nan


def _sharing(ev: Evidence, ratio: float) -> tuple[int, int]:
    """(gradients whose ratio is ``ratio`` within 1e-3, gradients counted: those of norm above 1e-3 of the
    largest), measured once per step."""
    if "ratios" not in ev.cache:
        norms = {name: float(np.linalg.norm(g[0])) for name, g in ev.gradients.items()}
        largest = max(norms.values(), default=0.0)
        ev.cache["ratios"] = [_ratio(*ev.gradients[name]) for name, n in norms.items() if n > 1e-3 * largest]
    ratios = ev.cache["ratios"]
    return sum(math.isclose(r, ratio, rel_tol=1e-3) for r in ratios), len(ratios)


def _prelu_gradient_bug(row, ev: Evidence) -> str | None:
    """MXNet 1.9.1's PReLU slope gradient without MKLDNN (float64, or ``MXNET_MKLDNN_ENABLED=0``): a Module's (the
    symbolic executor's) gradient of the slope comes out multiplied by the slope; torch's and MXNet's imperative
    autograd agree. Recognised when MXNet's gradient is the slope times torch's; the weights and states that the step
    updates from it follow."""
    name, key = _param(row, ev)
    slope = _prelu_slope(ev, name) if name is not None else None
    if slope is None or name not in ev.gradients:
        return None
    mx_grad, torch_grad = (g.astype(np.float64) for g in ev.gradients[name])
    scaled = slope.reshape(torch_grad.shape) * torch_grad if slope.size == torch_grad.size else None
    tolerance = 1e-4 * float(np.abs(mx_grad).max(initial=0.0)) + 1e-12
    if scaled is None or np.abs(mx_grad - torch_grad).max() <= tolerance or np.abs(mx_grad - scaled).max() > tolerance:
        return None
    follows = "" if row.kind == "gradient" else f" (the {row.kind} follows from that gradient)"
    return (f"MXNet's PReLU gradient bug: MXNet 1.9.1 without MKLDNN (float64, or MXNET_MKLDNN_ENABLED=0) gives a "
            f"Module's slope gradient times the slope: MXNet's gradient of {name!r} is the slope "
            f"({_values(slope)}) times torch's {key!r}{follows}; torch's is right (MXNet's autograd agrees): compare "
            f"in float32 with MKLDNN, or leave the slopes out")


def _prelu_slope(ev: Evidence, name: str):
    """The slope values of MXNet parameter ``name`` when it is the gamma of a PReLU (``LeakyReLU`` act_type prelu),
    as they were at step 1; else None."""
    for node in ev.nodes:
        if node["op"] == "LeakyReLU" and node.get("attrs", {}).get("act_type") == "prelu" and len(node["inputs"]) > 1:
            if ev.nodes[node["inputs"][1][0]]["name"] == name:
                slope = ev.cache.setdefault(("slope", name), ev.mx_before.get(name))
                return None if slope is None else np.asarray(slope, dtype=np.float64)
    return None


def _values(array: np.ndarray) -> str:
    shown = np.unique(np.round(array.ravel(), 6))
    return ", ".join(f"{v:g}" for v in shown[:3]) + (" ..." if shown.size > 3 else "")


# ---------------------------------------------------------------- weights and optimizer states


def _frozen_trained(row, ev: Evidence) -> str | None:
    """A parameter MXNet holds still (frozen in the settings, or a ``fix_gamma`` scale) that torch updates."""
    name, key = _param(row, ev)
    if name is None or not _moved(ev.torch_before, ev.torch_after, key) or _moved(ev.mx_before, ev.mx_after, name):
        return None
    held = ev.mapping.held if hasattr(ev.mapping, "held") else {}
    where = _optimizer_place(ev, key)
    if name in held:
        return (f"fix_gamma: MXNet holds {name!r} at {held[name]:g} (BatchNorm fix_gamma=True, never trained) but "
                f"torch trains {key!r} ({where}); freeze it (migrate.param_groups holds it at 1, frozen)")
    entry = (ev.settings or {}).get("params", {}).get(name, {})
    if entry.get("frozen"):
        return (f"a frozen layer left trainable: {name!r} is frozen in MXNet (settings: frozen, never updated) but "
                f"torch updates {key!r} ({where}); set requires_grad=False and leave it out of the optimizer "
                f"(migrate.param_groups(...).apply_frozen does)")
    return None


def _not_trained(row, ev: Evidence) -> str | None:
    """A parameter MXNet updates that torch leaves unchanged."""
    name, key = _param(row, ev)
    if name is None or _moved(ev.torch_before, ev.torch_after, key) or not _moved(ev.mx_before, ev.mx_after, name):
        return None
    return (f"not trained in torch: MXNet updates {name!r} but torch left {key!r} unchanged "
            f"({_optimizer_place(ev, key)}); give it requires_grad=True and put it in the optimizer")


def _weight_decay(row, ev: Evidence) -> str | None:
    """The torch group's weight decay differs from MXNet's ``wd * wd_mult`` (a wd_mult of 0 lost, say), or is
    decoupled (AdamW) where MXNet adds it to the gradient."""
    name, key = _param(row, ev)
    group = ev.torch_side.group(key) if name is not None else None
    entry = (ev.settings or {}).get("params", {}).get(name)
    if group is None or entry is None or "weight_decay" not in group:
        return None
    wd, mult = float(ev.settings["optimizer"]["wd"]), float(entry["wd_mult"])
    if isinstance(ev.torch_side.optimizer, torch.optim.AdamW) and wd * mult and group["weight_decay"]:
        return (f"weight decay applied differently: torch's AdamW decays {key!r} apart from the gradient "
                f"(decoupled, weight_decay {group['weight_decay']:g}), MXNet's {ev.settings['optimizer']['name']} "
                f"adds wd {wd:g} x wd_mult {mult:g} times the weight to the gradient; use torch.optim.Adam or "
                f"migrate.torch_optimizer")
    if math.isclose(group["weight_decay"], wd * mult, rel_tol=1e-6, abs_tol=1e-12):
        return None
    lost = " (MXNet's wd_mult 0 lost)" if mult == 0 else ""
    return (f"weight decay{lost}: MXNet decays {name!r} by wd {wd:g} x wd_mult {mult:g} = {wd * mult:g}, torch's "
            f"group of {key!r} by weight_decay {group['weight_decay']:g}; give it a group with weight_decay "
            f"{wd * mult:g} (migrate.param_groups does)")


def _learning_rate(row, ev: Evidence) -> str | None:
    """The torch group's lr at this step differs from the one MXNet used (lr_mult or schedule lost)."""
    name, key = _param(row, ev)
    if name is None or name not in ev.mx_lrs or key not in ev.torch_lrs:
        return None
    mx_lr, torch_lr = ev.mx_lrs[name], ev.torch_lrs[key]
    if math.isclose(mx_lr, torch_lr, rel_tol=1e-6, abs_tol=1e-12):
        return None
    mult = float(ev.settings["params"][name]["lr_mult"])
    return (f"learning rate: MXNet updated {name!r} at step {ev.step} with lr {mx_lr:g} (lr_mult {mult:g}), torch "
            f"{key!r} with its group's lr {torch_lr:g}; give it a group with lr {mx_lr:g} and MXNet's schedule "
            f"(migrate.param_groups and migrate.torch_lr_scheduler do)")


def _clipping(row, ev: Evidence) -> str | None:
    """MXNet clips the rescaled gradient (``clip_gradient``) and torch does not, or at another bound."""
    name, key = _param(row, ev)
    group = ev.torch_side.group(key) if name is not None else None
    clip = ev.settings["optimizer"].get("clip_gradient") if ev.settings is not None else None
    if group is None or clip is None or name not in ev.mx_gradients or group.get("clip_gradient") == clip:
        return None
    scaled = np.abs(ev.mx_gradients[name]) * float(ev.settings["optimizer"]["rescale_grad"])
    beyond = int(np.count_nonzero(scaled > clip))
    if not beyond:
        return None
    return (f"clipping: MXNet clips the rescaled gradient of {name!r} to +-{clip:g} ({beyond} of {scaled.size} "
            f"elements beyond it at step {ev.step}), torch's optimizer clips at {group.get('clip_gradient')}; clip "
            f"each element after rescaling, as migrate.torch_optimizer does")


def _momentum(row, ev: Evidence) -> str | None:
    """The torch group's momentum differs from MXNet's."""
    name, key = _param(row, ev)
    group = ev.torch_side.group(key) if name is not None else None
    hyper = ev.settings["optimizer"]["hyperparameters"] if ev.settings is not None else {}
    if group is None or "momentum" not in group or "momentum" not in hyper:
        return None
    if math.isclose(float(group["momentum"]), float(hyper["momentum"]), rel_tol=1e-6, abs_tol=1e-12):
        return None
    return (f"momentum: MXNet {ev.settings['optimizer']['name']} momentum {hyper['momentum']:g}, torch's group of "
            f"{key!r} momentum {group['momentum']:g}")


def _torch_only(row, ev: Evidence) -> str | None:
    """A torch tensor with no MXNet counterpart (a bias MXNet does not have, filled with zeros) that torch trains."""
    if not row.name.startswith("(no MXNet") or not _moved(ev.torch_before, ev.torch_after, row.torch_name):
        return None
    return (f"torch trains {row.torch_name!r}, which has no MXNet counterpart (filled with zeros to match MXNet); "
            f"freeze it (requires_grad=False) or build the layer without it")


def _embedding_padding(row, ev: Evidence) -> str | None:
    """A torch Embedding with ``padding_idx``: its padding row gets no gradient and never moves, where MXNet's
    Embedding trains every row the batch reads (recognised when the difference lies in that row only)."""
    name, key = _param(row, ev)
    module = ev.module_of(key) if name is not None else None
    if not isinstance(module, torch.nn.Embedding) or module.padding_idx is None:
        return None
    if row.kind == "gradient" and name in ev.gradients:
        mx_value, torch_value = ev.gradients[name]
    elif row.kind == "weight" and name in ev.mx_after and key in ev.torch_after:
        mx_value, torch_value = ev.mx_after[name], ev.torch_after[key]
    else:
        return None
    by_row = np.abs(mx_value.astype(np.float64) - torch_value).max(axis=1)
    differs = np.nonzero(by_row > 1e-3 * by_row.max())[0]  # rows beyond the others' rounding
    pad = module.padding_idx % module.num_embeddings
    if list(differs) != [pad]:
        return None
    return (f"embedding padding row: torch {key!r} is an Embedding with padding_idx={module.padding_idx}, whose row "
            f"{pad} gets no gradient and never moves; MXNet's {name!r} trains every row the batch reads (token id "
            f"{pad} is in the batch); build the torch Embedding without padding_idx, or keep token {pad} out of the "
            f"data")


def _param(row, ev: Evidence) -> tuple:
    """(MXNet name, torch key) of a weight or state row of a parameter in the mapping, else (None, None)."""
    name, key = row.name.split(":")[0], row.torch_name.split(":")[0]
    if name not in ev.mapping or ev.mapping.entry(name).get("fold") or key not in ev.torch_side.named:
        return None, None
    return name, key


def _moved(before: dict, after: dict, name) -> bool:
    return name in before and name in after and not np.array_equal(before[name], after[name])


def _optimizer_place(ev: Evidence, key: str) -> str:
    param = ev.torch_side.named[key]
    inside = "in the optimizer" if ev.torch_side.group(key) is not None else "not in the optimizer"
    return f"requires_grad={param.requires_grad}, {inside}"


# ---------------------------------------------------------------- running statistics


def _norm_momentum(row, ev: Evidence) -> str | None:
    """A BatchNorm whose torch momentum is not 1 - MXNet's (read inverted when equal to MXNet's)."""
    op, module = _norm_pair(row, ev)
    if op is None or module.momentum is None:
        return None
    mx_momentum = float(ev.attrs(op).get("momentum", 0.9))
    if math.isclose(module.momentum, 1 - mx_momentum, rel_tol=1e-5, abs_tol=1e-7):
        return None
    inverted = " read inverted" if math.isclose(module.momentum, mx_momentum, rel_tol=1e-6) else ""
    return (f"BatchNorm momentum{inverted}: MXNet {op!r} momentum {mx_momentum:g} keeps {mx_momentum:g} of the running "
            f"value each step, torch {row.torch_name.rsplit('.', 1)[0]!r} momentum {module.momentum:g} keeps "
            f"{1 - module.momentum:g} (torch's momentum weighs the new batch: it is MXNet's 1 - momentum); build the "
            f"torch layer with momentum={1 - mx_momentum:g}")


def _float32_momentum(row, ev: Evidence) -> str | None:
    """MXNet's BatchNorm holds its momentum as a float32 (0.9 is 0.89999998) whatever the data's type; torch's
    ``1 - momentum`` in the data's type: visible in float64 runs at tight tolerances."""
    op, module = _norm_pair(row, ev)
    name, key = row.name.split(" + ")[0], row.torch_name
    if op is None or module.momentum is None or name not in ev.mx_before or key not in ev.torch_before:
        return None
    mx_momentum = float(ev.attrs(op).get("momentum", 0.9))
    held = float(np.float32(mx_momentum))
    gap = abs(held - (1 - float(module.momentum)))
    if not gap or ev.mx_after[name].dtype != np.float64:
        return None
    batch = (ev.mx_after[name] - held * ev.mx_before[name]) / (1 - held)
    bound = 2 * ev.step * gap * float(np.max(np.abs(ev.mx_before[name] - batch))) + 1e-12  # it adds up
    if row.max_abs_diff is None or row.max_abs_diff > bound:
        return None
    return (f"BatchNorm momentum in float32: MXNet {op!r} keeps momentum {mx_momentum:g} as the float32 {held!r} "
            f"whatever the data's type, torch {row.torch_name.rsplit('.', 1)[0]!r} uses 1 - {module.momentum:g} "
            f"= {1 - module.momentum!r}; the running statistics differ by {gap:.2g} of each update (max "
            f"{row.max_abs_diff:.2g} here), far below float32 rounding")


def _unbiased_variance(row, ev: Evidence) -> str | None:
    """torch's stock BatchNorm updates running_var with the unbiased batch variance (times n/(n-1)), MXNet with the
    biased one: recognised when the measured ratio of the two updates is n/(n-1)."""
    op, module = _norm_pair(row, ev)
    if op is None or not row.torch_name.endswith("running_var") or module.momentum is None:
        return None
    n = ev.norm_counts.get(op)
    mx_momentum, t = float(np.float32(ev.attrs(op).get("momentum", 0.9))), float(module.momentum)
    name, key = row.name.split(" + ")[0], row.torch_name
    if not n or n < 2 or name not in ev.mx_before or key not in ev.torch_before:
        return None
    mx_batch = (ev.mx_after[name] - mx_momentum * ev.mx_before[name]) / (1 - mx_momentum)
    torch_batch = (ev.torch_after[key] - (1 - t) * ev.torch_before[key]) / t
    usable = np.abs(mx_batch) > 1e-6
    if not usable.any():
        return None
    measured, expected = float(np.median(torch_batch[usable] / mx_batch[usable])), n / (n - 1)
    if abs(measured - expected) > 0.05 * (expected - 1):
        return None
    return (f"unbiased running variance: torch's stock BatchNorm {row.torch_name.rsplit('.', 1)[0]!r} updates "
            f"running_var with the unbiased batch variance, MXNet {op!r} with the biased one: n/(n-1) = {n}/{n - 1} "
            f"= {expected:.6g} times MXNet's ({n} values per channel; measured {measured:.6g}); the forward outputs "
            f"and gradients do not depend on it, only eval mode reads it; to follow MXNet exactly, update running_var "
            f"with the biased variance (the module migrate.generate_torch writes does)")


def _norm_pair(row, ev: Evidence) -> tuple:
    """(MXNet BatchNorm op, torch BatchNorm module) of a running-statistic row, else (None, None)."""
    name = row.name.split(" + ")[0]
    if name not in ev.mapping:
        return None, None
    op = ev.mapping.entry(name).get("mx_node")
    module = ev.module_of(row.torch_name)
    if ev.by_name.get(op, {}).get("op") != "BatchNorm" or not isinstance(module, _BATCH_NORMS):
        return None, None
    return op, module


RECOGNIZERS = {
    "forward": (_not_finite, _norm_eps, _avg_pool_padding),
    "loss": (_not_finite, _batch_reduction, _avg_pool_padding),
    "gradient": (_not_finite, _prelu_gradient_bug, _batch_reduction, _embedding_padding),
    "weight": (_not_finite, _frozen_trained, _not_trained, _embedding_padding, _prelu_gradient_bug, _weight_decay,
               _learning_rate, _clipping, _momentum, _torch_only),
    "state": (_not_finite, _frozen_trained, _not_trained, _prelu_gradient_bug, _weight_decay, _learning_rate,
              _clipping, _momentum),
    "running statistic": (_not_finite, _norm_momentum, _unbiased_variance, _float32_momentum),
}
"""Row kind -> recognizers, tried in order."""
