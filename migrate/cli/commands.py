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
from migrate.cli.options import DataOptions, Options, options
from migrate.cli.report import Report
from migrate.errors import (InputFileError, LabelsError, MigrateError, MXNetRequiredError,
                            OutputPathError, StatesOrderWarning)
from migrate.mapping import converted_keys, generated_mapping, load_mxnet_weights, write_state_dict
from migrate.verification.input_transforms import input_transform_cause
from migrate.verification.nodes import seeded_inputs
from migrate.source import TRANSLATION, mxnet_reads_files
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
    with interrupts.Interrupts(args.command, out) as guard, _grad_mode_kept():
        try:  # a signal raises KeyboardInterrupt from guard.work() until guard.finish(), then none (interrupts)
            try:
                guard.work()
                _run(options(args), report)
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
        _emit(args.json, report)
    return report.exit_code


def _run(chosen: Options | DataOptions, report: Report) -> None:
    """Check the flags of a model command (cheap, before any model is loaded), then run the subcommand."""
    if isinstance(chosen, DataOptions):
        data_commands.run(chosen, report)
        return
    _check_flags(chosen)
    _RUN[chosen.command](chosen, report)


_WHAT = {"--symbol": "the NAME-symbol.json HybridBlock.export wrote",
         "--params": "the NAME-0000.params HybridBlock.export wrote",
         "--settings": "the JSON file LrTrainer.export_settings wrote",
         "--states": "the file LrTrainer.save_states wrote", "--mapping": "the mapping file `migrate map` wrote",
         "--labels": "a .npy file numpy.save wrote"}


def _check_flags(opts: Options) -> None:
    """The input files exist, and the output (but the folder of ``all``) may be written."""
    for flag, path in opts.input_files.items():
        if flag != "--torch":
            inputs.existing_file(flag, path, _WHAT[flag])
    if opts.out is not None and opts.command != "all":
        inputs.output_paths([opts.out], opts.input_files, opts.force)


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


def _run_map(opts, report):
    model = _model(opts)
    inputs.output_paths([opts.out], opts.input_files, opts.force)
    mx_model = inputs.MxModel(opts)
    mapping = _mapping(opts, model, report, mx_model, show=True)
    _verify(opts, model, mapping, report, mx_model)
    _write(report, opts.out, mapping.save)


def _run_groups(opts, report):
    document, model = inputs.settings(opts.settings), _model(opts)
    inputs.output_paths([opts.out], opts.input_files, opts.force)
    mapping = _mapping(opts, model, report, inputs.MxModel(opts), document)
    if not report.names_unmapped:
        groups = _groups(model, document, mapping)
        report.add_groups(groups)
        _write(report, opts.out, lambda path: atomic.write_json(path, groups))


def _run_weights(opts, report):
    model = _model(opts)
    inputs.output_paths([opts.out], opts.input_files, opts.force)
    mx_model = inputs.MxModel(opts)
    mapping = _mapping(opts, model, report, mx_model)
    if not report.names_unmapped:
        state_dict = _weights(opts, model, mapping, report, mx_model)
        _write(report, opts.out, _weights_writer(opts, state_dict))


def _run_optim(opts, report):
    document, model = inputs.settings(opts.settings), _model(opts)
    inputs.output_paths([opts.out], opts.input_files, opts.force)
    mapping = _mapping(opts, model, report, inputs.MxModel(opts), document)
    if not report.names_unmapped:
        saved = _optimizer(opts, model, document, mapping, report)
        _write(report, opts.out, lambda path: migration_folder.torch_save(saved, path))


def _run_verify(opts, report):
    model = _model(opts)
    mx_model = inputs.MxModel(opts)
    _verify(opts, model, _mapping(opts, model, report, mx_model), report, mx_model)


def _run_all(opts, report):
    weights_name = migration_folder.WEIGHTS if opts.weights_format == "pt" else migration_folder.WEIGHTS_SAFETENSORS
    names = (migration_folder.MAPPING, weights_name, migration_folder.GROUPS, migration_folder.OPTIMIZER,
             migration_folder.REPORT_JSON, migration_folder.REPORT_TXT) + ((GENERATED,) if opts.generated else ())
    other_format = {migration_folder.WEIGHTS, migration_folder.WEIGHTS_SAFETENSORS} - {weights_name}
    folder = StagedFolder(opts.out, names + tuple(other_format), opts.force)  # an earlier run's in the other format
    folder.check()
    paths = {name: os.path.join(opts.out, name) for name in names}
    inputs.output_paths(paths.values(), opts.input_files, force=True, check_folder=False)
    document = inputs.settings(opts.settings)
    model = None if opts.generated else _model(opts)
    report.sections["inputs"] = _fingerprints(opts)
    mx_model = inputs.MxModel(opts)
    with folder:
        pause_point("staged")
        if opts.generated:
            model = _generated_model(opts, folder.file(GENERATED), mx_model)
            report.outputs.append(os.path.join(opts.out, GENERATED))
        mapping = _mapping(opts, model, report, mx_model, document, show=True)
        loaded = _verify(opts, model, mapping, report, mx_model)
        if opts.check_training is not None:
            _training_check(opts, model, mapping, document, report, mx_model, opts.check_training)
        writes = {migration_folder.MAPPING: mapping.save}
        if _equivalent(report):  # no weights or optimizer for a model that is not equivalent
            writes.update(_migration_files(opts, model, document, mapping, report, mx_model, loaded, weights_name))
        for name, write in writes.items():
            _write(report, folder.file(name), write, shown=paths[name])
            pause_point(f"wrote-{name}")
        report.outputs += [paths[migration_folder.REPORT_JSON], paths[migration_folder.REPORT_TXT]]
        _write(report, folder.file(migration_folder.REPORT_JSON),
               lambda path: atomic.write_json(path, _jsonable(report.to_dict())), shown=None)
        _write(report, folder.file(migration_folder.REPORT_TXT),
               lambda path: atomic.write_text(path, report.render() + "\n"), shown=None)
        folder.commit()


def _migration_files(opts, model, document, mapping, report, mx_model, loaded, weights_name) -> dict:
    """File name -> writer of the weights, the param groups and the optimizer of ``all``."""
    state_dict = _weights(opts, model, mapping, report, mx_model, loaded)
    groups = _groups(model, document, mapping)
    report.add_groups(groups)
    saved = _optimizer(opts, model, document, mapping, report)
    return {weights_name: _weights_writer(opts, state_dict),
            migration_folder.GROUPS: lambda path: atomic.write_json(path, groups),
            migration_folder.OPTIMIZER: lambda path: migration_folder.torch_save(saved, path)}


def _equivalent(report) -> bool:
    """Mapped, equivalent and within tolerance where compared (skipped nodes make ``verified`` false, exit 1, but
    the outputs are still written: a TorchScript model is compared at its final output only)."""
    return (report.error is None and not report.names_unmapped and report.checks.get("equivalent", True)
            and report.sections.get("verify", {}).get("ok", False))


def _check_needs_mxnet() -> None:
    """``check`` trains the MXNet model: MXNetRequiredError where MXNet does not read the files, before reading."""
    if not mxnet_reads_files():
        raise MXNetRequiredError.for_("training the MXNet model (migrate check, --check-training)")


def _run_check(opts, report):
    _check_needs_mxnet()
    document, labels = inputs.settings(opts.settings), _labels(opts)
    with tempfile.TemporaryDirectory(prefix="migrate-check-") as folder:  # --torch generate: model.py lives here
        mx_model = inputs.MxModel(opts)
        model = _generated_model(opts, os.path.join(folder, GENERATED), mx_model) if opts.generated else _model(opts)
        mapping = _mapping(opts, model, report, mx_model, document)
        try:
            _training_check(opts, model, mapping, document, report, mx_model, opts.steps, labels)
        except LabelsError as exc:
            raise LabelsError(f"--labels {opts.labels!r}: {str(exc).removeprefix('labels: ')}") from None


def _training_check(opts, model, mapping, document, report, mx_model, steps, labels=None):
    """``check_training`` of the MXNet model against ``model``: its table, and the ``training`` check (exit 1 when a
    tensor diverges). Skipped while names are unmapped."""
    if report.names_unmapped:
        report.add_skipped("training check")
        return
    _check_needs_mxnet()
    with _stage(opts, f"training both models {steps} step(s) and comparing"):
        result = check_training(mx_model.source(), model, opts.input_shapes,
                                input_dtypes=opts.input_dtypes, labels=labels, loss=opts.loss, settings=document,
                                states=opts.states, mapping=mapping, steps=steps, float64=opts.float64,
                                assume_order=opts.assume_states_order)
    report.add_training(result)


def _labels(opts):
    """The array of --labels (a .npy file, read without pickles), or None."""
    if not opts.labels:
        return None
    try:
        return np.load(opts.labels, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputFileError(f"--labels {opts.labels!r}: not a .npy array numpy.save writes ({str(exc)[:150]}); save "
                             f"the labels with numpy.save") from None


def _run_generate(opts, report):
    inputs.output_paths([opts.out], opts.input_files, opts.force)
    mx_model = inputs.MxModel(opts)
    model = _generated_model(opts, opts.out, mx_model)
    report.add_mxnet_reader(mx_model.source().reader)
    report.add_generated(model, opts.out)


_RUN = {"map": _run_map, "groups": _run_groups, "weights": _run_weights, "optim": _run_optim,
        "verify": _run_verify, "all": _run_all, "generate": _run_generate, "check": _run_check}


# ---------------------------------------------------------------- shared steps


def _model(opts):
    inputs.check_memory(opts)
    with _stage(opts, "loading the torch model"):
        return inputs.torch_model(opts.torch, dict(opts.kwargs))


def _generated_model(opts, path, mx_model):
    """``migrate.generate_torch`` of the MXNet model (read once, shared with matching and verification), written
    to ``path`` (inside the staged folder of ``all``)."""
    with _stage(opts, "generating the torch module"):
        return generate_torch(mx_model.source(), opts.input_shapes, path, input_dtypes=opts.input_dtypes)


def _mapping(opts, model, report, mx_model, document=None, show=False):
    """The mapping of ``--mapping``, or matched with the MXNet model (``mx_model``, read then); the report records it
    and the unmapped names (``show``: its table too)."""
    if opts.mapping:
        mapping, origin = inputs.loaded_mapping(opts.mapping, model, document), opts.mapping
    else:
        inputs.mapping_needs(opts)
        source = mx_model.source()
        report.add_mxnet_reader(source.reader)
        if opts.generated:  # the module is the graph's own translation: its MXNET_NAMES are the mapping
            mapping, origin = generated_mapping(source, model), "generated"
        else:
            with _stage(opts, "exporting both models to ONNX (structure only) and matching", unit="node") as tick:
                mapping, origin = name_mapping(source, model, opts.input_shapes, input_dtypes=opts.input_dtypes,
                                               progress=tick), "matched"
    report.add_mapping(mapping, origin, inputs.unmapped_names(mapping, model, document), show)
    return mapping


def _verify(opts, model, mapping, report, mx_model) -> bool:
    """Numeric verification against the MXNet model (skipped while names are unmapped: the weights cannot be copied);
    True when it ran, having copied the MXNet weights into ``model`` itself."""
    if report.names_unmapped:
        report.add_skipped("verification")
        return False
    source = mx_model.source()
    report.add_mxnet_reader(source.reader)
    if opts.generated and source.compared_with == TRANSLATION:  # the module is that translation
        report.add_generated_unverified()
        return False
    with _stage(opts, "verifying node by node", unit="node") as tick:
        result = verify(source, model, mapping, opts.input_shapes, input_dtypes=opts.input_dtypes, in_place=True,
                        progress=tick)
    first = result.first_divergence
    cause = first and input_transform_cause(source, model, first.mx_node, first.torch_node,
                                            seeded_inputs(opts.input_shapes, opts.input_dtypes, mapping, 0))
    report.add_verify(result, source.compared_with, cause)
    return True


def _weights(opts, model, mapping, report, mx_model, loaded=False) -> dict:
    """The model's whole state_dict (its own tensors, not a copy) after copying the MXNet weights in, tensor by
    tensor, by the mapping (``loaded``: verification copied them already): those of the MXNet model with --symbol,
    else of the --params file."""
    state_dict = model.state_dict()
    if loaded:
        converted = [key for key in converted_keys(mapping, model) if key in state_dict]
    else:
        params = mx_model.source().params if opts.symbol else inputs.existing_file(
            "--params", opts.params, "the NAME-0000.params HybridBlock.export wrote")
        with _stage(opts, "converting the weights", total=len(converted_keys(mapping, model)), unit="tensor") as tick:
            converted = load_mxnet_weights(model, params, mapping, progress=tick)
    report.add_weights(len(state_dict), len(converted), sorted(set(state_dict) - set(converted)), opts.params)
    return state_dict


def _groups(model, document, mapping) -> dict:
    """The param groups file: torch names, absolute lr and weight_decay, multipliers, plus the frozen set."""
    groups = param_groups(model, document, mapping)
    names = {id(param): name for name, param in model.named_parameters()}
    rows = [{"params": [names[id(p)] for p in g["params"]], "mx_names": g["mx_names"], "lr": g["lr"],
             "weight_decay": g["weight_decay"], "lr_mult": g["lr_mult"], "wd_mult": g["wd_mult"],
             "frozen": g["frozen"]} for g in groups]
    held = getattr(mapping, "held", {})
    frozen = [dict({"torch": names[id(p)], "mxnet": mx_name}, **({"held": held[mx_name]} if mx_name in held else {}))
              for g in groups if g["frozen"] for p, mx_name in zip(g["params"], g["mx_names"])]
    return {"format": "gluon-lr-param-groups", "schema_version": 1, "groups": rows, "frozen": frozen}


def _optimizer(opts, model, document, mapping, report) -> dict:
    """The exact torch optimizer with the converted MXNet state and its scheduler, as ``optimizer.pt`` holds them."""
    optimizer = torch_optimizer(model, document, mapping)
    filled, notes = _converted_states(opts, document, mapping, optimizer) if opts.states else (0, [])
    control, lost = control_from_mxnet(model, optimizer, document, mapping, opts.states)
    scheduler = torch_lr_scheduler(optimizer, document)
    report.add_optimizer(optimizer, scheduler, document, opts.states, filled, notes, control, lost)
    return migration_folder.optimizer_document(optimizer, scheduler, document, mapping, control)


def _converted_states(opts, document, mapping, optimizer) -> tuple[int, list]:
    """Fill ``optimizer`` with the state of --states: (parameter states converted, notes on the way)."""
    with _stage(opts, "converting the optimizer state"):
        path = inputs.existing_file("--states", opts.states, "the file LrTrainer.save_states wrote")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", StatesOrderWarning)
                filled = convert_optimizer_state(path, document, mapping, optimizer,
                                                 assume_order=opts.assume_states_order)
        except MigrateError as exc:
            raise InputFileError(f"--states {opts.states!r}: {exc}") from None
    return filled, [f"--states {opts.states}: {w.message}" for w in caught  # matched by index
                    if issubclass(w.category, StatesOrderWarning)]


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


def _weights_writer(opts, state_dict):
    """The writer of the weights file in the format --format names."""
    if opts.weights_format == "pt":
        return lambda path: migration_folder.torch_save(state_dict, path)
    return lambda path: _write_safetensors(opts, state_dict, path)


def _write_safetensors(opts, state_dict, path):
    """write_state_dict with a bytes bar (count, rate) on stderr, shown as _progress shows its bar."""
    from tqdm import tqdm
    total = sum(v.numel() * v.element_size() for v in state_dict.values())
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False,
              desc=f"writing {os.path.basename(path)}", disable=not opts.bars) as bar:
        write_state_dict(state_dict, path, progress=lambda done: bar.update(done - bar.n))
        return bar.n


def _fingerprints(opts) -> dict:
    return {flag: {"path": path, "sha256": atomic.sha256(path)} for flag, path in opts.input_files.items()
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
def _stage(opts, label, total=None, unit=None):
    """A tqdm bar on stderr for a stage that counts (``unit``; of ``total`` when known), with its rate, left on the
    terminal when done; yields ``tick(n)``. Stages without a unit show nothing."""
    from tqdm import tqdm
    with tqdm(desc=f"migrate {opts.command}: {label}", total=total, unit=unit or "it", file=sys.stderr,
              disable=unit is None or not opts.bars) as bar:
        yield bar.update


def _emit(as_json: bool, report: Report) -> None:
    """stdout: the report (or one JSON document, ``as_json``); stderr: the error and the status line."""
    if as_json:
        print(json.dumps(_jsonable(report.to_dict()), indent=1))
    elif report.error is None and not report.interrupted:
        print(report.render())
    if report.error is not None:  # one line: the error names the flag or file, what was wrong and the fix
        print(f"migrate {report.command}: error: {' '.join(report.error.split())}", file=sys.stderr)
        return
    written = f"; wrote {', '.join(report.outputs)}" if report.outputs else ""
    print(f"migrate {report.command}: {report.status()}{written}", file=sys.stderr)
