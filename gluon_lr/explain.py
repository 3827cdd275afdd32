"""The explanation table: one row per parameter with its resolved multipliers and where each came from."""
import dataclasses
from typing import Mapping, Optional, Sequence

__all__ = ["Explanation", "Row"]

_COLUMNS = ("name", "shape", "kinds", "lr_mult", "lr_source", "wd_mult", "wd_source", "shadowed", "update", "frozen",
            "masked", "depth")


@dataclasses.dataclass(frozen=True)
class Row:
    """One parameter: name, shape, layer kinds, resolved multipliers, their sources, the rules they shadowed, and the
    path its update takes."""

    name: str
    shape: tuple
    kinds: tuple
    lr_mult: float
    lr_source: str
    wd_mult: float
    wd_source: str
    shadowed: tuple
    frozen: bool = False        # frozen whole by LrTrainer.freeze
    masked: int = 0             # number of elements frozen by an element mask
    depth: Optional[int] = None  # layer-decay depth (gluon_lr.layer_decay), None when no decay rule
    update: str = "-"           # the update path: compiled, numpy, mxnet-ops, stock:<reason>, none (FusedUpdate.paths)


class Explanation:
    """Why each parameter has the lr_mult and wd_mult it has, as returned by ``LrTrainer.explain()``.

    Sources read ``param`` (the Parameter's own attribute), ``rules[i] '<select>'`` (the last rule that set the
    value), ``set_lr_mult``/``set_wd_mult`` (an explicit call) or ``load_states`` (restored from a states file).
    ``shadowed`` lists the rules that also selected the parameter but were overridden, with the value they gave.
    ``update`` says how the next step updates the parameter: ``compiled`` (the compiled kernels of the fast path),
    ``numpy`` or ``mxnet-ops`` (its other implementations; ``numpy|mxnet-ops`` until it has timed both),
    ``stock:<reason>`` (the stock Updater: ``stock:sparse``, ``stock:float16`` without ``multi_precision``,
    ``stock:fused=False``, ...; see ``gluon_lr._fused.FusedUpdate.paths``) or ``none`` (not updated: frozen).

    Args:
        rows: The rows, in the optimizer's index order.

    Examples:
        >>> print(trainer.explain())            # a readable table
        >>> trainer.explain().to_dict()["dense0_weight"]["lr_source"]
        "rules[1] 'dense0_*'"
    """

    def __init__(self, rows: Sequence[Row]):
        self.rows = tuple(rows)

    @classmethod
    def from_table(cls, params: Sequence, table: Mapping, kinds: Mapping, freeze: Mapping = None) -> "Explanation":
        """Build the explanation from Parameters, the resolved table and each parameter's ParamKinds.

        Args:
            params: The trainer's Parameters, in index order.
            table: name -> ``gluon_lr.rules.Entry``.
            kinds: name -> ``gluon_lr.rules.ParamKinds``.
            freeze: Optional name -> {frozen, masked, depth, update} (freezing, layer-decay and update-path
                columns).

        Returns:
            The Explanation.

        Examples:
            >>> Explanation.from_table(trainer._params, trainer._table, trainer._kinds)
        """
        rows = []
        for param in params:
            entry = table[param.name]
            rows.append(Row(param.name, tuple(param.shape or ()), tuple(sorted(kinds[param.name].kinds)),
                            entry.lr_mult, entry.lr_source, entry.wd_mult, entry.wd_source, entry.shadowed,
                            **(freeze or {}).get(param.name, {})))
        return cls(rows)

    def to_dict(self) -> dict:
        """The data: name -> {shape, kinds, lr_mult, lr_source, wd_mult, wd_source, shadowed, update, frozen, masked,
        depth}.

        Returns:
            A JSON-serialisable dict (tuples become lists).

        Examples:
            >>> trainer.explain().to_dict()["dense0_bias"]["wd_mult"]
            0.0
        """
        return {row.name: {col: list(getattr(row, col)) if isinstance(getattr(row, col), tuple)
                           else getattr(row, col) for col in _COLUMNS[1:]} for row in self.rows}

    def _cells(self) -> list:
        """Every row as a list of strings, header first."""
        cells = [["name", "shape", "lr_mult", "lr from", "wd_mult", "wd from", "shadowed", "update", "frozen", "masked",
                  "depth"]]
        for row in self.rows:
            cells.append([row.name, "x".join(map(str, row.shape)) or "-", f"{row.lr_mult:g}", row.lr_source,
                          f"{row.wd_mult:g}", row.wd_source, "; ".join(row.shadowed) or "-", row.update,
                          "yes" if row.frozen else "-", str(row.masked) if row.masked else "-",
                          "-" if row.depth is None else str(row.depth)])
        return cells

    def __str__(self) -> str:
        """A fixed-width table, one line per parameter."""
        cells = self._cells()
        widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells]
        lines.insert(1, "  ".join("-" * width for width in widths))
        return "\n".join(lines)

    def __repr__(self) -> str:
        """Short form: the number of rows."""
        return f"Explanation({len(self.rows)} parameters)"

    def __len__(self) -> int:
        """The number of parameters."""
        return len(self.rows)
