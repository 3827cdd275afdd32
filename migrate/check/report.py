"""What ``check_training`` measured: one ``TensorCheck`` per compared tensor, in graph order, and the report."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

__all__ = ["FORMAT", "KINDS", "SCHEMA_VERSION", "TensorCheck", "TrainingReport"]

FORMAT = "gluon-lr-training-check"
SCHEMA_VERSION = 2
"""2: rows carry ``control``, ``limit`` and ``rounding``; the report ``control`` and ``noise_factor``."""
KINDS = ("forward", "loss", "gradient", "weight", "state", "running statistic")
"""The kinds of compared tensors, in the order a training step meets them."""


@dataclass
class TensorCheck:
    """The comparison of one tensor between the MXNet and the torch training.

    Attributes:
        name: the MXNet op (``forward``), ``loss``, or the MXNet parameter (``name:state`` for an optimizer state).
        torch_name: the torch module path, ``loss``, or the ``state_dict`` key (``key:state`` for a state).
        kind: one of ``KINDS``.
        step: the training step: forward outputs, loss and gradients of step ``step``; weights, optimizer states and
            running statistics after its update.
        max_abs_diff: largest absolute difference (None when not compared: see ``note``).
        scale: largest absolute MXNet value.
        ok: ``max_abs_diff`` is at most ``limit`` (True for a row not compared).
        note: why a row was not compared, or how it was compared.
        cause: the likely cause of a difference, with both values, where the pattern is recognised.
        control: the larger of the two control runs' largest absolute differences for this tensor (its rounding
            noise: see ``migrate.check.rounding``), or None (no control runs: float64 or ``perturbation=None``; or
            not compared).
        limit: the largest difference accepted: ``max(atol * max(1, scale), NOISE_FACTOR * control)`` (None when not
            compared).
        rounding: accepted only through the control's allowance (beyond ``atol * max(1, scale)``).
    """

    name: str
    torch_name: str
    kind: str
    step: int
    max_abs_diff: float | None
    scale: float
    ok: bool
    note: str = ""
    cause: str = ""
    control: float | None = None
    limit: float | None = None
    rounding: bool = False

    @property
    def compared(self) -> bool:
        """True when the row holds a measured difference."""
        return self.max_abs_diff is not None

    @property
    def relative(self) -> float | None:
        """``max_abs_diff`` over ``scale`` (the difference itself where the scale is 0)."""
        if self.max_abs_diff is None:
            return None
        return self.max_abs_diff / self.scale if self.scale > 0 else self.max_abs_diff


@dataclass
class TrainingReport:
    """What ``check_training`` found.

    Attributes:
        ok: every compared tensor is within its limit.
        rows: one ``TensorCheck`` per tensor, in graph order: step 1's forward outputs, loss and gradients, then
            after each step its weights, optimizer states and running statistics (with the losses of later steps).
        first_divergence: the first row beyond its limit, or None.
        steps: optimizer steps taken on each side.
        atol: the tolerance (relative above magnitude 1).
        loss: how the loss was formed on each side.
        notes: what was changed or left out, one sentence each (Dropout disabled, rows not compared).
        float64: both trainings ran in float64.
        control: the control runs that measured each tensor's rounding noise, in words ("" when none ran: float64
            or ``perturbation=None``).
        noise_factor: k of the limit ``max(atol * max(1, scale), k * control)`` (None without control runs).

    Examples:
        >>> report = migrate.check_training(net, model, (4, 3, 32, 32), settings="settings.json")  # doctest: +SKIP
        >>> report.first_divergence.name, report.first_divergence.cause  # doctest: +SKIP
    """

    ok: bool
    rows: list = field(default_factory=list)
    first_divergence: TensorCheck | None = None
    steps: int = 1
    atol: float = 1e-4
    loss: str = ""
    notes: list = field(default_factory=list)
    float64: bool = False
    control: str = ""
    noise_factor: float | None = None

    @property
    def diverged(self) -> list:
        """The rows beyond their limit, in graph order."""
        return [row for row in self.rows if not row.ok]

    @property
    def rounding(self) -> list:
        """The rows within their limit only through the control runs' allowance, in graph order."""
        return [row for row in self.rows if row.rounding]

    def to_dict(self) -> dict:
        """The report as a JSON-ready dict with ``format`` and ``schema_version`` (every number finite: a value that
        is not is a row with ``max_abs_diff`` None and a note)."""
        rows = [dict(asdict(row), relative=row.relative) for row in self.rows]
        first = self.first_divergence
        return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "ok": self.ok, "steps": self.steps,
                "float64": self.float64, "atol": self.atol, "control": self.control or None,
                "noise_factor": self.noise_factor, "loss": self.loss, "notes": self.notes,
                "compared": sum(row.compared for row in self.rows), "diverged": len(self.diverged),
                "rounding": len(self.rounding),
                "first_divergence": None if first is None else rows[self.rows.index(first)], "rows": rows}

    def to_json(self) -> str:
        """``to_dict()`` as JSON text."""
        return json.dumps(self.to_dict(), indent=1)

    def __str__(self) -> str:
        header = ("MXNet node / tensor", "torch", "kind", "step", "max abs diff", "control", "relative", "result")
        cells = [header] + [(r.name, r.torch_name, r.kind, str(r.step), _number(r.max_abs_diff), _number(r.control),
                             _number(r.relative), _result(r)) for r in self.rows]
        widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
        right = {3, 4, 5, 6}
        lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths)))
                 .rstrip() for line in cells]
        lines += self.summary()
        return "\n".join(lines)

    def summary(self) -> list:
        """The lines under the table: notes, the rule, the first divergence and its cause, the causes of the other
        rows, the verdict."""
        lines = [f"note: {note}" for note in self.notes]
        if self.control:
            lines.append(f"control: {self.control}; a tensor diverges beyond max(atol x max(1, |MXNet|), "
                         f"{self.noise_factor:g} x control)")
        diverged, first, compared = self.diverged, self.first_divergence, sum(r.compared for r in self.rows)
        rule = f"atol {self.atol:g}" + (f" or {self.noise_factor:g}x their control" if self.control else "")
        rounding = f" ({len(self.rounding)} beyond atol, within rounding)" if self.rounding else ""
        if first is None:
            lines.append(f"training check: {compared} tensors equal within {rule} over {self.steps} step(s)"
                         f"{rounding}: OK")
            return lines
        control = f", control {_number(first.control)}" if self.control else ""
        lines.append(f"first divergence: {first.kind} {first.name!r} vs torch {first.torch_name!r} at step "
                     f"{first.step} (max abs diff {_number(first.max_abs_diff)}{control}, relative "
                     f"{_number(first.relative)})")
        hint = ("" if self.float64 else " (beyond float32 rounding as the control runs measure it; float64=True, "
                "--float64, removes rounding altogether)")
        lines.append(f"  likely cause: {first.cause}" if first.cause else f"  likely cause: not recognised{hint}")
        others = {}
        for row in diverged[1:]:
            others.setdefault(_label(row.cause) or "cause not recognised", []).append(row)
        if others:
            lines.append(f"also diverging ({len(diverged) - 1} more):")
        for label, rows in others.items():
            names = list(dict.fromkeys(r.name for r in rows))
            lines.append(f"  {label}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} ({len(rows)} rows)")
        lines.append(f"training check: {len(diverged)} of {compared} tensors diverge beyond {rule}{rounding}: "
                     f"DIVERGED")
        return lines


def _number(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _label(cause: str) -> str:
    """The name of a cause: its text before the first colon."""
    return cause.split(":", 1)[0] if cause else ""


def _result(row: TensorCheck) -> str:
    if row.ok:
        return ("ok (rounding)" if row.rounding else "ok") if row.compared else "-"
    return f"DIVERGES ({_label(row.cause)})" if row.cause else "DIVERGES"
