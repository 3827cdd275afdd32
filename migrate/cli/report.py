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
