"""The ``migrate`` command: carry an MXNet Gluon model, its gluon-lr settings and optimizer state to PyTorch.

Subcommands: ``map`` (name mapping + verification), ``groups`` (param groups), ``weights`` (state_dict), ``optim``
(optimizer and scheduler with the MXNet state), ``verify`` (numeric check of a mapping) and ``all`` (everything into
a folder with a report). Real output goes to stdout (``--json``: one document with ``schema_version``), messages
and progress bars to stderr. Exit codes: 0 ok, 1 verification failed or names unmapped, 2 usage, input or IO error.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys

from gluon_lr.formats import atomic
from migrate import migration_folder
from migrate.cli import inputs
from migrate.cli.report import Report
from migrate.errors import CliUsageError, InputFileError, MigrateError
from migrate.mapping.name_mapping import name_mapping
from migrate.mapping.verify import verify
from migrate.mapping.stream import write_state_dict
from migrate.mapping.weights import convert_weights
from migrate.optim.groups import param_groups
from migrate.optim.state_conversion import convert_optimizer_state
from migrate.optim.translate import torch_lr_scheduler, torch_optimizer

__all__ = ["main"]

_FLAGS = {  # flag -> argparse keywords; each subcommand takes the flags named in _COMMANDS
    "--symbol": dict(metavar="FILE", help="MXNet NAME-symbol.json (HybridBlock.export)"),
    "--params": dict(metavar="FILE", help="MXNet NAME-0000.params (HybridBlock.export)"),
    "--settings": dict(metavar="FILE", help="settings file (LrTrainer.export_settings)"),
    "--states": dict(metavar="FILE", help="optimizer states (LrTrainer.save_states or Trainer.save_states)"),
    "--torch": dict(metavar="MODULE:CALLABLE|FILE", help="torch model: a factory such as "
                    "torchvision.models:resnet18, or a TorchScript file (torch.jit.save)"),
    "--kwargs": dict(default="{}", metavar="JSON", help="JSON object of keyword arguments for the factory"),
    "--input-shape": dict(action="append", metavar="N,C,H,W", help="input shape; repeat for several inputs "
                          "(integer inputs: append ':int64')"),
    "--mapping": dict(metavar="FILE", help="mapping file from `migrate map`: skips matching the models"),
    "--format": dict(choices=("pt", "safetensors"), default="pt", help="weights file format: pt (torch.save, "
                     "weights.pt) or safetensors (written tensor by tensor, weights.safetensors)"),
}
_COMMANDS = {  # name -> (help, required flags, optional flags, what --out is)
    "map": ("map every MXNet parameter to its torch state_dict key and verify the mapping",
            ("--symbol", "--params", "--torch", "--input-shape"), ("--kwargs",), "mapping JSON file to write"),
    "groups": ("torch param groups (lr, weight_decay, frozen) from the settings",
               ("--settings", "--torch"), ("--kwargs", "--mapping", "--symbol", "--params", "--input-shape"),
               "param_groups.json to write"),
    "weights": ("the MXNet weights as a torch state_dict", ("--params", "--torch"),
                ("--kwargs", "--mapping", "--symbol", "--input-shape", "--format"), "weights file to write"),
    "optim": ("torch optimizer + lr scheduler with MXNet's exact update and (with --states) its state",
              ("--settings", "--torch"), ("--states", "--kwargs", "--mapping", "--symbol", "--params",
                                          "--input-shape"), "optimizer.pt to write"),
    "verify": ("copy the weights by the mapping and compare both models node by node",
               ("--symbol", "--params", "--torch", "--input-shape"), ("--kwargs", "--mapping"), None),
    "all": ("everything into one folder: mapping, weights, param groups, optimizer, report",
            ("--symbol", "--params", "--settings", "--torch", "--input-shape"),
            ("--states", "--kwargs", "--mapping", "--format"),
            "output folder (created if missing)"),
}


def main(argv=None) -> int:
    """Run the ``migrate`` command line and return its exit code.

    Args:
        argv: The arguments after the program name; None reads ``sys.argv``.

    Returns:
        0 when everything is mapped (and verified), 1 when verification failed or names are unmapped,
        2 for a usage, input or IO error (argparse errors included).

    Example:
        >>> main(["all", "--symbol", "net-symbol.json", "--params", "net-0000.params", "--settings",
        ...       "settings.json", "--states", "trainer.states", "--torch", "mypkg.models:net",
        ...       "--input-shape", "1,3,32,32", "--out", "migrated"])  # doctest: +SKIP
        0
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code in (0, None) else 2
    report = Report(args.command)
    with _progress(args):
        try:
            _RUN[args.command](args, report)
        except (MigrateError, OSError) as exc:
            report.error = str(exc)
    _emit(args, report)
    return report.exit_code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="migrate", description="Carry an MXNet Gluon model, its gluon-lr settings and optimizer state to PyTorch.",
        epilog="exit codes: 0 ok, 1 verification failed or names unmapped, 2 usage, input or IO error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, required, optional, out) in _COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        for flag in _FLAGS:
            if flag in required or flag in optional:
                command.add_argument(flag, required=flag in required, **_FLAGS[flag])
        if out is not None:
            command.add_argument("--out", required=True, metavar="PATH", help=out)
            command.add_argument("--force", action="store_true", help="replace existing outputs")
        command.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
        command.add_argument("--quiet", action="store_true", help="no progress bars on stderr")
    return parser


# ---------------------------------------------------------------- subcommands


def _run_map(args, report):
    model = _model(args)
    inputs.output_paths([args.out], _inputs(args), args.force)
    mapping = _mapping(args, model, report, show=True)
    _verify(args, model, mapping, report)
    _write(report, args.out, mapping.save)


def _run_groups(args, report):
    document, model = inputs.settings(args.settings), _model(args)
    inputs.output_paths([args.out], _inputs(args), args.force)
    mapping = _mapping(args, model, report, document)
    if not report.names_unmapped:
        groups = _groups(model, document, mapping, report)
        _write(report, args.out, lambda path: atomic.write_json(path, groups))


def _run_weights(args, report):
    model = _model(args)
    inputs.output_paths([args.out], _inputs(args), args.force)
    mapping = _mapping(args, model, report)
    if not report.names_unmapped:
        state_dict = _weights(args, model, mapping, report)
        _write(report, args.out, _weights_writer(args, state_dict))


def _run_optim(args, report):
    document, model = inputs.settings(args.settings), _model(args)
    inputs.output_paths([args.out], _inputs(args), args.force)
    mapping = _mapping(args, model, report, document)
    if not report.names_unmapped:
        saved = _optimizer(args, model, document, mapping, report)
        _write(report, args.out, lambda path: migration_folder.torch_save(saved, path))


def _run_verify(args, report):
    model = _model(args)
    _verify(args, model, _mapping(args, model, report), report)


def _run_all(args, report):
    document, model = inputs.settings(args.settings), _model(args)
    weights_name = migration_folder.WEIGHTS_SAFETENSORS if args.format == "safetensors" else migration_folder.WEIGHTS
    names = (migration_folder.MAPPING, weights_name, migration_folder.GROUPS, migration_folder.OPTIMIZER,
             migration_folder.REPORT_JSON, migration_folder.REPORT_TXT)
    paths = {name: os.path.join(args.out, name) for name in names}
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CliUsageError(f"--out {args.out!r}: exists and is not a folder; give a folder path")
    other = migration_folder.WEIGHTS if weights_name != migration_folder.WEIGHTS else \
        migration_folder.WEIGHTS_SAFETENSORS  # the other format's file would be loaded instead: replace only on --force
    inputs.output_paths([*paths.values(), os.path.join(args.out, other)], _inputs(args), args.force)
    report.sections["inputs"] = _fingerprints(args)
    mapping = _mapping(args, model, report, document, show=True)
    _verify(args, model, mapping, report)
    writes = {migration_folder.MAPPING: mapping.save}
    if report.exit_code == 0:  # no weights or optimizer for a model that is not equivalent
        state_dict = _weights(args, model, mapping, report)
        groups = _groups(model, document, mapping, report)
        saved = _optimizer(args, model, document, mapping, report)
        writes.update({weights_name: _weights_writer(args, state_dict),
                       migration_folder.GROUPS: lambda path: atomic.write_json(path, groups),
                       migration_folder.OPTIMIZER: lambda path: migration_folder.torch_save(saved, path)})
    os.makedirs(args.out, exist_ok=True)
    for name, write in writes.items():
        _write(report, paths[name], write)
    stale = (migration_folder.WEIGHTS, migration_folder.WEIGHTS_SAFETENSORS, migration_folder.GROUPS,
             migration_folder.OPTIMIZER)
    _remove_stale(report, [os.path.join(args.out, n) for n in stale])
    report.outputs += [paths[migration_folder.REPORT_JSON], paths[migration_folder.REPORT_TXT]]
    atomic.write_json(paths[migration_folder.REPORT_JSON], _jsonable(report.to_dict()))
    atomic.write_text(paths[migration_folder.REPORT_TXT], report.render() + "\n")


_RUN = {"map": _run_map, "groups": _run_groups, "weights": _run_weights, "optim": _run_optim,
        "verify": _run_verify, "all": _run_all}


# ---------------------------------------------------------------- shared steps


def _model(args):
    with _stage(args, "loading the torch model"):
        return inputs.torch_model(args.torch, args.kwargs)


def _inputs(args) -> dict:
    """Flag -> path of every input file given (outputs must not be one of them)."""
    flags = ("--symbol", "--params", "--settings", "--states", "--mapping", "--torch")
    return {flag: getattr(args, flag[2:], None) for flag in flags if getattr(args, flag[2:], None)}


def _mapping(args, model, report, document=None, show=False):
    """The mapping of ``--mapping``, or matched from the MXNet files; records it and the unmapped names."""
    if getattr(args, "mapping", None):
        mapping, source = inputs.loaded_mapping(args.mapping, model, document), args.mapping
    else:
        inputs.mapping_needs(args)
        shapes, dtypes = inputs.input_shapes(args.input_shape)
        with _stage(args, "exporting both models to ONNX and matching"):
            mapping, source = name_mapping(inputs.mx_files(args), model, shapes, input_dtypes=dtypes), "matched"
    report.unmapped = inputs.unmapped_names(mapping, model, document)
    report.checks["equivalent"] = not mapping.differences
    report.sections["mapping"] = {"source": source, "mapped": len(mapping), "differences": mapping.differences,
                                  "torch_defaults": mapping.torch_defaults,
                                  "entries": {name: mapping[name] for name in mapping}}
    if show:
        report.text.append(str(mapping))
    return mapping


def _verify(args, model, mapping, report):
    """Numeric verification (skipped while names are unmapped: the weights cannot be copied)."""
    if report.names_unmapped:
        report.text.append("verification skipped: names are unmapped, the weights cannot be copied")
        return
    shapes, dtypes = inputs.input_shapes(args.input_shape)
    with _stage(args, "verifying node by node"):
        result = verify(inputs.mx_files(args), model, mapping, shapes, input_dtypes=dtypes)
    first = result.first_divergence
    report.checks["verified"] = result.ok
    report.sections["verify"] = {"ok": result.ok, "max_abs_diff": result.max_abs_diff, "atol": result.atol,
                                 "nodes": len(result.rows), "first_divergence": first and {
                                     "mxnet": first.mx_node, "torch": first.torch_node,
                                     "max_abs_diff": first.max_abs_diff, "note": first.note},
                                 "rows": result.to_dict()["rows"]}
    report.text.append(str(result))


def _weights(args, model, mapping, report) -> dict:
    """The model's whole state_dict after copying the MXNet weights in by the mapping."""
    with _stage(args, "converting the weights"):
        path = inputs.existing_file("--params", args.params, "the NAME-0000.params HybridBlock.export wrote")
        converted = convert_weights(path, mapping, model)
        model.load_state_dict(converted, strict=False)
    state_dict = {key: value.detach().clone() for key, value in model.state_dict().items()}
    kept = sorted(set(state_dict) - set(converted))
    report.sections["weights"] = {"tensors": len(state_dict), "converted": len(converted),
                                  "kept_from_torch": kept}
    report.text.append(f"weights: {len(converted)} of {len(state_dict)} tensors from {args.params}"
                       + (f"; kept from the torch model: {', '.join(kept)}" if kept else ""))
    return state_dict


def _groups(model, document, mapping, report) -> dict:
    """The param groups as JSON (torch names, absolute lr and weight_decay, multipliers) plus the frozen set."""
    groups = param_groups(model, document, mapping)
    named = dict(model.named_parameters())
    names = {id(param): name for name, param in named.items()}
    rows = [{"params": [names[id(p)] for p in g["params"]], "mx_names": g["mx_names"], "lr": g["lr"],
             "weight_decay": g["weight_decay"], "lr_mult": g["lr_mult"], "wd_mult": g["wd_mult"]} for g in groups]
    frozen = [{"torch": mapping[name], "mxnet": name} for name, entry in document["params"].items()
              if entry["frozen"] and mapping[name] in named]
    report.sections["groups"] = {"count": len(rows), "params": sum(len(r["params"]) for r in rows),
                                 "frozen": len(frozen)}
    table = [f"{'group':>5}  {'lr':>10}  {'weight_decay':>12}  {'lr_mult':>7}  {'wd_mult':>7}  params"]
    table += [f"{i:>5}  {r['lr']:>10.4g}  {r['weight_decay']:>12.4g}  {r['lr_mult']:>7g}  {r['wd_mult']:>7g}  "
              f"{', '.join(r['params'])}" for i, r in enumerate(rows)]
    table.append(f"frozen (requires_grad=False): {', '.join(f['torch'] for f in frozen) or 'none'}")
    report.text.append("\n".join(table))
    return {"format": "gluon-lr-param-groups", "schema_version": 1, "groups": rows, "frozen": frozen}


def _optimizer(args, model, document, mapping, report) -> dict:
    """The exact torch optimizer with the converted MXNet state and its scheduler, as ``optimizer.pt`` holds them."""
    optimizer, filled = torch_optimizer(model, document, mapping), 0
    if getattr(args, "states", None):
        with _stage(args, "converting the optimizer state"):
            path = inputs.existing_file("--states", args.states, "the file LrTrainer.save_states wrote")
            try:
                filled = convert_optimizer_state(path, document, mapping, optimizer)
            except MigrateError as exc:
                raise InputFileError(f"--states {args.states!r}: {exc}") from None
    scheduler = torch_lr_scheduler(optimizer, document)
    lrs, rescale = [group["lr"] for group in optimizer.param_groups], document["optimizer"]["rescale_grad"]
    report.sections["optimizer"] = {"class": f"migrate.{type(optimizer).__name__}", "mxnet": document["optimizer"]
                                    ["name"], "states": getattr(args, "states", None), "states_converted": filled,
                                    "num_update": scheduler.num_update, "next_lr": lrs, "rescale_grad": rescale}
    report.text.append(f"optimizer: migrate {type(optimizer).__name__} (MXNet {document['optimizer']['name']}, "
                       f"exact); {filled} parameter states converted; resumes at update {scheduler.num_update}; "
                       f"next lr per group: {', '.join(f'{lr:.4g}' for lr in lrs)}; gradients times "
                       f"rescale_grad {rescale:g} (MXNet's 1/batch_size: sum the loss over the batch)")
    return migration_folder.optimizer_document(optimizer, scheduler, document, mapping)


def _write(report, path, write):
    """Write one output atomically (``write(path)`` does it) and record it."""
    write(path)
    report.outputs.append(path)


def _weights_writer(args, state_dict):
    """The writer of the weights file in the format --format names."""
    if args.format == "safetensors":
        return lambda path: _write_safetensors(args, state_dict, path)
    return lambda path: migration_folder.torch_save(state_dict, path)


def _write_safetensors(args, state_dict, path):
    """write_state_dict with a bytes bar (count, rate) on stderr, shown as _progress shows its bar."""
    from tqdm import tqdm
    total = sum(v.numel() * v.element_size() for v in state_dict.values())
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False,
              desc=f"writing {os.path.basename(path)}", disable=not getattr(args, "bars", False)) as bar:
        write_state_dict(state_dict, path, progress=lambda done: bar.update(done - bar.n))
        return bar.n


def _remove_stale(report, paths):
    """With --force, outputs of an earlier run that this run did not write would mislead: remove them."""
    for path in paths:
        if path not in report.outputs and os.path.exists(path):
            os.remove(path)
            report.text.append(f"removed {path} of an earlier run (not valid for this one)")


def _fingerprints(args) -> dict:
    return {flag: {"path": path, "sha256": atomic.sha256(path)} for flag, path in _inputs(args).items()
            if os.path.isfile(path)}


def _jsonable(value):
    """``value`` with non-finite floats as strings (JSON has no inf/nan)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


@contextlib.contextmanager
def _progress(args):
    """A progress bar on stderr for the command's stages, off with --quiet or when stderr is not a terminal."""
    from tqdm import tqdm
    args.bars = not args.quiet and sys.stderr.isatty()
    args.bar = tqdm(desc=f"migrate {args.command}", file=sys.stderr, disable=not args.bars,
                    bar_format="{desc}: {n_fmt} stages done, {elapsed}", leave=False)
    try:
        yield
    finally:
        args.bar.close()


@contextlib.contextmanager
def _stage(args, label):
    args.bar.set_description_str(f"migrate {args.command}: {label}")
    yield
    args.bar.update(1)


def _emit(args, report):
    """stdout: the report (or one JSON document); stderr: the error and the status line."""
    if args.json:
        print(json.dumps(_jsonable(report.to_dict()), indent=1))
    elif report.error is None:
        print(report.render())
    if report.error is not None:
        print(f"migrate {args.command}: error: {report.error}", file=sys.stderr)
    written = f"; wrote {', '.join(report.outputs)}" if report.outputs else ""
    print(f"migrate {args.command}: {report.status() if report.error is None else 'ERROR'}{written}",
          file=sys.stderr)
