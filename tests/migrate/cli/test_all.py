"""`python -m migrate` groups/weights/optim/verify/all end to end on files, and training continued in torch.

The MXNet side is ``MxResidual`` (convs, BatchNorms, a residual branch, a dense head) trained 4 steps by
``gluon_lr.LrTrainer`` (sgd with momentum, a FactorScheduler that steps down at update 6, lr_mult 2 on the head,
wd_mult 0 on the norms, the stem conv frozen); the torch side is ``tests.migrate.models:torch_residual``.
"""
import hashlib
import json
import os
import re
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet import autograd

import migrate
from gluon_lr import LrTrainer, Rule
from migrate.cli import main
from tests.migrate import models as M

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BATCH, STEPS, ATOL = 4, 4, 1e-5
TORCH = "tests.migrate.models:torch_residual"
INPUTS = ("res-symbol.json", "res-0000.params", "settings.json", "trainer.states")


def _train(net, trainer, data):
    for x, y in data:
        with autograd.record():
            loss = ((net(mx.nd.array(x)) - mx.nd.array(y)) ** 2).sum()
        loss.backward()
        trainer.step(BATCH)


def _sha(folder):
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in INPUTS}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """STEPS MXNet steps, then the exported files; then STEPS more steps give the reference weights."""
    folder = tmp_path_factory.mktemp("trained")
    net = M.gluon(M.MxResidual)
    net.hybridize()
    schedule = mx.lr_scheduler.FactorScheduler(step=5, factor=0.5, base_lr=0.05)
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3, "lr_scheduler": schedule},
                        rules=[Rule("fc_*", lr_mult=2.0), Rule("norm", wd_mult=0.0)])
    trainer.freeze("stem_weight")
    rng = np.random.RandomState(3)
    data = [(rng.randn(BATCH, 3, 8, 8).astype("float32"), rng.randn(BATCH, 5).astype("float32"))
            for _ in range(2 * STEPS)]
    _train(net, trainer, data[:STEPS])
    net.export(str(folder / "res"))
    trainer.export_settings(str(folder / "settings.json"))
    trainer.save_states(str(folder / "trainer.states"))
    middle = {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}
    _train(net, trainer, data[STEPS:])
    final = {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}
    torch.jit.save(torch.jit.script(M.torch_residual()), str(folder / "res.ts"))
    return {"folder": folder, "data": data, "middle": middle, "final": final, "sha": _sha(folder)}


def _migrate(*args):
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "2"}
    command = [sys.executable, "-m", "migrate", *[str(a) for a in args]]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def _files(folder, *names):
    flags = {"symbol": "res-symbol.json", "params": "res-0000.params", "settings": "settings.json",
             "states": "trainer.states"}
    return [x for name in names for x in (f"--{name}", str(folder / flags[name]))]


@pytest.fixture(scope="module")
def migrated(trained):
    """``migrate all --json`` into trained/out: (completed process, out folder)."""
    out = trained["folder"] / "out"
    done = _migrate("all", *_files(trained["folder"], "symbol", "params", "settings", "states"), "--torch", TORCH,
                    "--input-shape", "1,3,8,8", "--out", out, "--format", "pt", "--json")
    return done, out


def _continue(model, optimizer, scheduler, data, reduce=torch.sum):
    model.train()
    for x, y in data:
        optimizer.zero_grad()
        reduce(((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum(dim=1)).backward()
        optimizer.step()
        scheduler.step()


def _largest_difference(expected, model, mapping):
    """(MXNet name, largest absolute difference) over every torch parameter."""
    named = dict(model.named_parameters())
    diffs = [(name, float(np.abs(expected[name] - named[mapping[name]].detach().numpy()).max()))
             for name in mapping if mapping[name] in named]
    return max(diffs, key=lambda item: item[1])


class TestAll:
    """``migrate all``: every output, the report, and training continued from the folder."""

    def test_exit_0_one_json_document_and_report_files(self, trained, migrated):
        """Exit 0; stdout is one JSON document (schema_version 1) equal to report.json; report.txt says OK."""
        done, out = migrated
        assert done.returncode == 0, done.stderr[-3000:]
        doc = json.loads(done.stdout)
        assert doc["schema_version"] == 1 and doc["ok"] is True and doc["exit_code"] == 0
        assert doc == json.loads((out / "report.json").read_text())
        assert sorted(os.listdir(out)) == ["mapping.json", "optimizer.pt", "param_groups.json", "report.json",
                                           "report.txt", "weights.pt"]
        assert doc["verify"]["max_abs_diff"] <= ATOL and doc["unmapped"] == {"mxnet": [], "torch": []}
        rows = doc["verify"]["rows"]
        assert len(rows) == 9 and all(r["max_abs_diff"] <= ATOL for r in rows), rows
        from mxformats.states import split_states, states_bytes, unpickle_states
        held, _ = unpickle_states(split_states(states_bytes(str(trained["folder"] / "trainer.states")), "t")[1], "t")
        assert len(held) >= 13  # every trained parameter (the frozen stem conv, never updated, may have none)
        assert doc["optimizer"]["states_converted"] == len(held) and doc["optimizer"]["num_update"] == STEPS
        assert "migrate all: OK (exit 0)" in (out / "report.txt").read_text()
        assert "stages done" not in done.stderr and "\r" not in done.stderr, "no progress bar without a terminal"

    def test_inputs_never_modified(self, trained, migrated):
        """The four input files keep their SHA-256, which report.json records."""
        done, _ = migrated
        assert _sha(trained["folder"]) == trained["sha"]
        recorded = {os.path.basename(v["path"]): v["sha256"] for v in json.loads(done.stdout)["inputs"].values()}
        assert {k: recorded[k] for k in INPUTS} == trained["sha"]

    def test_param_groups_file(self, migrated):
        """Head lr 0.05 * 2, norms without weight decay, the frozen stem in a frozen group (lr 0)."""
        groups = json.loads((migrated[1] / "param_groups.json").read_text())
        by_name = {name: g for g in groups["groups"] for name in g["params"]}
        assert by_name["fc.weight"]["lr"] == pytest.approx(0.1) and by_name["fc.bias"]["weight_decay"] == 1e-3
        assert by_name["bn1.weight"]["weight_decay"] == 0.0 and by_name["bn1.weight"]["lr"] == pytest.approx(0.05)
        assert by_name["conv1.weight"]["weight_decay"] == 1e-3
        assert by_name["stem.weight"]["frozen"] and by_name["stem.weight"]["lr"] == 0.0
        assert groups["frozen"] == [{"torch": "stem.weight", "mxnet": "stem_weight"}]
        assert len(by_name) == 14 and sum(len(g["params"]) for g in groups["groups"] if g["frozen"]) == 1

    def test_continued_training_equals_mxnet(self, trained, migrated):
        """load_migration + 4 torch steps (lr halves at update 6) == 4 more MXNet steps, within 1e-5."""
        model = M.torch_residual()
        optimizer, scheduler = migrate.load_migration(migrated[1], model)
        mapping = migrate.NameMapping.load(migrated[1] / "mapping.json")
        _continue(model, optimizer, scheduler, trained["data"][STEPS:])
        name, worst = _largest_difference(trained["final"], model, mapping)
        assert worst <= ATOL, f"{name} differs from MXNet by {worst:.3g} > {ATOL}"
        moved = _largest_difference(trained["middle"], model, mapping)[1]
        assert moved > 1e-2, f"the weights barely moved ({moved:.3g}): the comparison proves nothing"
        np.testing.assert_array_equal(model.stem.weight.detach().numpy(), trained["middle"]["stem_weight"])
        assert not model.stem.weight.requires_grad
        assert {g["lr"] for g in optimizer.param_groups if not g["frozen"]} == {0.025, 0.05}, "the schedule stepped"
        assert {g["lr"] for g in optimizer.param_groups if g["frozen"]} == {0.0}


    def test_format_safetensors(self, trained, migrated, tmp_path):
        """``all`` writes weights.safetensors by default, equal bit for bit to the weights.pt of ``--format pt``,
        and load_migration loads it; a damaged one raises InputFileError."""
        from safetensors.torch import load_file
        done = _migrate("all", *_files(trained["folder"], "symbol", "params", "settings", "states"), "--torch",
                        TORCH, "--input-shape", "1,3,8,8", "--out", tmp_path, "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        assert (tmp_path / "weights.safetensors").is_file() and not (tmp_path / "weights.pt").exists()
        ours = load_file(str(tmp_path / "weights.safetensors"))
        theirs = torch.load(migrated[1] / "weights.pt", weights_only=True)
        assert set(ours) == set(theirs)
        for key, value in theirs.items():
            assert ours[key].dtype == value.dtype and ours[key].numpy().tobytes() == value.numpy().tobytes(), key
        from_pt, from_st = M.torch_residual(), M.torch_residual()
        migrate.load_migration(migrated[1], from_pt)
        migrate.load_migration(tmp_path, from_st)
        for key, value in from_pt.state_dict().items():
            assert value.numpy().tobytes() == from_st.state_dict()[key].numpy().tobytes(), key
        (tmp_path / "weights.safetensors").write_bytes(b"not safetensors")
        with pytest.raises(migrate.errors.InputFileError, match="expected a safetensors file"):
            migrate.load_migration(tmp_path, M.torch_residual())

    @pytest.mark.parametrize("quiet", [False, True])
    def test_write_progress_bar(self, trained, tmp_path, capsys, monkeypatch, quiet):
        """On a terminal `weights` shows real bars on stderr: nodes exported (count, rate), tensors converted (count
        of total, rate), bytes written (total, rate); --quiet hides them."""
        from migrate.cli import main
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
        code = main(["weights", *_files(trained["folder"], "params", "symbol"), "--torch", TORCH, "--input-shape",
                     "1,3,8,8", "--out", str(tmp_path / "w.safetensors"), "--format", "safetensors"]
                    + (["--quiet"] if quiet else []))
        err = capsys.readouterr().err
        assert code == 0, err[-2000:]
        total = sum(v.numel() * v.element_size() for v in M.torch_residual().state_dict().values())
        assert (tmp_path / "w.safetensors").stat().st_size > total
        from tqdm import tqdm
        size = re.escape(tqdm.format_sizeof(total, divisor=1024))  # the bar's total: the tensors' bytes
        shown = re.search(rf"writing w\.safetensors: +\d+%.*/{size} \[.*B/s", err)
        assert (shown is None) == quiet, err[-2000:]
        exported = re.findall(r"exporting both models to ONNX \(structure only\) and matching: (\d+)node \[[^]]*"
                              r"node/s", err)
        converted = re.findall(r"converting the weights: +100%[^[]*\| (\d+)/\1 \[[^]]*tensor/s", err)
        assert (not exported) == quiet and (not converted) == quiet, err[-2000:]
        if not quiet:  # the final counts: every node of both exports; one tick per converted tensor
            assert int(exported[-1]) > 10 and int(converted[-1]) == len(M.torch_residual().state_dict())

    def test_mean_loss_with_rescale_grad_1(self, trained, migrated):
        """A loss averaged over the batch with load_migration(..., rescale_grad=1.0) continues the same way."""
        model = M.torch_residual()
        optimizer, scheduler = migrate.load_migration(migrated[1], model, rescale_grad=1.0)
        _continue(model, optimizer, scheduler, trained["data"][STEPS:], reduce=torch.mean)
        mapping = migrate.NameMapping.load(migrated[1] / "mapping.json")
        name, worst = _largest_difference(trained["final"], model, mapping)
        assert worst <= ATOL, f"{name} differs from MXNet by {worst:.3g} > {ATOL}"


class TestSubcommands:
    """groups, weights, optim and verify, each in its own process."""

    def test_groups_with_mapping_file(self, trained, migrated, tmp_path):
        """``groups --mapping`` (no matching) writes the same param groups as ``all``."""
        done = _migrate("groups", *_files(trained["folder"], "settings"), "--torch", TORCH, "--mapping",
                        migrated[1] / "mapping.json", "--out", tmp_path / "g.json")
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads((tmp_path / "g.json").read_text()) == json.loads(
            (migrated[1] / "param_groups.json").read_text())
        assert "fc.bias, fc.weight" in done.stdout and "frozen (requires_grad=False): stem.weight" in done.stdout

    def test_weights_and_optim_without_states(self, trained, migrated, tmp_path):
        """``weights`` (matching itself) equals all's weights.pt; ``optim`` without --states starts with no momentum,
        so the continued run drifts from MXNet's by more than 1e-4: the state hand-over is what makes it exact."""
        done = _migrate("weights", *_files(trained["folder"], "symbol", "params"), "--torch", TORCH,
                        "--input-shape", "1,3,8,8", "--out", tmp_path / "weights.pt")
        assert done.returncode == 0, done.stderr[-3000:]
        ours, theirs = (torch.load(p, weights_only=True) for p in (tmp_path / "weights.pt", migrated[1] / "weights.pt"))
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
        done = _migrate("optim", *_files(trained["folder"], "settings"), "--torch", TORCH, "--mapping",
                        migrated[1] / "mapping.json", "--out", tmp_path / "optimizer.pt", "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["optimizer"]["states_converted"] == 0
        model = M.torch_residual()
        optimizer, scheduler = migrate.load_migration(tmp_path, model)
        _continue(model, optimizer, scheduler, trained["data"][STEPS:])
        mapping = migrate.NameMapping.load(migrated[1] / "mapping.json")
        name, worst = _largest_difference(trained["final"], model, mapping)
        assert worst > 1e-4, f"without the momentum state {name} still within {worst:.3g}"

    def test_verify_not_equivalent_exits_1(self, trained):
        """A torch model with the stride on the other conv: exit 1, the first divergence named on stdout."""
        done = _migrate("verify", *_files(trained["folder"], "symbol", "params"), "--torch", TORCH, "--kwargs",
                        '{"stride1": 1, "stride2": 2}', "--input-shape", "1,3,8,8")
        assert done.returncode == 1, done.stderr[-3000:]
        assert "first divergence: MXNet 'body1_fwd' vs torch 'conv1'" in done.stdout
        assert "migrate verify: FAILED: equivalent, verified" in done.stderr

    def test_help(self):
        """``migrate --help`` lists every subcommand and the exit codes."""
        done = _migrate("--help")
        assert done.returncode == 0
        for name in ("map", "groups", "weights", "optim", "verify", "all", "exit codes"):
            assert name in done.stdout


@pytest.mark.parametrize("command, flags", [("map", "--input-shape"), ("groups", "--settings"),
                                            ("weights", "--params"), ("optim", "--states"),
                                            ("verify", "--mapping"), ("all", "--force")])
def test_subcommand_help(capsys, command, flags):
    """Each subcommand's --help exits 0 and shows its flags."""
    assert main([command, "--help"]) == 0
    assert flags in capsys.readouterr().out


def test_all_with_torchscript_file(trained, migrated, tmp_path, capsys):
    """A TorchScript file as --torch: compared at the final output only (no forward hooks in TorchScript), so not
    "verified" (exit 1, the skipped nodes listed), yet written; the loaded TorchScript model continues the MXNet
    training within 1e-5."""
    script = str(trained["folder"] / "res.ts")
    code = main(["all", *_files(trained["folder"], "symbol", "params", "settings", "states"), "--torch", script,
                 "--mapping", str(migrated[1] / "mapping.json"), "--input-shape", "1,3,8,8", "--out",
                 str(tmp_path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["verify"]["max_abs_diff"] <= ATOL, doc["status"]
    # no node could be compared: not "verified" (exit 1), but the outputs are written
    assert code == 1 and doc["checks"] == {"equivalent": True, "verified": False} and doc["verify"]["skipped"]
    model = torch.jit.load(script)
    optimizer, scheduler = migrate.load_migration(tmp_path, model)
    _continue(model, optimizer, scheduler, trained["data"][STEPS:])
    name, worst = _largest_difference(trained["final"], model, migrate.NameMapping.load(tmp_path / "mapping.json"))
    assert worst <= ATOL, f"{name} differs from MXNet by {worst:.3g} > {ATOL}"


def test_all_not_equivalent_writes_only_mapping_and_report(trained, tmp_path, capsys):
    """Exit 1; weights, groups and optimizer are not written for a model that is not equivalent, and with --force
    the weights.pt of an earlier run is removed (it would belong to another model)."""
    (tmp_path / "weights.pt").write_bytes(b"earlier run")
    code = main(["all", *_files(trained["folder"], "symbol", "params", "settings", "states"), "--torch", TORCH,
                 "--kwargs", '{"stride1": 1, "stride2": 2}', "--input-shape", "1,3,8,8", "--out", str(tmp_path),
                 "--force"])
    assert code == 1
    assert sorted(os.listdir(tmp_path)) == ["mapping.json", "report.json", "report.txt"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit_code"] == 1 and report["checks"] == {"equivalent": False, "verified": False}
    assert "strides (2, 2) vs (1, 1)" in capsys.readouterr().out


def test_unmapped_names_exit_1(trained, migrated, tmp_path, capsys):
    """A mapping without fc_bias: groups exits 1 naming both sides and writes nothing."""
    doc = json.loads((migrated[1] / "mapping.json").read_text())
    doc["entries"] = [e for e in doc["entries"] if e["mxnet"] != "fc_bias"]
    (tmp_path / "partial.json").write_text(json.dumps(doc))
    code = main(["groups", *_files(trained["folder"], "settings"), "--torch", TORCH, "--mapping",
                 str(tmp_path / "partial.json"), "--out", str(tmp_path / "g.json")])
    out = capsys.readouterr().out
    assert code == 1 and not (tmp_path / "g.json").exists()
    assert "unmapped MXNet names: fc_bias" in out and "unmapped torch names: fc.bias" in out


def _other_states(folder):
    """LrTrainer states of another model (MxTwoInputs)."""
    net = M.gluon(M.MxTwoInputs)
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    with autograd.record():
        net(mx.nd.ones((2, 4)), mx.nd.ones((2, 6))).sum().backward()
    trainer.step(2)
    trainer.save_states(str(folder / "other.states"))
    return str(folder / "other.states")


def _other_mapping(folder, migrated):
    """The mapping file with fc's torch keys renamed to a model that has 'head' instead."""
    text = (migrated[1] / "mapping.json").read_text().replace('"fc.', '"head.')
    (folder / "other-mapping.json").write_text(text)
    return str(folder / "other-mapping.json")


# (description, subcommand, changed flags (None removes one), exit code, stderr pattern)
ERRORS = [
    ("missing settings file", "optim", {"--settings": "absent.json"}, 2, r"--settings 'absent.json': file not found"),
    ("params file as settings", "optim", {"--settings": "{params}"}, 2, r"--settings .*not valid JSON"),
    ("foreign JSON as settings", "optim", {"--settings": "{mapping}"}, 2, r"not a gluon-lr settings file"),
    ("bad --kwargs", "optim", {"--kwargs": "nums=3"}, 2, r"--kwargs 'nums=3': expected a JSON object"),
    ("kwargs not an object", "optim", {"--kwargs": "[1]"}, 2, r"received list"),
    ("unimportable callable", "optim", {"--torch": "tests.migrate.models:nope"}, 2, r"--torch .*cannot import it"),
    ("not a TorchScript file", "optim", {"--torch": "{params}"}, 2, r"--torch .*not a TorchScript file"),
    ("existing output without --force", "optim", {"--out": "{settings_copy}"}, 2, r"exists; pass --force"),
    ("output is an input", "optim", {"--out": "{settings}", "--force": ""}, 2, r"is the input of --settings"),
    ("mapping for another model", "optim", {"--mapping": "{other_mapping}"}, 2,
     r"--mapping .*made for another model.*head.weight \(absent\)"),
    ("params file as mapping", "optim", {"--mapping": "{params}"}, 2, r"--mapping .*expected JSON"),
    ("states for another model", "optim", {"--states": "{other_states}"}, 2, r"--states .*another model"),
    ("settings as states", "optim", {"--states": "{settings}"}, 2, r"--states .*could not be unpickled"),
    ("no mapping and no MXNet files", "optim", {"--mapping": None}, 2, r"no --mapping given and --symbol, --params"),
    ("missing required flag", "optim", {"--torch": None}, 2, r"the following arguments are required: --torch"),
    ("bad input shape", "verify", {"--input-shape": "1,x"}, 2, r"--input-shape '1,x': expected comma-separated"),
    ("missing symbol file", "verify", {"--symbol": "absent-symbol.json"}, 2, r"--symbol 'absent-symbol.json': file"),
    ("all into a file", "all", {"--out": "{settings_copy}"}, 2, r"--out .*not a folder"),
    ("unknown subcommand", "convert", {}, 2, r"invalid choice: 'convert'"),
]
_BASE = {
    "optim": {"--settings": "{settings}", "--states": "{states}", "--torch": TORCH, "--mapping": "{mapping}",
              "--out": "{tmp}/optimizer.pt"},
    "verify": {"--symbol": "{symbol}", "--params": "{params}", "--torch": TORCH, "--input-shape": "1,3,8,8",
               "--mapping": "{mapping}"},
    "all": {"--symbol": "{symbol}", "--params": "{params}", "--settings": "{settings}", "--torch": TORCH,
            "--input-shape": "1,3,8,8", "--mapping": "{mapping}", "--out": "{tmp}/out"},
    "convert": {},
}


@pytest.mark.parametrize("description, command, changes, code, pattern", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(trained, migrated, tmp_path, capsys, description, command, changes, code, pattern):
    """Usage and input errors: the exit code, a message naming the flag on stderr, no traceback, nothing written,
    the inputs unchanged."""
    import re
    folder = trained["folder"]
    (tmp_path / "settings-copy.json").write_text((folder / "settings.json").read_text())
    values = {"symbol": folder / INPUTS[0], "params": folder / INPUTS[1], "settings": folder / INPUTS[2],
              "states": folder / INPUTS[3], "mapping": migrated[1] / "mapping.json", "tmp": tmp_path,
              "settings_copy": tmp_path / "settings-copy.json"}
    if "{other_states}" in str(changes):
        values["other_states"] = _other_states(tmp_path)
    if "{other_mapping}" in str(changes):
        values["other_mapping"] = _other_mapping(tmp_path, migrated)
    flags = {**_BASE[command], **changes}
    argv = [command] + [x for flag, value in flags.items() if value is not None
                        for x in ((flag,) if value == "" else (flag, str(value).format(**values)))]
    before = set(os.listdir(tmp_path))
    assert main(argv) == code
    err = capsys.readouterr().err
    assert re.search(pattern, err), f"{description}: {pattern!r} not in {err[-1500:]!r}"
    assert "Traceback" not in err
    assert set(os.listdir(tmp_path)) == before and _sha(folder) == trained["sha"]


def _folder_with(tmp_path, migrated, **replace):
    """A copy of the ``all`` folder's weights.pt and optimizer.pt, some replaced by the given bytes."""
    for name in ("weights.pt", "optimizer.pt"):
        data = replace.get(name.replace(".pt", ""), (migrated[1] / name).read_bytes())
        if data is not None:
            (tmp_path / name).write_bytes(data)
    return tmp_path


def _saved(obj):
    import io
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


# (description, replaced files, model factory, error type, message pattern)
LOAD_ERRORS = [
    ("no optimizer.pt", {"optimizer": None}, M.torch_residual, migrate.errors.InputFileError,
     r"optimizer.pt'?: not found"),
    ("weights of another model", {}, lambda: M.TorchDenseStack(), migrate.errors.InputFileError,
     r"weights.pt' does not fit the TorchDenseStack model"),
    ("foreign optimizer.pt", {"optimizer": _saved({"format": "other"})}, M.torch_residual,
     migrate.errors.InputFileError, r"expected format 'gluon-lr-torch-optimizer'"),
    ("not a torch file", {"weights": b"not torch"}, M.torch_residual, migrate.errors.InputFileError,
     r"weights.pt'?: expected a file torch.save wrote"),
]


@pytest.mark.parametrize("description, replace, factory, error, pattern", LOAD_ERRORS, ids=[e[0] for e in LOAD_ERRORS])
def test_load_migration_errors(migrated, tmp_path, description, replace, factory, error, pattern):
    """load_migration names the file, what was wrong and what to do."""
    folder = _folder_with(tmp_path, migrated, **replace)
    with pytest.raises(error, match=pattern):
        migrate.load_migration(folder, factory())


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written."""

    def __init__(self):
        self.parts = []

    def write(self, text):
        self.parts.append(text)

    def flush(self):
        pass

    def isatty(self):
        return True


def test_progress_bar_on_a_terminal(trained, migrated, monkeypatch, capsys):
    """With stderr a terminal, verification shows a bar there counting the nodes compared (with its rate, final count
    = the report's rows); stdout keeps only the report."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = main(["verify", *_files(trained["folder"], "symbol", "params"), "--torch", TORCH, "--mapping",
                 str(migrated[1] / "mapping.json"), "--input-shape", "1,3,8,8"])
    shown, out = "".join(terminal.parts), capsys.readouterr().out
    counts = re.findall(r"migrate verify: verifying node by node: (\d+)node \[[^]]*node/s", shown)
    rows = [line for line in out.splitlines() if re.search(r"\s(ok|skipped|DIVERGES)(\s|$)", line)]
    assert code == 0 and counts and int(counts[-1]) == len(rows) > 5, (shown, out)
    assert "verifying" not in out


def test_json_error_document(trained, capsys):
    """--json with an input error still prints one document: exit_code 2 and the error naming the flag."""
    code = main(["optim", "--settings", str(trained["folder"] / "absent.json"), "--torch", TORCH, "--mapping",
                 "m.json", "--out", "o.pt", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["exit_code"] == 2 and doc["schema_version"] == 1
    assert doc["error"].startswith("--settings ") and "file not found" in doc["error"]


def test_what_cannot_cross_is_listed_and_exits_1(trained, migrated, tmp_path, capsys):
    """Settings that record an element mask, with a states file that holds none: `optim` lists the mask under
    "not carried to torch", says FAILED and exits 1 (the optimizer file is still written, the loss named)."""
    settings = json.loads((trained["folder"] / "settings.json").read_text())
    settings["params"]["fc_weight"]["masked_elements"] = 3
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    args = ["optim", "--settings", str(tmp_path / "settings.json"), "--states",
            str(trained["folder"] / "trainer.states"), "--torch", TORCH, "--mapping",
            str(migrated[1] / "mapping.json"), "--out", str(tmp_path / "optimizer.pt")]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "not carried to torch:\n  - element mask of fc_weight (3 elements)" in out
    assert "migrate optim: FAILED: 1 not carried to torch (exit 1)" in out
    assert main(args + ["--force", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and len(doc["lost"]) == 1 and doc["lost"][0].startswith("element mask of fc_weight")
