"""`python -m migrate` against hostile input and interruption: one line and exit 2 for each bad flag, file or folder,
nothing written or changed; `migrate all` interrupted (Ctrl-C, SIGTERM, kill -9) at each stage leaves no output
folder, or the previous complete one, and no temporary folder after the next run.

The MXNet side is ``MxResidual`` trained 2 steps by ``LrTrainer`` (sgd, momentum, a FactorScheduler), exported with
its settings and states; the torch side is ``tests.migrate.models:torch_residual``.
"""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys

import mxnet as mx
import pytest

from migrate.cli import main
from tests.migrate import models as M

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TORCH = "tests.migrate.models:torch_residual"
SCHEDULE = {"type": "FactorScheduler", "base_lr": 0.05, "step": 5, "factor": 0.5, "stop_factor_lr": 1e-8,
            "warmup_steps": 0, "warmup_begin_lr": 0, "warmup_mode": "linear"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Exported network, settings, states and the mapping `migrate map` wrote, plus hostile files beside them."""
    folder = tmp_path_factory.mktemp("hostile")
    M.residual_files(folder, lr_scheduler=mx.lr_scheduler.FactorScheduler(step=5, factor=0.5, base_lr=0.05))
    assert main(["map", "--symbol", str(folder / "res-symbol.json"), "--params", str(folder / "res-0000.params"),
                 "--torch", TORCH, "--input-shape", "1,3,8,8", "--out", str(folder / "mapping.json")]) == 0
    _hostile_files(folder)
    return folder


def _hostile_files(folder):
    """A FIFO, 100,000-deep JSON, settings whose lr_scheduler MXNet refuses or cannot compute, hostile states files
    (``tests/mxformats/hostile_states``) behind the trainer's own header, and symbol files cut short."""
    from tests.mxformats import hostile_states as H
    os.mkfifo(folder / "fifo")
    data = (folder / "trainer.states").read_bytes()
    size = int.from_bytes(data[len(H.MAGIC):len(H.MAGIC) + 8], "big")
    params = json.loads(data[len(H.MAGIC) + 8:len(H.MAGIC) + 8 + size])["params"]
    for name, raw in H.HOSTILE.items():
        (folder / f"states-{_slug(name)}.states").write_bytes(H.wrapped(raw, params))
    (folder / "states-deep-header.states").write_bytes(H.deep_header())
    symbol = (folder / "res-symbol.json").read_bytes()
    (folder / "cut-symbol.json").write_bytes(symbol[:len(symbol) // 2])
    accented = symbol.replace(b'"name": "', '"name": "\u00e9'.encode(), 1)
    (folder / "cut-char-symbol.json").write_bytes(accented[:accented.index("\u00e9".encode()) + 1])  # half of it
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    settings = json.loads((folder / "settings.json").read_text())
    warmup = {"base_lr": 0.05, "warmup_begin_lr": 0, "warmup_mode": "linear"}
    bad = {"step0": dict(SCHEDULE, step=0), "factor-nan": dict(SCHEDULE, factor=float("nan")),
           "poly-zero-length": dict(warmup, type="PolyScheduler", max_update=4, pwr=2, final_lr=0, warmup_steps=4),
           "multifactor-flat": dict(warmup, type="MultiFactorScheduler", step=[3, 3], factor=0.5, warmup_steps=0)}
    for name, schedule in bad.items():
        (folder / f"settings-{name}.json").write_text(json.dumps(dict(settings, lr_scheduler=schedule)))
    huge = json.loads(json.dumps(settings))
    huge["params"][next(iter(huge["params"]))].update(shape=[10 ** 20], dtype="banana")
    (folder / "settings-huge-shape.json").write_text(json.dumps(huge))
    (folder / "settings-huge-num-update.json").write_text(json.dumps(dict(
        settings, num_update=10 ** 9, lr_scheduler=dict(SCHEDULE, step=1, factor=0.9999999, stop_factor_lr=0.0))))


def _slug(name: str) -> str:
    """A hostile case's name as a file name."""
    return "".join(c if c.isalnum() else "-" for c in name)


def _tree(folder) -> dict:
    """Relative path -> sha256 of every regular file under ``folder`` (FIFOs as a marker, never opened)."""
    found = {}
    for base, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(base, name)
            key = os.path.relpath(path, folder)
            found[key] = (hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.isfile(path)
                          else "dir" if os.path.isdir(path) else "special")
    return found


_MAP = ["map", "--symbol", "{d}/res-symbol.json", "--params", "{d}/res-0000.params", "--torch", TORCH,
        "--input-shape", "1,3,8,8", "--out", "{out}/m.json"]
_OPTIM = ["optim", "--settings", "{d}/settings.json", "--states", "{d}/trainer.states", "--torch", TORCH,
          "--mapping", "{d}/mapping.json", "--out", "{out}/o.pt"]
_ALL = ["all", "--symbol", "{d}/res-symbol.json", "--params", "{d}/res-0000.params", "--settings",
        "{d}/settings.json", "--torch", TORCH, "--mapping", "{d}/mapping.json", "--input-shape", "1,3,8,8",
        "--out", "{out}/all"]


def _with(argv, flag, value):
    """``argv`` with ``flag``'s value replaced (or the flag appended)."""
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


# (description, argv, exit code, pattern of the one line on stderr)
HOSTILE = [
    ("input too large", _with(_MAP, "--input-shape", "300000000,4"), 2,
     r"--input-shape 300000000,4: 1,200,000,000 input elements in all, above the limit of 16,777,216.*"
     r"set MIGRATE_MAX_INPUT_ELEMENTS=1200000000"),
    ("zero dimension", _with(_MAP, "--input-shape", "0,3,8,8"), 2, r"--input-shape '0,3,8,8': expected 1 to 32 "
     r"positive integers"),
    ("negative dimension", _MAP[:7] + ["--input-shape=-1,3,8,8"] + _MAP[9:], 2, r"--input-shape '-1,3,8,8': "
     r"expected 1 to 32 positive integers"),
    ("negative dimension read as a flag", _with(_MAP, "--input-shape", "-1,3,8,8"), 2,
     r"argument --input-shape: expected one argument \(see migrate map --help\)"),
    ("5000-digit dimension", _with(_MAP, "--input-shape", "9" * 5000), 2, r"expected comma-separated integers"),
    ("40 dimensions", _with(_MAP, "--input-shape", ",".join(["1"] * 40)), 2, r"expected 1 to 32 positive"),
    ("--torch sys:exit", _with(_MAP, "--torch", "sys:exit"), 2, r"--torch 'sys:exit': a built-in .*not a model "
     r"factory"),
    ("--torch code:interact", _with(_MAP, "--torch", "code:interact"), 2, r"standard library \(code\), not a model"),
    ("--torch a class that is no Module", _with(_MAP, "--torch", "collections:OrderedDict"), 2,
     r"a class that is not a torch.nn.Module"),
    ("--torch a string", _with(_MAP, "--torch", "os:sep"), 2, r"--torch 'os:sep': a str, not a callable"),
    ("--torch a FIFO", _with(_MAP, "--torch", "{d}/fifo"), 2, r"--torch '.*fifo': a FIFO \(named pipe\)"),
    ("--symbol a FIFO", _with(_MAP, "--symbol", "{d}/fifo"), 2, r"--symbol '.*fifo': a FIFO \(named pipe\), not a "
     r"regular file; give the NAME-symbol.json"),
    ("--params a folder", _with(_MAP, "--params", "{d}"), 2, r"--params '.*': a folder, not a regular file"),
    ("--settings a FIFO", _with(_OPTIM, "--settings", "{d}/fifo"), 2, r"--settings '.*fifo': a FIFO"),
    ("--states a FIFO", _with(_OPTIM, "--states", "{d}/fifo"), 2, r"--states '.*fifo': a FIFO"),
    ("--mapping a FIFO", _with(_OPTIM, "--mapping", "{d}/fifo"), 2, r"--mapping '.*fifo': a FIFO"),
    ("--settings 100000 deep", _with(_OPTIM, "--settings", "{d}/deep.json"), 2,
     r"--settings '.*deep.json': .*not valid JSON \(maximum recursion depth"),
    ("--symbol 100000 deep", _with(_MAP, "--symbol", "{d}/deep.json"), 2,
     r"MXNet symbol file '.*deep.json': expected a symbol JSON .*could not parse it \('.*deep.json': the JSON is "
     r"nested too deeply to be an MXNet symbol"),
    ("--symbol cut short (read by MXNet)", _with(_MAP, "--symbol", "{d}/cut-symbol.json"), 2,
     r"MXNet symbol file '.*cut-symbol.json': expected a symbol JSON .*could not parse it \('.*cut-symbol.json': not "
     r"JSON \(.*\); the file is damaged or truncated"),
    ("--symbol cut inside a character (read by MXNet)", _with(_MAP, "--symbol", "{d}/cut-char-symbol.json"), 2,
     r"could not parse it \('.*cut-char-symbol.json': byte 57 is not UTF-8 \(the file ends inside a character: it "
     r"is truncated\)"),
    ("--states bytearray(4e9) in 32 bytes", _with(_OPTIM, "--states", "{d}/states-bytearray-4e9-.states"), 2,
     r"^migrate optim: error: --states '.*': States file '.*' asks for a bytearray of 4,000,000,000 bytes, more than "
     r"its 32 bytes hold; it was refused before allocating"),
    ("--states 2**40 paths (shared lists)", _with(_OPTIM, "--states", "{d}/states-2--40-paths--shared-lists-.states"),
     2, r"--states '.*': States file '.*': containers nest more than 32 deep \(at byte \d+\)"),
    ("--states a state sharing a list", _with(_OPTIM, "--states", "{d}/states-a-state-sharing-one-list.states"), 2,
     r"the state of parameter index 0 is not one MXNet makes \(it holds the same list at two places"),
    ("--states a list nested 1e6 deep", _with(_OPTIM, "--states", "{d}/states-a-list-nested-1e6-deep.states"), 2,
     r"containers nest more than 32 deep \(at byte 1000037\)"),
    ("--states a dict key nested 1e6 tuples deep",
     _with(_OPTIM, "--states", "{d}/states-a-dict-key-nested-1e6-tuples-deep.states"), 2,
     r"containers nest more than 32 deep \(at byte 1000035\)"),
    ("--states an NDArray of shape (0, 2**62)",
     _with(_OPTIM, "--states", "{d}/states-an-NDArray-of-shape--0--2--62-.states"), 2,
     r"the bytes of a pickled NDArray: NDArray has shape \(0, 4611686018427387904\) of 4-byte items: its dimensions "
     r"multiply past 2\*\*63 bytes"),
    ("--states header JSON 100000 deep", _with(_OPTIM, "--states", "{d}/states-deep-header.states"), 2,
     r"--states '.*': States file '.*' has a corrupt header \(its JSON is nested too deeply to be one"),
    ("--states a whole pickle that builds nothing",
     _with(_OPTIM, "--states", "{d}/states-a-whole-pickle-that-builds-nothing.states"), 2,
     r"their pickle is whole \(8 bytes of opcodes, ending with STOP\) but builds no states"),
    ("--mapping 100000 deep", _with(_OPTIM, "--mapping", "{d}/deep.json"), 2,
     r"--mapping '.*deep.json': .*JSON nested too deeply"),
    ("--kwargs 50000 deep", _with(_MAP, "--kwargs", "[" * 50_000 + "]" * 50_000), 2,
     r"--kwargs '\[\[\[.*nested too deeply"),
    ("shape 1e20, dtype banana", _with(_OPTIM, "--settings", "{d}/settings-huge-shape.json"), 2,
     r"--settings '.*settings-huge-shape.json': .*shape must be a list of ints >= 0 whose product fits MXNet's "
     r"sizes \(below 2\*\*63\), got \[100000000000000000000\]"),
    ("FactorScheduler step 0", _with(_OPTIM, "--settings", "{d}/settings-step0.json"), 2,
     r"lr_scheduler'\] \(FactorScheduler\): step must be a number >= 1.*got 0"),
    ("FactorScheduler factor NaN", _with(_OPTIM, "--settings", "{d}/settings-factor-nan.json"), 2,
     r"settings-factor-nan.json.*not valid JSON \(NaN is not a JSON number\)"),
    ("PolyScheduler max_update == warmup_steps", _with(_OPTIM, "--settings", "{d}/settings-poly-zero-length.json"),
     2, r"\(PolyScheduler\): max_update 4 equals warmup_steps.*divides by zero at update 4"),
    ("MultiFactorScheduler not increasing", _with(_OPTIM, "--settings", "{d}/settings-multifactor-flat.json"), 2,
     r"step \[3, 3\] must be increasing"),
    ("FactorScheduler that never settles by update 1e9", [a for a in _with(_OPTIM, "--settings", "{d}/settings-"
                                                                            "huge-num-update.json")
                                                           if "states" not in a], 2,
     r"reaching update 1000000001 needs more than 10,000,000 multiplications"),
    ("--out in a missing folder", _with(_MAP, "--out", "{out}/absent/m.json"), 2,
     r"--out: folder '.*absent' does not exist; create it"),
    ("--out in a read-only folder", _with(_MAP, "--out", "{readonly}/m.json"), 2,
     r"--out: folder '.*' is not writable \(.*\); choose a folder you can write to"),
    ("--out over a FIFO", _with(_MAP, "--out", "{d}/fifo"), 2, r"is a FIFO \(named pipe\), not a "
     r"regular file"),
    ("all: --out parent missing", _with(_ALL, "--out", "{out}/absent/all"), 2, r"folder '.*absent' does not exist"),
    ("all: --out in a read-only folder", _with(_ALL, "--out", "{readonly}/all"), 2, r"is not writable"),
    ("all: --out a file", _with(_ALL, "--out", "{d}/settings.json"), 2, r"exists and is not a folder"),
    ("all: --out holds foreign files", _with(_ALL, "--out", "{d}") + ["--force"], 2,
     r"holds files `migrate all` does not write \(cut-char-symbol.json, cut-symbol.json, deep.json, fifo, "
     r"res-0000.params, ...\)"),
    ("all: --out name of 300 bytes", _with(_ALL, "--out", "{out}/" + "n" * 300), 2,
     r"give a folder path with a name of 1 to 255 bytes"),
    ("all: --out /", _with(_ALL, "--out", "/"), 2, r"--out '/': give a folder path with a name"),
    ("all: --out a symbolic link", _with(_ALL, "--out", "{out}/link"), 2, r"is a symbolic link"),
    ("all: --out ''", _with(_ALL, "--out", ""), 2, r"^migrate all: error: --out '': an empty path; give the folder "
     r"to create"),
    ("map: --out ''", _with(_MAP, "--out", ""), 2, r"^migrate map: error: --out '': an empty path; give the file"),
    ("missing required flag", _MAP[:-2], 2, r"^migrate map: error: the following arguments are required: --out "
     r"\(see migrate map --help\)$"),
]


@pytest.fixture
def readonly(tmp_path):
    """A folder this process cannot create files in (chmod 0555; root ignores that, so /sys then), or skip."""
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o555)
    yield next((str(p) for p in (folder, "/sys") if os.path.isdir(p) and not _can_write(p)), None)
    folder.chmod(0o755)


def _can_write(folder) -> bool:
    try:
        with open(os.path.join(folder, ".probe"), "w"):
            pass
    except OSError:
        return False
    os.remove(os.path.join(folder, ".probe"))
    return True


@pytest.mark.parametrize("description, argv, code, pattern", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_input_exits_with_one_line(files, tmp_path, readonly, capsys, description, argv, code, pattern):
    """Exit 2, exactly one line on stderr naming the flag and the fix (no traceback), nothing written, inputs and
    output folder unchanged."""
    if "{readonly}" in " ".join(argv) and readonly is None:
        pytest.skip("no folder this process cannot write to")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(out, out / "link")
    argv = [a.format(d=files, out=out, readonly=readonly) for a in argv]
    inputs_before, out_before = _tree(files), _tree(out)
    assert main(argv) == code
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, f"{description}: {captured.err[-2000:]}"
    assert re.search(pattern, lines[0]), f"{description}: {pattern!r} not in {lines[0]!r}"
    assert _tree(files) == inputs_before and _tree(out) == out_before, f"{description}: files changed"


def test_scheduler_mxnet_computes_still_migrates(files, tmp_path, capsys):
    """A PolyScheduler with max_update < warmup_steps (MXNet computes it: warmup, then base_lr) is accepted and the
    lr of the next update is MXNet's own."""
    settings = json.loads((files / "settings.json").read_text())
    spec = {"type": "PolyScheduler", "base_lr": 0.05, "max_update": 3, "pwr": 2, "final_lr": 0, "warmup_steps": 6,
            "warmup_begin_lr": 0.01, "warmup_mode": "linear"}
    path = tmp_path / "settings-poly.json"
    path.write_text(json.dumps(dict(settings, lr_scheduler=spec)))
    argv = _with(_with(_OPTIM, "--settings", str(path)), "--out", str(tmp_path / "o.pt"))
    assert main([a.format(d=files) for a in argv]) == 0, capsys.readouterr().err
    reference = mx.lr_scheduler.PolyScheduler(**{k: v for k, v in spec.items() if k != "type"})
    expected = [reference(n) for n in range(3, 9)]  # num_update 2 done: the next updates are 3..8
    optimizer, scheduler = _optimizer_from(tmp_path / "o.pt", M.torch_residual())
    got = []
    for _ in range(6):
        got.append(optimizer.param_groups[0]["lr"] / optimizer.param_groups[0]["lr_mult"])
        optimizer.step()
        scheduler.step()
    assert got == pytest.approx(expected, rel=1e-15, abs=0), (got, expected)


def _optimizer_from(path, model):
    """The optimizer and scheduler an ``optim`` output rebuilds (what ``load_migration`` does with optimizer.pt)."""
    import torch

    import migrate
    document = torch.load(path, weights_only=True)
    optimizer = migrate.torch_optimizer(model, document["settings"], document["mapping"])
    optimizer.load_state_dict(document["optimizer"])
    return optimizer, migrate.torch_lr_scheduler(optimizer, document["settings"], num_update=document["num_update"])


# ---------------------------------------------------------------- interrupting `migrate all`

STAGES = ["staged", "wrote-mapping.json", "wrote-optimizer.pt", "before-rename", "after-rename"]


def _all_argv(files, out, force=False):
    argv = [a.format(d=files, out=out) for a in _with(_ALL, "--states", "{d}/trainer.states")]
    return _with(argv, "--out", str(out)) + (["--force"] if force else [])


def default_sigint() -> None:
    """In a child before it runs: SIGINT's default action, which Python turns into KeyboardInterrupt (a test suite
    started as a background job hands its children SIGINT ignored, and Python keeps it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def paused_migrate(argv, stage: str, seconds: float = 60):
    """``python -m migrate <argv>`` paused at ``stage`` (``MIGRATE_PAUSE_AT``, for ``seconds``), returned once it says
    so; its stderr is left to read."""
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1", "MIGRATE_PAUSE_AT": stage,
           "MIGRATE_PAUSE_SECONDS": str(seconds)}
    process = subprocess.Popen([sys.executable, "-m", "migrate", *argv], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith("migrate: paused at"):
            break
    if not lines or lines[-1] != f"migrate: paused at {stage}\n":
        process.kill()
        process.wait()
        raise AssertionError(f"never paused at {stage}: {''.join(lines)[-2000:]}")
    return process


def _staging(parent) -> list:
    return sorted(entry for entry in os.listdir(parent) if entry.startswith(".tmp-migrate-"))


@pytest.fixture(scope="module")
def previous(files, tmp_path_factory):
    """A complete `migrate all` folder: (path, tree of its files)."""
    out = tmp_path_factory.mktemp("previous") / "all"
    assert main(_all_argv(files, out)) == 0
    assert sorted(os.listdir(out)) == ["mapping.json", "optimizer.pt", "param_groups.json", "report.json",
                                       "report.txt", "weights.safetensors"]
    return out, _tree(out)


def _expect_outcome(stage, out, before):
    """After the rename the new complete folder; before it nothing new (absent, or the previous folder)."""
    if stage == "after-rename":
        assert sorted(os.listdir(out)) == sorted(before or ["mapping.json", "optimizer.pt", "param_groups.json",
                                                            "report.json", "report.txt", "weights.safetensors"])
        assert json.loads((out / "report.json").read_text())["exit_code"] == 0
    elif before is None:
        assert not os.path.lexists(out), f"interrupted at {stage}: {out} exists: {os.listdir(out)}"
    else:
        assert _tree(out) == before, f"interrupted at {stage}: the previous folder changed"


class TestInterruptedAll:
    """`migrate all` interrupted at each stage: no folder, or the previous complete one; no temporary folder left."""

    @pytest.mark.parametrize("replace", [False, True], ids=["new", "replace"])
    @pytest.mark.parametrize("stage", STAGES)
    def test_ctrl_c_at_each_stage(self, files, previous, tmp_path, monkeypatch, capsys, stage, replace):
        """Ctrl-C (KeyboardInterrupt) at each stage: exit 130, one status line, and nothing half-written."""
        from migrate import staged_folder
        from migrate.cli import commands
        out = tmp_path / "all"
        if replace:
            import shutil
            shutil.copytree(previous[0], out)
        before = _tree(out) if replace else None

        def interrupt(name):
            if name == stage:
                raise KeyboardInterrupt
        monkeypatch.setattr(commands, "pause_point", interrupt)
        monkeypatch.setattr(staged_folder, "pause_point", interrupt)
        assert main(_all_argv(files, out, force=replace)) == 130
        err = capsys.readouterr().err.splitlines()
        assert err == ["migrate all: INTERRUPTED: each output is complete or absent (the previous one where it was "
                       "not replaced)"], err
        _expect_outcome(stage, out, before)
        assert _staging(tmp_path) == []

    @pytest.mark.parametrize("signum, stage, replace", [
        (signal.SIGKILL, "staged", False), (signal.SIGKILL, "wrote-mapping.json", True),
        (signal.SIGKILL, "before-rename", True), (signal.SIGKILL, "after-rename", True),
        (signal.SIGINT, "wrote-optimizer.pt", True), (signal.SIGTERM, "before-rename", False)],
        ids=["kill-staged", "kill-mapping-written", "kill-before-rename", "kill-after-rename", "sigint-optimizer",
             "sigterm-before-rename"])
    def test_signal_to_a_process(self, files, previous, tmp_path, signum, stage, replace):
        """A signal to `python -m migrate all` paused at a stage: the folder is absent or the previous one (the new
        one after the rename); after kill -9 the next run removes the dead run's temporary folder."""
        import shutil
        out = tmp_path / "all"
        if replace:
            shutil.copytree(previous[0], out)
        before = _tree(out) if replace else None
        process = paused_migrate(_all_argv(files, out, force=replace), stage)
        try:
            process.send_signal(signum)
            rest = process.communicate(timeout=60)[1]
        finally:
            process.kill()
            process.wait()
        assert process.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 130), rest[-2000:]
        _expect_outcome(stage, out, before)
        if signum != signal.SIGKILL:
            assert _staging(tmp_path) == [] and "INTERRUPTED" in rest
            return
        assert len(_staging(tmp_path)) == (0 if stage == "after-rename" and not replace else 1)
        assert main(_all_argv(files, out, force=True)) == 0  # the next run cleans up after the dead one
        assert _staging(tmp_path) == [] and sorted(os.listdir(out)) == sorted(previous[1])

    def test_without_atomic_exchange(self, files, previous, tmp_path, monkeypatch):
        """Where the system cannot swap two folders, two renames replace the folder; a previous folder left aside by
        a run that died between them is put back by the next run (which then needs --force to replace it)."""
        import shutil

        from migrate import staged_folder
        monkeypatch.setattr(staged_folder, "_exchange", lambda source, target: False)
        out = tmp_path / "all"
        shutil.copytree(previous[0], out)
        (out / "report.txt").write_text("an earlier run")
        assert main(_all_argv(files, out, force=True)) == 0
        replaced = _tree(out)
        assert sorted(replaced) == sorted(previous[1]) and _staging(tmp_path) == []
        assert "migrate all: OK (exit 0)" in (out / "report.txt").read_text()
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        aside = tmp_path / f".tmp-migrate-all-{dead.pid}-abcd1234.previous"
        out.rename(aside)
        assert main(_all_argv(files, out)) == 2  # put back, so it exists: --force is needed
        assert _tree(out) == replaced and _staging(tmp_path) == []


class TestBoundedFactorScheduler:
    """migrate's FactorScheduler: bounded, and still MXNet's to the last bit."""

    def test_equals_mxnet_on_random_probes(self):
        """9,000 seeded probes (step, factor, stop_factor_lr, warmup, increasing update counts with jumps): every lr
        equals MXNet 1.9.1's FactorScheduler exactly."""
        import logging
        import random

        from migrate.optim.schedules import FactorScheduler
        rng, probes = random.Random(0), 0
        logging.disable(logging.INFO)  # MXNet logs each decay
        try:
            for _ in range(300):
                kwargs = dict(step=rng.choice([1, 2, 3, 7, 2.5]), factor=rng.choice([1, 0.5, 0.9, 0, -0.5, 0.999]),
                              stop_factor_lr=rng.choice([1e-8, 1e-3, 0.0, -1.0, 0.02]),
                              warmup_steps=rng.choice([0, 3]), base_lr=0.1, warmup_begin_lr=0.0)
                reference, ours, update = mx.lr_scheduler.FactorScheduler(**kwargs), FactorScheduler(**kwargs), 0
                for _ in range(30):
                    update += rng.choice([1, 1, 5, 40, 300])
                    expected, got = reference(update), ours(update)
                    assert got == expected and str(got) == str(expected), (kwargs, update, got, expected)
                    probes += 1
        finally:
            logging.disable(logging.NOTSET)
        assert probes == 9000

    def test_settled_schedule_jumps(self):
        """Halving down to stop_factor_lr 1e-3 from 0.1, then update 10**18: the lr is 1e-3 and the step count lands
        where MXNet's loop would stop (count < update <= count + step)."""
        from migrate.optim.schedules import FactorScheduler
        schedule = FactorScheduler(step=3, factor=0.5, stop_factor_lr=1e-3, base_lr=0.1)
        assert schedule(10 ** 18) == 1e-3
        assert schedule.count < 10 ** 18 <= schedule.count + 3 and schedule.count % 3 == 0


_WARMUP = {"base_lr": 0.1, "warmup_steps": 0, "warmup_begin_lr": 0, "warmup_mode": "linear"}
# (description, lr_scheduler entry, message pattern): torch_lr_scheduler refuses each with LrSchedulerError
SCHEDULER_ERRORS = [
    ("factor step 0", dict(SCHEDULE, step=0), r"\(FactorScheduler\): step must be a number >= 1"),
    ("factor step a bool", dict(SCHEDULE, step=True), r"step must be a number >= 1.*got True"),
    ("factor above 1", dict(SCHEDULE, factor=2), r"factor must be a finite number <= 1"),
    ("factor infinite", dict(SCHEDULE, factor=float("-inf")), r"factor must be a finite number"),
    ("warmup_steps negative", dict(SCHEDULE, warmup_steps=-1), r"warmup_steps must be an integer >= 0"),
    ("warmup_mode unknown", dict(SCHEDULE, warmup_mode="cubic"), r"warmup_mode must be 'linear' or 'constant'"),
    ("multifactor empty", dict(_WARMUP, type="MultiFactorScheduler", step=[], factor=0.5),
     r"step must be a non-empty list of numbers >= 1"),
    ("multifactor decreasing", dict(_WARMUP, type="MultiFactorScheduler", step=[5, 2], factor=0.5),
     r"step \[5, 2\] must be increasing"),
    ("poly max_update a float", dict(_WARMUP, type="PolyScheduler", max_update=10.0, pwr=2, final_lr=0),
     r"max_update must be an integer >= 1"),
    ("poly zero-length decay", dict(_WARMUP, type="PolyScheduler", max_update=3, pwr=2, final_lr=0, warmup_steps=3),
     r"max_update 3 equals warmup_steps.*divides by zero at update 3"),
    ("poly negative pwr", dict(_WARMUP, type="PolyScheduler", max_update=10, pwr=-1, final_lr=0),
     r"pwr -1 is negative.*raises 0 to a negative power at update 10"),
    ("cosine zero-length decay", dict(_WARMUP, type="CosineScheduler", max_update=5, final_lr=0, warmup_steps=5),
     r"\(CosineScheduler\): max_update 5 equals warmup_steps"),
    ("cosine final_lr NaN", dict(_WARMUP, type="CosineScheduler", max_update=5, final_lr=float("nan")),
     r"final_lr must be a finite number, got nan"),
]


@pytest.mark.parametrize("description, spec, pattern", SCHEDULER_ERRORS, ids=[e[0] for e in SCHEDULER_ERRORS])
def test_torch_lr_scheduler_refuses_malformed(files, description, spec, pattern):
    """The API refuses what MXNet refuses or cannot compute, with LrSchedulerError naming the argument; the
    optimizer's lr is left as it was."""
    import torch

    import migrate
    from migrate.errors import LrSchedulerError
    settings = dict(json.loads((files / "settings.json").read_text()), lr_scheduler=spec)
    optimizer = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(LrSchedulerError, match=pattern):
        migrate.torch_lr_scheduler(optimizer, settings)
    assert optimizer.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("error", [RuntimeError("boom\nsecond line"), MemoryError(), RecursionError("deep")],
                         ids=["RuntimeError", "MemoryError", "RecursionError"])
def test_unexpected_error_is_one_line_exit_2(files, tmp_path, monkeypatch, capsys, error):
    """The last resort: an exception no check foresaw (raised while verifying) ends in exit 2 and one line naming its
    type, and `all` leaves no folder and no temporary folder."""
    from migrate.cli import commands

    def fail(*args, **kwargs):
        raise error
    monkeypatch.setattr(commands, "verify", fail)
    out = tmp_path / "all"
    assert main(_all_argv(files, out)) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"migrate all: error: unexpected {type(error).__name__}"), lines
    assert not out.exists() and _staging(tmp_path) == []


def test_states_bomb_allocates_nothing_big(files, tmp_path, capsys):
    """`migrate optim --states` of the 32-byte pickle calling bytearray(4 * 10**9): exit 2 with the one line, and the
    traced peak of the whole command (its imports done by a first run) stays under 64 MiB (it reached 4.4 GB)."""
    import tracemalloc
    argv = [a.format(d=files) for a in _with(_with(_OPTIM, "--states", "{d}/states-bytearray-4e9-.states"), "--out",
                                           str(tmp_path / "o.pt"))]
    assert main(argv) == 2  # imports and first-use caches, untraced
    tracemalloc.start()
    try:
        assert main(argv) == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "asks for a bytearray of 4,000,000,000 bytes" in capsys.readouterr().err
    assert peak < 64 * 2 ** 20, f"{peak / 2 ** 20:.1f} MiB"


def test_every_output_has_the_usual_mode(previous):
    """Every file `migrate all` writes, weights.safetensors included (it was 0600), has the mode the umask gives new
    files (0644 under umask 022), and the folder the one it gives folders."""
    from mxformats.atomic import usual_mode
    out, tree = previous
    modes = {name: oct(os.stat(out / name).st_mode & 0o777) for name in tree}
    assert modes == dict.fromkeys(tree, oct(usual_mode())), modes
    assert os.stat(out).st_mode & 0o777 == usual_mode(folder=True)
