"""The one report object of a ``migrate`` command: what it found, what it wrote, and its exit code."""
from __future__ import annotations

from dataclasses import dataclass, field

from migrate.cli.interrupts import INTERRUPTED

SCHEMA_VERSION = 1


@dataclass
class Report:
    """Everything a subcommand found; ``exit_code`` is decided here and nowhere else.

    Attributes:
        command: The subcommand.
        error: A usage, input or IO error (exit 2), or None.
        unmapped: ``{"mxnet": [...], "torch": [...]}`` names without a counterpart (exit 1 when any).
        checks: check name -> passed (exit 1 when one failed), e.g. ``equivalent``, ``verified``.
        lost: what the MXNet training held that did not cross to torch, one sentence each (exit 1 when any).
        sections: JSON-ready details by topic (mapping, verify, groups, weights, optimizer, inputs).
        text: Readable blocks for stdout, in order.
        outputs: Files written.
        interrupted: The command was interrupted (SIGINT or SIGTERM): exit 130, nothing half-written.
    """

    command: str
    error: str | None = None
    unmapped: dict = field(default_factory=lambda: {"mxnet": [], "torch": []})
    checks: dict = field(default_factory=dict)
    lost: list = field(default_factory=list)
    sections: dict = field(default_factory=dict)
    text: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    interrupted: bool = False

    @property
    def names_unmapped(self) -> bool:
        """True when a name on either side has no counterpart."""
        return any(self.unmapped.values())

    @property
    def exit_code(self) -> int:
        """130 interrupted, 2 usage/input/IO error, 1 a check failed, names are unmapped or something did not
        cross, 0 clean."""
        if self.interrupted:
            return 130
        if self.error is not None:
            return 2
        return 1 if self.names_unmapped or self.lost or not all(self.checks.values()) else 0

    def status(self) -> str:
        """One line: OK, or what failed."""
        if self.interrupted:
            return INTERRUPTED
        if self.error is not None:
            return f"ERROR: {self.error}"
        failed = [name for name, passed in self.checks.items() if not passed]
        if self.names_unmapped:
            failed.append(f"unmapped names ({len(self.unmapped['mxnet'])} MXNet, {len(self.unmapped['torch'])} "
                          f"torch)")
        if self.lost:
            failed.append(f"{len(self.lost)} not carried to torch")
        return "OK" if not failed else f"FAILED: {', '.join(failed)}"

    def add_mxnet_reader(self, reader: str) -> None:
        """Say once, in the text and the JSON (``mxnet_graph``), which path read the MXNet model."""
        if "mxnet_graph" not in self.sections:
            self.sections["mxnet_graph"] = reader
            self.text.append(f"MXNet model: {reader}")

    def add_mapping(self, mapping, source: str, unmapped: dict, show: bool) -> None:
        """The mapping (``NameMapping``) and where it came from (``matched``, ``generated`` or the --mapping file);
        ``show``: print its table (else only its notes)."""
        self.unmapped = unmapped
        self.checks["equivalent"] = not mapping.differences
        self.sections["mapping"] = {"source": source, "mapped": len(mapping), "differences": mapping.differences,
                                    "torch_defaults": mapping.torch_defaults, "notes": mapping.notes,
                                    "entries": {name: mapping[name] for name in mapping}}
        self.text += [str(mapping)] if show else mapping.notes

    def add_skipped(self, what: str) -> None:
        """``what`` (verification, the training check) did not run: names are unmapped."""
        self.text.append(f"{what} skipped: names are unmapped, the weights cannot be copied")

    def add_verify(self, result, compared_with: str, cause: str | None) -> None:
        """The numeric verification (``VerifyReport``), compared with ``compared_with``, and the likely cause of its
        first divergence (or None)."""
        first = result.first_divergence
        self.checks["verified"] = result.verified  # compared: a skipped node is not a passed one
        self.sections["verify"] = {"ok": result.ok, "compared_with": compared_with,
                                   "max_abs_diff": result.max_abs_diff, "atol": result.atol, "nodes": len(result.rows),
                                   "skipped": [r.mx_node for r in result.skipped],
                                   "passes": result.passes, "output_bytes": result.output_bytes,
                                   "first_divergence": first and {
                                       "mxnet": first.mx_node, "torch": first.torch_node,
                                       "max_abs_diff": first.max_abs_diff, "note": first.note, "cause": cause},
                                   "rows": result.to_dict()["rows"]}
        self.text.append(str(result) + (f"\n  likely cause: {cause}" if cause else ""))

    def add_generated_unverified(self) -> None:
        """Without MXNet there is no MXNet run to compare with, and a generated module is the graph's own
        translation: comparing it with the translation would compare it with itself."""
        self.sections["verify"] = {"ok": True, "compared_with": None, "nodes": 0}
        self.text.append("verification: not run (no MXNet here, and the torch module is the graph's own translation, "
                         "op by op, by the translators tested against MXNet)")

    def add_weights(self, tensors: int, converted: int, kept: list, params: str) -> None:
        """``converted`` of the model's ``tensors`` came from ``params``; ``kept`` keys stayed the torch model's."""
        self.sections["weights"] = {"tensors": tensors, "converted": converted, "kept_from_torch": kept}
        self.text.append(f"weights: {converted} of {tensors} tensors from {params}"
                         + (f"; kept from the torch model: {', '.join(kept)}" if kept else ""))

    def add_groups(self, groups: dict) -> None:
        """The param groups file's document (``format`` gluon-lr-param-groups): counts and a table."""
        rows, frozen = groups["groups"], groups["frozen"]
        self.sections["groups"] = {"count": len(rows), "params": sum(len(r["params"]) for r in rows),
                                   "frozen": len(frozen)}
        table = [f"{'group':>5}  {'lr':>10}  {'weight_decay':>12}  {'lr_mult':>7}  {'wd_mult':>7}  params"]
        table += [f"{i:>5}  {r['lr']:>10.4g}  {r['weight_decay']:>12.4g}  {r['lr_mult']:>7g}  {r['wd_mult']:>7g}  "
                  f"{', '.join(r['params'])}" for i, r in enumerate(rows)]
        shown = [f["torch"] + (f" (held at {f['held']:g}: MXNet fix_gamma=True)" if "held" in f else "")
                 for f in frozen]
        table.append(f"frozen (requires_grad=False): {', '.join(shown) or 'none'}")
        self.text.append("\n".join(table))

    def add_optimizer(self, optimizer, scheduler, settings: dict, states: str | None, filled: int, notes: list,
                      control, lost: list) -> None:
        """The torch optimizer built from ``settings`` (``filled`` parameter states converted from ``states``, with
        ``notes``), its scheduler, what ``control`` (``TorchControl``) holds in torch and what could not cross
        (``lost``: exit 1 when any)."""
        self.lost = lost
        lrs, rescale = [group["lr"] for group in optimizer.param_groups], settings["optimizer"]["rescale_grad"]
        self.text += [f"note: {note}" for note in notes]
        self.sections["optimizer"] = {"class": f"migrate.{type(optimizer).__name__}",
                                      "mxnet": settings["optimizer"]["name"], "states": states,
                                      "states_converted": filled, "num_update": scheduler.num_update, "next_lr": lrs,
                                      "rescale_grad": rescale, "notes": notes}
        self.text.append(f"optimizer: migrate {type(optimizer).__name__} (MXNet {settings['optimizer']['name']}, "
                         f"exact); {filled} parameter states converted; resumes at update {scheduler.num_update}; "
                         f"next lr per group: {', '.join(f'{lr:.4g}' for lr in lrs)}; gradients times "
                         f"rescale_grad {rescale:g} (MXNet's 1/batch_size: sum the loss over the batch)")
        self.sections["optimizer"]["control"] = {"frozen": sorted(control.frozen),
                                                 "masked_elements": control.masked_elements,
                                                 "held_norm_layers": control.held_norm_layers}
        if control.frozen or control.masked_elements or control.held_norm_layers:
            self.text.append(f"held in torch: frozen {', '.join(sorted(control.frozen)) or 'none'}; masked "
                             f"{', '.join(f'{k} ({v})' for k, v in control.masked_elements.items()) or 'none'}; "
                             f"running statistics held: {', '.join(control.held_norm_layers) or 'none'}")

    def add_training(self, result) -> None:
        """The training check (``TrainingReport``): exit 1 when a tensor diverges."""
        self.checks["training"] = result.ok
        self.sections["check"] = result.to_dict()
        self.text.append(str(result))

    def add_generated(self, model, path: str) -> None:
        """The generated module ``model`` written to ``path``."""
        self.outputs.append(path)
        self.text.append(f"generated {type(model).__name__} in {path}: {len(model.MXNET_NAMES)} MXNet "
                         f"parameters and states as state_dict keys (MXNET_NAMES in the file maps them)")

    def to_dict(self) -> dict:
        """The JSON document ``--json`` prints and ``report.json`` holds."""
        return {"schema_version": SCHEMA_VERSION, "command": self.command, "ok": self.exit_code == 0,
                "exit_code": self.exit_code, "status": self.status(), "error": self.error,
                "unmapped": self.unmapped, "checks": self.checks, "lost": self.lost, **self.sections,
                "outputs": self.outputs}

    def render(self) -> str:
        """The readable report: every block, then the unmapped names, checks and status."""
        lines = [block for block in self.text if block]
        if self.names_unmapped:
            lines.append("unmapped MXNet names: " + (", ".join(self.unmapped["mxnet"]) or "none") +
                         "\nunmapped torch names: " + (", ".join(self.unmapped["torch"]) or "none"))
        if self.lost:
            lines.append("not carried to torch:\n" + "\n".join(f"  - {item}" for item in self.lost))
        checks = "  ".join(f"{name}: {'yes' if passed else 'NO'}" for name, passed in self.checks.items())
        tail = [checks] if checks else []
        tail += [f"wrote: {', '.join(self.outputs)}"] if self.outputs else []
        tail.append(f"migrate {self.command}: {self.status()} (exit {self.exit_code})")
        return "\n\n".join(lines + ["\n".join(tail)])
