"""The arguments of one ``migrate`` command, resolved once into a frozen object (as black's ``Mode``).

argparse's ``Namespace`` is read here and nowhere else: ``options(args)`` parses ``--input-shape`` and ``--kwargs``,
checks ``--steps`` / ``--check-training``, picks the weights format and whether progress bars show, and returns an
``Options`` (the model commands) or a ``DataOptions`` (``migrate data``). The steps of a command receive that object
and never write to it; what they find goes into the command's ``Report``.

Examples:
    >>> import argparse
    >>> opts = options(argparse.Namespace(command="verify", symbol="net-symbol.json", params="net-0000.params",
    ...                                   torch="pkg:net", input_shape=["1,3,8,8"], quiet=True, json=False))
    >>> opts.input_shapes, opts.input_dtypes
    (((1, 3, 8, 8),), ('float32',))
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

from migrate.check.training import MAX_STEPS
from migrate.cli import inputs
from migrate.errors import CliUsageError

__all__ = ["DataOptions", "Options", "options"]


@dataclass(frozen=True)
class Options:
    """One run of a model command (``map``, ``groups``, ``weights``, ``optim``, ``verify``, ``all``, ``check``,
    ``generate``): its flags as given or parsed; a flag the subcommand does not take holds its default.

    Attributes:
        command: The subcommand.
        symbol, params, settings, states, mapping, labels: The input files of those flags, or None.
        torch: ``--torch``: a factory ``module:callable``, a TorchScript file, or ``generate``.
        kwargs: ``--kwargs`` parsed (a read-only mapping).
        input_shapes, input_dtypes: ``--input-shape`` parsed, one shape and one dtype name per input.
        assume_states_order, steps, loss, float64, check_training: Those flags.
        weights_format: ``pt`` or ``safetensors`` (``--format``; ``weights --out NAME.pt`` asks for ``pt``).
        out, force: ``--out`` and ``--force``.
        json: Print one JSON document.
        bars: Show progress bars on stderr (not ``--quiet``, and stderr is a terminal).
    """

    command: str
    symbol: str | None = None
    params: str | None = None
    settings: str | None = None
    states: str | None = None
    mapping: str | None = None
    labels: str | None = None
    torch: str | None = None
    kwargs: types.MappingProxyType = field(default_factory=lambda: types.MappingProxyType({}))
    input_shapes: tuple = ()
    input_dtypes: tuple = ()
    assume_states_order: bool = False
    steps: int = 1
    loss: str = "sum"
    float64: bool = False
    check_training: int | None = None
    weights_format: str = "safetensors"
    out: str | None = None
    force: bool = False
    json: bool = False
    bars: bool = False

    @property
    def generated(self) -> bool:
        """``--torch generate``: the torch model is written from the MXNet graph."""
        return self.torch == "generate"

    @property
    def input_files(self) -> dict:
        """Flag -> path of every input file given (``--torch`` included; outputs must not be one of them)."""
        given = {"--symbol": self.symbol, "--params": self.params, "--settings": self.settings,
                 "--states": self.states, "--mapping": self.mapping, "--torch": self.torch, "--labels": self.labels}
        return {flag: path for flag, path in given.items() if path}


@dataclass(frozen=True)
class DataOptions:
    """One run of ``migrate data convert|index``.

    Attributes:
        action: ``convert`` or ``index``.
        rec, idx: The ``.rec`` file and its ``.idx`` (or None).
        out: The output folder (``convert``) or ``.idx`` file (``index``).
        data_format: ``folder`` or ``tar`` (``convert``).
        per_shard: Records per tar shard.
        force, json, bars: As ``Options``'.
    """

    action: str
    rec: str
    out: str
    idx: str | None = None
    data_format: str = "folder"
    per_shard: int = 1000
    force: bool = False
    json: bool = False
    bars: bool = False
    command: str = "data"


_PLAIN = ("symbol", "params", "settings", "states", "mapping", "labels", "torch", "assume_states_order", "steps", "loss",
          "float64", "check_training", "out", "force")  # flags taken as given


def options(args) -> Options | DataOptions:
    """The frozen options of the parsed arguments ``args`` (argparse's ``Namespace``), checked: shapes, --kwargs and
    the step counts parse, in that order.

    Raises:
        CliUsageError: a flag's value is malformed (names the flag, what was expected and an example).
    """
    bars = not getattr(args, "quiet", False) and sys.stderr.isatty()
    if args.command == "data":
        return DataOptions(args.data_command, args.rec, args.data_out, getattr(args, "idx", None),
                           getattr(args, "data_format", "folder"), getattr(args, "per_shard", 1000), args.force,
                           args.json, bars)
    given = {name: getattr(args, name) for name in _PLAIN if getattr(args, name, None) is not None}
    shapes, dtypes = inputs.input_shapes(getattr(args, "input_shape", None))
    kwargs = inputs.kwargs_object(getattr(args, "kwargs", "{}"))
    for flag in ("--steps", "--check-training"):
        steps = given.get(flag[2:].replace("-", "_"))
        if steps is not None and not 1 <= steps <= MAX_STEPS:
            raise CliUsageError(f"{flag} {str(steps)[:40]}: expected a number of optimizer steps from 1 to "
                                f"{MAX_STEPS} (each trains both models and compares every tensor)")
    return Options(args.command, **given, kwargs=types.MappingProxyType(kwargs), input_shapes=tuple(shapes),
                   input_dtypes=tuple(dtypes), weights_format=_weights_format(args), json=args.json, bars=bars)


def _weights_format(args) -> str:
    """``--format``, or its default: ``pt`` for ``weights --out NAME.pt``/``.pth``, else ``safetensors``."""
    chosen = getattr(args, "format", None)
    if chosen is not None:
        return chosen
    out = getattr(args, "out", "") or ""
    return "pt" if args.command == "weights" and out.endswith((".pt", ".pth")) else "safetensors"
