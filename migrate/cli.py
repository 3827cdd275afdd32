"""The ``migrate`` command. ``migrate map`` maps an MXNet symbol+params pair onto a torch model and verifies it.

Exit codes: 0 mapped and verified, 1 not equivalent or names unmatched, 2 usage, input or export error.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from migrate.errors import CliUsageError, InputFileError, MigrateError

__all__ = ["main"]

SCHEMA_VERSION = 1


def main(argv=None) -> int:
    """Run the ``migrate`` command line and return its exit code.

    Args:
        argv: the arguments after the program name; None reads ``sys.argv``.

    Returns:
        0 when the mapping is complete and verified, 1 when the models are not equivalent or names are
        unmatched, 2 for a usage, input or export error.

    Example:
        >>> main(["map", "--symbol", "net-symbol.json", "--params", "net-0000.params",
        ...       "--torch", "torchvision.models:resnet18", "--input-shape", "1,3,64,64",
        ...       "--out", "mapping.json"])  # doctest: +SKIP
        0
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    try:
        return _run_map(args)
    except (MigrateError, OSError) as exc:
        print(f"migrate map: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="migrate", description="Carry MXNet Gluon models and settings to PyTorch.")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("map", help="map every MXNet parameter to its torch state_dict key and verify the mapping")
    m.add_argument("--symbol", required=True, help="MXNet NAME-symbol.json")
    m.add_argument("--params", required=True, help="MXNet NAME-0000.params")
    m.add_argument("--torch", required=True, metavar="MODULE:CALLABLE",
                   help="torch model factory, e.g. torchvision.models:resnet18")
    m.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for the factory")
    m.add_argument("--input-shape", action="append", required=True, metavar="N,C,H,W",
                   help="input shape; repeat for several inputs (int64 inputs: append ':int64')")
    m.add_argument("--out", required=True, help="mapping JSON file to write")
    m.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    return parser


def _run_map(args) -> int:
    from migrate.match import name_mapping
    from migrate.verify import verify
    shapes, dtypes = zip(*[_shape(s) for s in args.input_shape])
    for flag, path in (("--symbol", args.symbol), ("--params", args.params)):
        if not os.path.isfile(path):
            raise InputFileError(f"{flag} {path!r}: file not found; give the files HybridBlock.export wrote "
                                 f"(NAME-symbol.json, NAME-0000.params)")
    model = _torch_model(args.torch, args.kwargs)
    mx_model = (args.symbol, args.params)
    print(f"migrate map: exporting and matching {args.symbol} against {args.torch} ...", file=sys.stderr)
    mapping = name_mapping(mx_model, model, list(shapes), input_dtypes=list(dtypes))
    mapping.save(args.out)
    report = verify(mx_model, model, mapping, list(shapes), input_dtypes=list(dtypes)) if not (
        mapping.unmatched_mx or mapping.unmatched_torch) else None
    ok = mapping.ok and report is not None and report.ok
    if args.json:
        print(json.dumps({"schema_version": SCHEMA_VERSION, "ok": ok, "mapping_file": args.out,
                          "mapping": mapping.to_dict(), "verify": report.to_dict() if report else None}, indent=1))
    else:
        print(mapping)
        print(report if report else "verification skipped: names are unmatched, the weights cannot be copied")
    print(f"migrate map: wrote {args.out}: {'OK' if ok else 'NOT EQUIVALENT'}", file=sys.stderr)
    return 0 if ok else 1


def _shape(text: str):
    spec, _, dtype = text.partition(":")
    try:
        shape = tuple(int(d) for d in spec.split(","))
    except ValueError:
        raise CliUsageError(f"--input-shape {text!r}: expected comma-separated integers such as 1,3,32,32 "
                            f"(optionally ':int64'); received {text!r}") from None
    if dtype not in ("", "float32", "int64", "int32"):
        raise CliUsageError(f"--input-shape {text!r}: dtype {dtype!r} is not one of float32, int64, int32; "
                            f"write e.g. 2,5:int64")
    return shape, dtype or "float32"


def _torch_model(spec: str, kwargs_text: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliUsageError(f"--torch {spec!r}: expected package.module:callable, e.g. torchvision.models:resnet18")
    try:
        kwargs = json.loads(kwargs_text)
    except json.JSONDecodeError as exc:
        raise CliUsageError(f"--kwargs {kwargs_text!r}: expected a JSON object, could not parse it ({exc})") from None
    if not isinstance(kwargs, dict):
        raise CliUsageError(f"--kwargs {kwargs_text!r}: expected a JSON object, received {type(kwargs).__name__}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise CliUsageError(f"--torch {spec!r}: cannot import it ({exc}); check the module is on PYTHONPATH and "
                            f"the callable exists") from None
    try:
        return factory(**kwargs)
    except Exception as exc:
        raise CliUsageError(f"--torch {spec!r} with --kwargs {kwargs}: the factory raised "
                            f"{type(exc).__name__}: {exc}; check the arguments") from None
