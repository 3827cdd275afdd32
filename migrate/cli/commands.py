"""The ``migrate`` command: carry an MXNet Gluon model, its gluon-lr settings and optimizer state to PyTorch.

Subcommands: ``map`` (name mapping + verification), ``groups`` (param groups), ``weights`` (state_dict), ``optim``
(optimizer and scheduler with the MXNet state), ``verify`` (numeric check of a mapping), ``all`` (everything into
a folder with a report; ``--torch generate`` writes the torch model too) and ``generate`` (a torch module's source).
``check`` trains both models K steps on one batch and compares them tensor by tensor (``all --check-training K``).
``data`` (``migrate data convert|index``: MXNet RecordIO datasets without MXNet) lives in ``data_commands``.
Real output goes to stdout (``--json``: one document with ``schema_version``), messages and progress bars to stderr.
Exit codes: 0 ok, 1 verification failed or names unmapped, 2 usage, input or IO error, 130 interrupted (Ctrl-C or
SIGTERM; nothing is left half-written).

Every flag and output folder is checked before the work starts; ``all`` builds its folder under a temporary name and
renames it when complete (``migrate.staged_folder``; so does ``data convert``); the other subcommands write their one
file atomically.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import warnings

import numpy as np

from mxformats.errors import LrTrainerError
from mxformats import atomic
from migrate import (check_training, control_from_mxnet, convert_optimizer_state, generate_torch, migration_folder,
                     name_mapping, param_groups, torch_lr_scheduler, torch_optimizer, verify)
from migrate.cli import data_commands, inputs, interrupts
from migrate.cli.report import Report
from migrate.check.training import MAX_STEPS
from migrate.errors import (CliUsageError, InputFileError, LabelsError, MigrateError, MXNetRequiredError,
                            OutputPathError, StatesOrderWarning)
from migrate.mapping import (EXPORTED_WITH_MXNET, converted_keys, files_reader, generated_mapping, load_mxnet_weights,
                             model_source, write_state_dict)
from migrate.mapping.input_transforms import input_transform_cause
from migrate.mapping.node_outputs import seeded_inputs
from migrate.staged_folder import StagedFolder, pause_point

__all__ = ["main"]

GENERATED = "model.py"  # the file `migrate all --torch generate` writes into its output folder

_FLAGS = {  # flag -> argparse keywords; each subcommand takes the flags named in _COMMANDS
    "--symbol": dict(metavar="FILE", help="MXNet NAME-symbol.json (HybridBlock.export or "
                     "Module.save_checkpoint: loss heads and labels are cut)"),
    "--params": dict(metavar="FILE", help="MXNet NAME-0000.params (HybridBlock.export or "
                     "Module.save_checkpoint)"),
    "--settings": dict(metavar="FILE", help="settings file (LrTrainer.export_settings or "
                     "gluon_lr.export_settings)"),
    "--states": dict(metavar="FILE", help="optimizer states (LrTrainer.save_states, "
                     "Trainer.save_states or Module.save_optimizer_states)"),
    "--assume-states-order": dict(action="store_true", help="convert a stock gluon.Trainer's --states that name no "
                                  "parameters (saved before gluon_lr.export_settings) by index, assuming the "
                                  "settings' parameter order; refused without it"),
    "--torch": dict(metavar="MODULE:CALLABLE|FILE|generate", help="torch model: a factory such as "
                    "torchvision.models:resnet18, a TorchScript file (torch.jit.save), or 'generate' (`all` and "
                    "`check` only: write OUT/model.py from the MXNet graph with migrate.generate_torch and use it)"),
    "--kwargs": dict(default="{}", metavar="JSON", help="JSON object of keyword arguments for the factory"),
    "--input-shape": dict(action="append", metavar="N,C,H,W", help="input shape; repeat for several inputs "
                          "(integer inputs: append ':int64')"),
    "--mapping": dict(metavar="FILE", help="mapping file from `migrate map`: skips matching the models"),
    "--steps": dict(type=int, default=1, metavar="K", help="optimizer steps to compare: weights, optimizer states and "
                    "running statistics after each (default 1)"),
    "--labels": dict(metavar="FILE.npy", help="labels of the batch (numpy.save): integer class ids of shape (B,) "
                     "(softmax cross-entropy) or float targets of the output's shape (squared error); default: a "
                     "fixed random projection of the outputs"),
    "--loss": dict(choices=("sum", "mean"), default="sum", help="how the torch training reduces the loss over the "
                   "batch: sum (MXNet's convention, gradients then times rescale_grad 1/B; default) or mean"),
    "--float64": dict(action="store_true", help="train both models in float64 and judge by the tolerance alone: no "
                      "rounding hides a difference, even where float32's is large (the notes name such tensors); "
                      "default float32, where a difference counts beyond 10x the rounding noise that control runs "
                      "(each framework against itself, weights times 1 + 1e-5 x noise) measure per tensor"),
    "--check-training": dict(type=int, default=None, metavar="K", help="also train both models K steps on one batch "
                             "of --input-shape and compare them tensor by tensor (as `migrate check`)"),
    "--format": dict(choices=("pt", "safetensors"), default=None, help="weights file format: safetensors "
                     "(default; written tensor by tensor, loads zero-copy: weights.safetensors) or pt (a torch.save "
                     "pickle, weights.pt; `weights --out NAME.pt` picks it too)"),
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
              ("--settings", "--torch"), ("--states", "--assume-states-order", "--kwargs", "--mapping", "--symbol",
                                          "--params", "--input-shape"), "optimizer.pt to write"),
    "verify": ("copy the weights by the mapping and compare both models node by node",
               ("--symbol", "--params", "--torch", "--input-shape"), ("--kwargs", "--mapping"), None),
    "all": ("everything into one folder: mapping, weights, param groups, optimizer, report",
            ("--symbol", "--params", "--settings", "--torch", "--input-shape"),
            ("--states", "--assume-states-order", "--kwargs", "--mapping", "--format", "--check-training"),
            "output folder: built under a temporary name beside it and renamed when complete (its parent must exist)"),
    "check": ("train both models K steps on one batch of --input-shape and compare forward outputs, loss, gradients, "
              "weights, optimizer states and running statistics, each against its float32 rounding noise; name the "
              "first difference and its likely cause",
              ("--symbol", "--params", "--settings", "--torch", "--input-shape"),
              ("--states", "--assume-states-order", "--kwargs", "--mapping", "--steps", "--labels", "--loss",
               "--float64"), None),
    "generate": ("write a standalone torch module (readable source, MXNet's training semantics) for the MXNet model",
                 ("--symbol", "--params", "--input-shape"), (), "model.py to write"),
}


def main(argv=None) -> int:
    """Run the ``migrate`` command line and return its exit code.

    Args:
        argv: The arguments after the program name; None reads ``sys.argv``.

    Returns:
        0 when everything is mapped (and verified), 1 when verification failed, names are unmapped or something
        the MXNet training held did not cross to torch (listed under "not carried to torch"), 2 for a usage, input
        or IO error (argparse errors included), 130 when interrupted (SIGINT or SIGTERM).

    Examples:
        >>> main(["all", "--symbol", "net-symbol.json", "--params", "net-0000.params", "--settings",
        ...       "settings.json", "--states", "trainer.states", "--torch", "mypkg.models:net",
        ...       "--input-shape", "1,3,32,32", "--out", "migrated"])  # doctest: +SKIP
        0
    """
    if not (sys.argv[1:] if argv is None else argv):  # no subcommand: the usage, each subcommand on one line
        parser = _parser()
        parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=1000)
        parser.print_help(sys.stderr)
        return 2
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code in (0, None) else 2
    report = Report(args.command)
    out = getattr(args, "out", None) or getattr(args, "data_out", None)  # its folder: leftovers removed on the way out
    with interrupts.Interrupts(args.command, out) as guard, _progress(args), _grad_mode_kept():
        try:  # a signal raises KeyboardInterrupt from guard.work() until guard.finish(), then none (interrupts)
            try:
                guard.work()
                _check_flags(args)
                _RUN[args.command](args, report)
                guard.finish()
            except (MigrateError, LrTrainerError, MXNetRequiredError, OSError) as exc:  # typed input errors;
                guard.finish()  # OSError: the system refused
                report.error = str(exc)
            except Exception as exc:  # last resort: a bug or a library's raw error still ends in one line, exit 2
                guard.finish()
                report.error = (f"unexpected {type(exc).__name__}: "
                                f"{str(exc).splitlines()[0][:300] if str(exc) else ''} (inputs are unchanged and "
                                f"nothing was written; please report this with the command)")
        except KeyboardInterrupt:
            guard.finish()
            report.interrupted = True
        if report.error is not None or report.interrupted:
            report.outputs = []  # single files are written last and atomically; `all` removed its staged folder
        _emit(args, report)
    return report.exit_code


_WHAT = {"--symbol": "the NAME-symbol.json HybridBlock.export wrote",
         "--params": "the NAME-0000.params HybridBlock.export wrote",
         "--settings": "the JSON file LrTrainer.export_settings wrote",
         "--states": "the file LrTrainer.save_states wrote", "--mapping": "the mapping file `migrate map` wrote",
         "--labels": "a .npy file numpy.save wrote"}


def _check_flags(args) -> None:
    """The cheap checks of every flag, before any model is loaded: shapes, --kwargs, input files."""
    if getattr(args, "format", "absent") is None:  # weights --out NAME.pt: the suffix asks for a pickle
        out = getattr(args, "out", "") or ""
        args.format = "pt" if args.command == "weights" and out.endswith((".pt", ".pth")) else "safetensors"
    if getattr(args, "input_shape", None):
        inputs.input_shapes(args.input_shape)
    inputs.kwargs_object(getattr(args, "kwargs", "{}"))
    for flag in ("--steps", "--check-training"):
        steps = getattr(args, flag[2:].replace("-", "_"), None)
        if steps is not None and not 1 <= steps <= MAX_STEPS:
            raise CliUsageError(f"{flag} {str(steps)[:40]}: expected a number of optimizer steps from 1 to "
                                f"{MAX_STEPS} (each trains both models and compares every tensor)")
    for flag, path in _inputs(args).items():
        if flag != "--torch":
            inputs.existing_file(flag, path, _WHAT[flag])
    if getattr(args, "out", None) is not None and args.command != "all":
        inputs.output_paths([args.out], _inputs(args), args.force)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block): the error and where to read the usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="migrate", description="Carry an MXNet Gluon model, its gluon-lr settings and optimizer state to PyTorch.",
        epilog="exit codes: 0 ok, 1 verification failed, names unmapped or not carried to torch, 2 usage, input "
               "or IO error, 130 interrupted")
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
    data_commands.add_parser(sub)
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
    weights_name = migration_folder.WEIGHTS if args.format == "pt" else migration_folder.WEIGHTS_SAFETENSORS
    names = (migration_folder.MAPPING, weights_name, migration_folder.GROUPS, migration_folder.OPTIMIZER,
             migration_folder.REPORT_JSON, migration_folder.REPORT_TXT) + ((GENERATED,) if args.torch == "generate" else ())
    other_format = {migration_folder.WEIGHTS, migration_folder.WEIGHTS_SAFETENSORS} - {weights_name}
    folder = StagedFolder(args.out, names + tuple(other_format), args.force)  # an earlier run's in the other format
    folder.check()
    paths = {name: os.path.join(args.out, name) for name in names}
    inputs.output_paths(paths.values(), _inputs(args), force=True, check_folder=False)
    document = inputs.settings(args.settings)
    model = None if args.torch == "generate" else _model(args)
    report.sections["inputs"] = _fingerprints(args)
    with folder:
        pause_point("staged")
        if args.torch == "generate":
            model = _generated_model(args, folder.file(GENERATED))
            report.outputs.append(os.path.join(args.out, GENERATED))
        mapping = _mapping(args, model, report, document, show=True)
        _verify(args, model, mapping, report)
        if args.check_training is not None:
            _training_check(args, model, mapping, document, report, args.check_training)
        writes = {migration_folder.MAPPING: mapping.save}
        if _equivalent(report):  # no weights or optimizer for a model that is not equivalent
            state_dict = _weights(args, model, mapping, report)
            groups = _groups(model, document, mapping, report)
            saved = _optimizer(args, model, document, mapping, report)
            writes.update({weights_name: _weights_writer(args, state_dict),
                           migration_folder.GROUPS: lambda path: atomic.write_json(path, groups),
                           migration_folder.OPTIMIZER: lambda path: migration_folder.torch_save(saved, path)})
        for name, write in writes.items():
            _write(report, folder.file(name), write, shown=paths[name])
            pause_point(f"wrote-{name}")
        report.outputs += [paths[migration_folder.REPORT_JSON], paths[migration_folder.REPORT_TXT]]
        _write(report, folder.file(migration_folder.REPORT_JSON),
               lambda path: atomic.write_json(path, _jsonable(report.to_dict())), shown=None)
        _write(report, folder.file(migration_folder.REPORT_TXT),
               lambda path: atomic.write_text(path, report.render() + "\n"), shown=None)
        folder.commit()


def _equivalent(report) -> bool:
    """Mapped, equivalent and within tolerance where compared (skipped nodes make ``verified`` false, exit 1, but
    the outputs are still written: a TorchScript model is compared at its final output only)."""
    return (report.error is None and not report.names_unmapped and report.checks.get("equivalent", True)
            and report.sections.get("verify", {}).get("ok", False))


def _check_needs_mxnet() -> None:
    """``check`` trains the MXNet model: MXNetRequiredError where MXNet does not read the files, before reading."""
    if files_reader() != EXPORTED_WITH_MXNET:
        raise MXNetRequiredError.for_("training the MXNet model (migrate check, --check-training)")


def _run_check(args, report):
    _check_needs_mxnet()
    document, labels = inputs.settings(args.settings), _labels(args)
    with tempfile.TemporaryDirectory(prefix="migrate-check-") as folder:  # --torch generate: model.py lives here
        model = _generated_model(args, os.path.join(folder, GENERATED)) if args.torch == "generate" else _model(args)
        mapping = _mapping(args, model, report, document)
        try:
            _training_check(args, model, mapping, document, report, args.steps, labels, args.loss, args.float64)
        except LabelsError as exc:
            raise LabelsError(f"--labels {args.labels!r}: {str(exc).removeprefix('labels: ')}") from None


def _training_check(args, model, mapping, document, report, steps, labels=None, loss="sum", float64=False):
    """``check_training`` of the MXNet files against ``model``: its table, and the ``training`` check (exit 1 when a
    tensor diverges). Skipped while names are unmapped."""
    if report.names_unmapped:
        report.text.append("training check skipped: names are unmapped, the weights cannot be copied")
        return
    shapes, dtypes = inputs.input_shapes(args.input_shape)
    _check_needs_mxnet()
    with _stage(args, f"training both models {steps} step(s) and comparing"):
        result = check_training(_mx_source(args), model, shapes, input_dtypes=dtypes, labels=labels, loss=loss,
                                settings=document, states=_states_path(args), mapping=mapping, steps=steps,
                                float64=float64, assume_order=args.assume_states_order)
    report.checks["training"] = result.ok
    report.sections["check"] = result.to_dict()
    report.text.append(str(result))


def _labels(args):
    """The array of --labels (a .npy file, read without pickles), or None."""
    if not getattr(args, "labels", None):
        return None
    try:
        return np.load(args.labels, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputFileError(f"--labels {args.labels!r}: not a .npy array numpy.save writes ({str(exc)[:150]}); save "
                             f"the labels with numpy.save") from None


def _run_generate(args, report):
    inputs.output_paths([args.out], _inputs(args), args.force)
    model = _generated_model(args, args.out)
    _record_reader(report, files_reader())
    report.outputs.append(args.out)
    report.text.append(f"generated {type(model).__name__} in {args.out}: {len(model.MXNET_NAMES)} MXNet "
                       f"parameters and states as state_dict keys (MXNET_NAMES in the file maps them)")


_RUN = {"map": _run_map, "groups": _run_groups, "weights": _run_weights, "optim": _run_optim,
        "verify": _run_verify, "all": _run_all, "generate": _run_generate, "check": _run_check}
_RUN["data"] = data_commands.run


# ---------------------------------------------------------------- shared steps


def _model(args):
    inputs.check_memory(args)
    with _stage(args, "loading the torch model"):
        return inputs.torch_model(args.torch, args.kwargs)


def _generated_model(args, path):
    """``migrate.generate_torch`` of the MXNet files, written to ``path`` (inside the staged folder of ``all``)."""
    shapes, dtypes = inputs.input_shapes(args.input_shape)
    with _stage(args, "generating the torch module"):
        return generate_torch(inputs.mx_files(args), shapes, path, input_dtypes=dtypes)


def _inputs(args) -> dict:
    """Flag -> path of every input file given (outputs must not be one of them)."""
    flags = ("--symbol", "--params", "--settings", "--states", "--mapping", "--torch", "--labels")
    return {flag: getattr(args, flag[2:], None) for flag in flags if getattr(args, flag[2:], None)}


def _mx_source(args):
    """The MXNet model of --symbol/--params, read once and shared by matching, verification and conversion."""
    if getattr(args, "mx_source", None) is None:
        shapes, dtypes = inputs.input_shapes(args.input_shape)
        with _stage(args, "reading the MXNet model"):
            args.mx_source = model_source(inputs.mx_files(args), shapes, dtypes)
    return args.mx_source


def _mapping(args, model, report, document=None, show=False):
    """The mapping of ``--mapping``, or matched from the MXNet files; records it and the unmapped names."""
    if getattr(args, "mapping", None):
        mapping, source = inputs.loaded_mapping(args.mapping, model, document), args.mapping
    else:
        inputs.mapping_needs(args)
        shapes, dtypes = inputs.input_shapes(args.input_shape)
        mx_source = _mx_source(args)
        _record_reader(report, mx_source.reader)
        if args.torch == "generate":  # the module is the graph's own translation: its MXNET_NAMES are the mapping
            mapping, source = generated_mapping(mx_source, model), "generated"
        else:
            with _stage(args, "exporting both models to ONNX (structure only) and matching", unit="node") as tick:
                mapping, source = name_mapping(mx_source, model, shapes, input_dtypes=dtypes, progress=tick), "matched"
    report.unmapped = inputs.unmapped_names(mapping, model, document)
    report.checks["equivalent"] = not mapping.differences
    report.sections["mapping"] = {"source": source, "mapped": len(mapping), "differences": mapping.differences,
                                  "torch_defaults": mapping.torch_defaults, "notes": mapping.notes,
                                  "entries": {name: mapping[name] for name in mapping}}
    report.text += mapping.notes if not show else []
    if show:
        report.text.append(str(mapping))
    return mapping


def _verify(args, model, mapping, report):
    """Numeric verification (skipped while names are unmapped: the weights cannot be copied)."""
    if report.names_unmapped:
        report.text.append("verification skipped: names are unmapped, the weights cannot be copied")
        return
    shapes, dtypes = inputs.input_shapes(args.input_shape)
    mx_source = _mx_source(args)
    _record_reader(report, mx_source.reader)
    if mx_source.without_mxnet and args.torch == "generate":
        _generated_needs_no_verification(report)
        return
    with _stage(args, "verifying node by node", unit="node") as tick:
        # without MXNet, verify compares with the graph's torch translation
        result = verify(mx_source, model, mapping, shapes, input_dtypes=dtypes, in_place=True, progress=tick)
    args.weights_loaded = True  # verify copied the MXNet weights into the model itself
    first = result.first_divergence
    cause = first and input_transform_cause(mx_source, model, first.mx_node, first.torch_node,
                                            seeded_inputs(shapes, dtypes, mapping, 0))  # verify's input (seed 0)
    compared_with = "the graph's torch translation" if mx_source.without_mxnet else "MXNet"
    report.checks["verified"] = result.verified  # compared: a skipped node is not a passed one
    report.sections["verify"] = {"ok": result.ok, "compared_with": compared_with,
                                 "max_abs_diff": result.max_abs_diff, "atol": result.atol, "nodes": len(result.rows),
                                 "skipped": [r.mx_node for r in result.skipped],
                                 "passes": result.passes, "output_bytes": result.output_bytes,
                                 "first_divergence": first and {
                                     "mxnet": first.mx_node, "torch": first.torch_node,
                                     "max_abs_diff": first.max_abs_diff, "note": first.note, "cause": cause},
                                 "rows": result.to_dict()["rows"]}
    report.text.append(str(result) + (f"\n  likely cause: {cause}" if cause else ""))


def _record_reader(report, reader: str) -> None:
    """Say once, in the text and the JSON (``mxnet_graph``), which path read the MXNet model."""
    if "mxnet_graph" not in report.sections:
        report.sections["mxnet_graph"] = reader
        report.text.append(f"MXNet model: {reader}")


def _generated_needs_no_verification(report) -> None:
    """Without MXNet there is no MXNet run to compare with, and a generated module is the graph's own translation:
    comparing it with the translation would compare it with itself."""
    report.sections["verify"] = {"ok": True, "compared_with": None, "nodes": 0}
    report.text.append("verification: not run (no MXNet here, and the torch module is the graph's own translation, "
                       "op by op, by the translators tested against MXNet)")


def _weights(args, model, mapping, report) -> dict:
    """The model's whole state_dict (its own tensors, not a copy) after copying the MXNet weights in, tensor by
    tensor, by the mapping."""
    state_dict = model.state_dict()
    if getattr(args, "weights_loaded", False):
        converted = [key for key in converted_keys(mapping, model) if key in state_dict]
    else:
        params = _mx_source(args).params if getattr(args, "symbol", None) else inputs.existing_file(
            "--params", args.params, "the NAME-0000.params HybridBlock.export wrote")
        with _stage(args, "converting the weights", total=len(converted_keys(mapping, model)), unit="tensor") as tick:
            converted = load_mxnet_weights(model, params, mapping, progress=tick)
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
             "weight_decay": g["weight_decay"], "lr_mult": g["lr_mult"], "wd_mult": g["wd_mult"],
             "frozen": g["frozen"]} for g in groups]
    held = getattr(mapping, "held", {})
    frozen = [dict({"torch": names[id(p)], "mxnet": mx_name}, **({"held": held[mx_name]} if mx_name in held else {}))
              for g in groups if g["frozen"] for p, mx_name in zip(g["params"], g["mx_names"])]
    report.sections["groups"] = {"count": len(rows), "params": sum(len(r["params"]) for r in rows),
                                 "frozen": len(frozen)}
    table = [f"{'group':>5}  {'lr':>10}  {'weight_decay':>12}  {'lr_mult':>7}  {'wd_mult':>7}  params"]
    table += [f"{i:>5}  {r['lr']:>10.4g}  {r['weight_decay']:>12.4g}  {r['lr_mult']:>7g}  {r['wd_mult']:>7g}  "
              f"{', '.join(r['params'])}" for i, r in enumerate(rows)]
    shown = [f["torch"] + (f" (held at {f['held']:g}: MXNet fix_gamma=True)" if "held" in f else "") for f in frozen]
    table.append(f"frozen (requires_grad=False): {', '.join(shown) or 'none'}")
    report.text.append("\n".join(table))
    return {"format": "gluon-lr-param-groups", "schema_version": 1, "groups": rows, "frozen": frozen}


def _optimizer(args, model, document, mapping, report) -> dict:
    """The exact torch optimizer with the converted MXNet state and its scheduler, as ``optimizer.pt`` holds them."""
    optimizer, filled, notes = torch_optimizer(model, document, mapping), 0, []
    if getattr(args, "states", None):
        with _stage(args, "converting the optimizer state"):
            path = inputs.existing_file("--states", args.states, "the file LrTrainer.save_states wrote")
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", StatesOrderWarning)
                    filled = convert_optimizer_state(path, document, mapping, optimizer,
                                                     assume_order=args.assume_states_order)
            except MigrateError as exc:
                raise InputFileError(f"--states {args.states!r}: {exc}") from None
            notes = [f"--states {args.states}: {w.message}" for w in caught  # matched by index
                     if issubclass(w.category, StatesOrderWarning)]
            report.text += [f"note: {note}" for note in notes]
    control, report.lost = control_from_mxnet(model, optimizer, document, mapping, _states_path(args))
    scheduler = torch_lr_scheduler(optimizer, document)
    lrs, rescale = [group["lr"] for group in optimizer.param_groups], document["optimizer"]["rescale_grad"]
    report.sections["optimizer"] = {"class": f"migrate.{type(optimizer).__name__}", "mxnet": document["optimizer"]
                                    ["name"], "states": getattr(args, "states", None), "states_converted": filled,
                                    "num_update": scheduler.num_update, "next_lr": lrs, "rescale_grad": rescale,
                                    "notes": notes}
    report.text.append(f"optimizer: migrate {type(optimizer).__name__} (MXNet {document['optimizer']['name']}, "
                       f"exact); {filled} parameter states converted; resumes at update {scheduler.num_update}; "
                       f"next lr per group: {', '.join(f'{lr:.4g}' for lr in lrs)}; gradients times "
                       f"rescale_grad {rescale:g} (MXNet's 1/batch_size: sum the loss over the batch)")
    report.sections["optimizer"]["control"] = {"frozen": sorted(control.frozen), "masked_elements":
                                               control.masked_elements, "held_norm_layers": control.held_norm_layers}
    if control.frozen or control.masked_elements or control.held_norm_layers:
        report.text.append(f"held in torch: frozen {', '.join(sorted(control.frozen)) or 'none'}; masked "
                           f"{', '.join(f'{k} ({v})' for k, v in control.masked_elements.items()) or 'none'}; "
                           f"running statistics held: {', '.join(control.held_norm_layers) or 'none'}")
    return migration_folder.optimizer_document(optimizer, scheduler, document, mapping, control)


def _states_path(args):
    """The --states file (checked by then), or None."""
    return args.states if getattr(args, "states", None) else None


def _write(report, path, write, shown=""):
    """Write one output atomically (``write(path)`` does it) and record it as ``shown`` (default: ``path``; None:
    already recorded). A refusal of the system (disk full, permissions changed meanwhile) names the output."""
    try:
        write(path)
    except OSError as exc:
        raise OutputPathError(f"--out: cannot write {shown or path!r}: {exc.strerror or exc}; free space or choose "
                              f"another output path (nothing was left half-written)") from None
    if shown is not None:
        report.outputs.append(shown or path)


def _weights_writer(args, state_dict):
    """The writer of the weights file in the format --format names."""
    if args.format == "pt":
        return lambda path: migration_folder.torch_save(state_dict, path)
    return lambda path: _write_safetensors(args, state_dict, path)


def _write_safetensors(args, state_dict, path):
    """write_state_dict with a bytes bar (count, rate) on stderr, shown as _progress shows its bar."""
    from tqdm import tqdm
    total = sum(v.numel() * v.element_size() for v in state_dict.values())
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False,
              desc=f"writing {os.path.basename(path)}", disable=not getattr(args, "bars", False)) as bar:
        write_state_dict(state_dict, path, progress=lambda done: bar.update(done - bar.n))
        return bar.n


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
    """Progress bars on stderr (``_stage``), off with --quiet or when stderr is not a terminal."""
    args.bars = not args.quiet and sys.stderr.isatty()
    yield


@contextlib.contextmanager
def _grad_mode_kept():
    """torch's gradient mode as it was when the command started, however it ends: an interrupt raised inside
    ``torch.no_grad()``'s ``__enter__`` (after it switched gradients off, before ``__exit__`` was due) would leave them
    off in the program that called ``main``."""
    import torch
    enabled = torch.is_grad_enabled()
    try:
        yield
    finally:
        torch.set_grad_enabled(enabled)


@contextlib.contextmanager
def _stage(args, label, total=None, unit=None):
    """A tqdm bar on stderr for a stage that counts (``unit``; of ``total`` when known), with its rate, left on the
    terminal when done; yields ``tick(n)``. Stages without a unit show nothing."""
    from tqdm import tqdm
    with tqdm(desc=f"migrate {args.command}: {label}", total=total, unit=unit or "it", file=sys.stderr,
              disable=unit is None or not getattr(args, "bars", False)) as bar:
        yield bar.update


def _emit(args, report):
    """stdout: the report (or one JSON document); stderr: the error and the status line."""
    if args.json:
        print(json.dumps(_jsonable(report.to_dict()), indent=1))
    elif report.error is None and not report.interrupted:
        print(report.render())
    if report.error is not None:  # one line: the error names the flag or file, what was wrong and the fix
        print(f"migrate {args.command}: error: {' '.join(report.error.split())}", file=sys.stderr)
        return
    written = f"; wrote {', '.join(report.outputs)}" if report.outputs else ""
    print(f"migrate {args.command}: {report.status()}{written}", file=sys.stderr)
