"""`migrate all` interrupted at any instruction (SIGINT, SIGTERM), run twice into one folder at once, and given a
folder it cannot write: exit 130 (or the decided 0/2) with exactly one line on stderr, never a traceback, never a
mixed or half-written folder, no staging folder left behind.

The MXNet side is ``MxResidual`` trained 2 steps by ``LrTrainer`` (sgd, momentum), exported with its settings and
states; the torch side is ``tests.migrate.models:torch_residual``. Runs that need many processes fork them from one
warm process (``tests/migrate/forked_runs.py``).
"""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from migrate.cli import main
from migrate.cli.interrupts import INTERRUPTED
from tests.migrate import models as M

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
COMPLETE = ["mapping.json", "optimizer.pt", "param_groups.json", "report.json", "report.txt", "weights.safetensors"]
STATUS = re.compile(rf"^migrate all: ({re.escape(INTERRUPTED)}|OK; wrote .*)$")
MXNET_LOG = re.compile(r"^\[\d\d:\d\d:\d\d\] ")  # MXNet's own C++ log lines (graph executor notices)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The exported network, its settings and its LrTrainer states."""
    folder = tmp_path_factory.mktemp("interrupts")
    M.residual_files(folder)
    return folder


def _argv(files, out, *extra):
    return ["all", "--symbol", f"{files}/res-symbol.json", "--params", f"{files}/res-0000.params", "--settings",
            f"{files}/settings.json", "--states", f"{files}/trainer.states", "--torch",
            "tests.migrate.models:torch_residual", "--input-shape", "1,3,8,8", "--out", str(out), *extra]


def _lines(stderr: str) -> list:
    """stderr without MXNet's own log lines."""
    return [line for line in stderr.splitlines() if not MXNET_LOG.match(line)]


def _forked(*arguments) -> list:
    """The JSON records ``forked_runs`` prints."""
    done = subprocess.run([sys.executable, "-m", "tests.migrate.forked_runs", *map(str, arguments)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def default_sigint() -> None:
    """In a child before it runs: SIGINT's default action (a suite started in the background hands it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def foreground():
    """SIGINT handled as in a foreground process (Python's KeyboardInterrupt) for the in-process runs, also when the
    suite runs as a background job (SIGINT ignored, which the command respects)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class TestSignalAtAnyInstruction:
    """SIGINT or SIGTERM at a random time: exit 130 (or 0 when the work was already done), one line, nothing left."""

    def test_random_times_over_the_whole_run(self, files, tmp_path):
        """20 SIGINTs and 6 SIGTERMs at seeded random times over a run's duration (matching, verification, writing
        report.json, printing, the process's end): each run ends with exit 130 and the INTERRUPTED line, or exit 0
        and the OK line (the work was done); the folder is absent or complete; no staging folder or temporary file
        is left; never a traceback or "Exception ignored"."""
        runs = _forked("interrupt", files, tmp_path, 0, 20, 6)
        clean, trials = runs[:3], runs[3:]
        assert all(run["returncode"] == 0 and run["outputs"] == COMPLETE for run in clean), clean[0]["stderr"][-2000:]
        assert len(trials) == 26 and sorted(run["signal"] for run in trials) == [2] * 20 + [15] * 6
        for run in trials:
            lines, where = _lines(run["stderr"]), f"signal {run['signal']} after {run['delay']:.3f} s"
            assert len(lines) == 1 and STATUS.match(lines[0]), f"{where}: {run['stderr'][-2000:]}"
            assert run["returncode"] == (130 if INTERRUPTED in lines[0] else 0), where
            assert run["outputs"] in (None, COMPLETE) and (run["returncode"] == 130 or run["outputs"] == COMPLETE)
            assert run["left"] == [], f"{where}: left {run['left']}"
        assert sum(run["returncode"] == 130 for run in trials) >= 3  # signals landed inside the work

    @pytest.mark.parametrize("delay, signum", [(0.2, signal.SIGINT), (0.8, signal.SIGINT), (1.5, signal.SIGTERM)],
                             ids=["sigint-0.2s", "sigint-0.8s", "sigterm-1.5s"])
    def test_while_the_libraries_import(self, files, tmp_path, delay, signum):
        """`python -m migrate all` signalled while torch and MXNet import: exit 130, the INTERRUPTED line only (no
        import traceback), nothing written."""
        process = subprocess.Popen([sys.executable, "-m", "migrate", *_argv(files, tmp_path / "all")], cwd=ROOT,
                                   env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=default_sigint)
        try:
            process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            process.send_signal(signum)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 130 and _lines(err) == [f"migrate all: {INTERRUPTED}"], err[-2000:]
        assert out == "" and os.listdir(tmp_path) == []

    def test_sigint_ignored_in_a_background_job(self, files, tmp_path):
        """A `python -m migrate all` started with SIGINT ignored (as a shell starts a background job) keeps ignoring
        it, as Python does: a Ctrl-C meant for the foreground leaves it running to its complete folder, exit 0."""
        process = subprocess.Popen([sys.executable, "-m", "migrate", *_argv(files, tmp_path / "all")], cwd=ROOT,
                                   env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        try:
            process.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
        err = process.communicate(timeout=120)[1]
        assert process.returncode == 0 and _lines(err)[-1].startswith("migrate all: OK; wrote"), err[-2000:]
        assert sorted(os.listdir(tmp_path / "all")) == COMPLETE

    def test_while_report_json_is_written(self, files, tmp_path, monkeypatch, capsys, foreground):
        """A SIGINT that arrives while report.json is written (the last file before the rename): exit 130, the
        INTERRUPTED line, no folder, no staging folder."""
        from mxformats import atomic
        real = atomic.write_json

        def write_json(path, document, **kwargs):
            if str(path).endswith("report.json"):
                os.kill(os.getpid(), signal.SIGINT)
            return real(path, document, **kwargs)
        monkeypatch.setattr(atomic, "write_json", write_json)
        assert main(_argv(files, tmp_path / "all")) == 130
        assert capsys.readouterr().err.splitlines() == [f"migrate all: {INTERRUPTED}"]
        assert os.listdir(tmp_path) == []

    def test_while_the_report_is_printed(self, files, tmp_path, monkeypatch, capsys, foreground):
        """A SIGINT that arrives while the report is printed (the outcome is decided): ignored, exit 0, the OK line,
        the complete folder."""
        from migrate.cli import commands
        real = commands._emit

        def emit(args, report):
            os.kill(os.getpid(), signal.SIGINT)
            real(args, report)
        monkeypatch.setattr(commands, "_emit", emit)
        assert main(_argv(files, tmp_path / "all")) == 0
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("migrate all: OK; wrote"), lines
        assert sorted(os.listdir(tmp_path / "all")) == COMPLETE and len(os.listdir(tmp_path)) == 1

    @pytest.mark.parametrize("finalizer", ["__del__", "weakref callback"])
    def test_inside_a_finalizer(self, files, tmp_path, monkeypatch, capsys, foreground, finalizer):
        """A SIGINT handled while a finalizer runs (where Python would print "Exception ignored in ..." and carry
        on): raised once the finalizer has returned: exit 130, one line, no noise."""
        import weakref

        from migrate.cli import commands
        real = commands.verify

        def interrupt(*_):
            os.kill(os.getpid(), signal.SIGINT)  # Python runs the handler here, inside the finalizer
            sum(range(1000))

        class Finalized:
            def __del__(self):
                interrupt()

        def verify(*args, **kwargs):
            if finalizer == "__del__":
                Finalized()
            else:
                target = type("Plain", (), {})()
                references = [weakref.ref(target, interrupt)]  # the callback runs when target goes
                del target
                assert references[0]() is None
            return real(*args, **kwargs)
        monkeypatch.setattr(commands, "verify", verify)
        assert main(_argv(files, tmp_path / "all")) == 130
        assert capsys.readouterr().err.splitlines() == [f"migrate all: {INTERRUPTED}"]
        assert os.listdir(tmp_path) == []


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_stale_staging_of_any_name_is_removed(files, tmp_path):
    """A run removes the staging folders dead processes left in --out's parent whatever --out they were for, puts
    back a previous folder set aside whose folder is missing, and leaves a running process's staging alone."""
    dead, alive = _dead_pid(), subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f".tmp-migrate-other-run-7-{dead}-abcd1234"
        stale.mkdir()
        (stale / "weights.safetensors").write_bytes(b"x" * 1000)
        aside = tmp_path / f".tmp-migrate-kept-{dead}-efgh5678.previous"
        aside.mkdir()
        (aside / "report.txt").write_text("a complete earlier folder")
        running = tmp_path / f".tmp-migrate-other-{alive.pid}-ijkl9012"
        running.mkdir()
        assert main(_argv(files, tmp_path / "all")) == 0
        assert sorted(os.listdir(tmp_path)) == sorted(["all", "kept", running.name])
        assert (tmp_path / "kept" / "report.txt").read_text() == "a complete earlier folder"
    finally:
        alive.kill()
        alive.wait()


def test_two_runs_into_one_folder(files, tmp_path):
    """Two `migrate all` runs (different commands) into one --out at once, 3 rounds and one where the first waits
    before its rename: without --force one completes and the other exits 2 naming the other run (or the existing
    folder); with --force both complete; the folder is always exactly one run's, byte for byte; nothing left."""
    rounds = _forked("race", files, tmp_path, 3)
    assert len(rounds) == 8
    for run in rounds:
        codes, where = run["returncodes"], f"round {run['round']} force={run['force']}"
        assert run["left"] == [] and run["matches"] in ("A", "B"), f"{where}: {run['matches']} {run['left']}"
        lines = {key: [line for line in _lines(text) if not line.startswith("migrate: paused at")]  # the pause hook
                 for key, text in run["stderr"].items()}
        assert all(len(found) == 1 for found in lines.values()), f"{where}: {run['stderr']}"
        if run["force"]:
            assert codes == {"A": 0, "B": 0}, f"{where}: {run['stderr']}"
        else:
            winner = run["matches"]
            loser = "B" if winner == "A" else "A"
            assert codes == {winner: 0, loser: 2}, f"{where}: {run['stderr']}"
            assert re.search(r"another run wrote this folder while this one worked|exists; pass --force",
                             lines[loser][0]), lines[loser]
        if run["round"] == "paused":  # A renamed last: with --force its folder stays, without it A is refused
            assert run["matches"] == ("A" if run["force"] else "B"), where


def _chattr(flag: str, path) -> bool:
    try:
        return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.fixture
def immutable(tmp_path):
    """Make a path immutable (chattr +i; root with CAP_LINUX_IMMUTABLE on ext4/xfs), undone afterwards; skip where
    the system does not allow it."""
    made = []

    def make(path):
        if not _chattr("+i", path):
            pytest.skip("chattr +i is not available here")
        made.append(path)
    yield make
    for path in made:
        _chattr("-i", path)


class TestUnwritableOut:
    """--out that cannot be written: one line naming --out and the fix, exit 2, nothing changed."""

    def test_immutable_out_folder(self, files, tmp_path, immutable, capsys):
        """An existing immutable --out (replaced with --force): refused before any work, naming chattr -i."""
        out = tmp_path / "all"
        assert main(_argv(files, out)) == 0
        before = {name: (out / name).read_bytes() for name in os.listdir(out)}
        immutable(out)
        capsys.readouterr()
        assert main(_argv(files, out, "--force")) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and re.search(r"--out '.*all': '.*all' cannot be replaced \(not writable, or "
                                             r"immutable.*chattr -i\)", lines[0]), lines
        assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
        assert sorted(os.listdir(tmp_path)) == ["all"]

    def test_immutable_parent(self, files, tmp_path, immutable, capsys):
        """--out inside an immutable folder: refused naming the folder and the fix."""
        parent = tmp_path / "locked"
        parent.mkdir()
        immutable(parent)
        assert main(_argv(files, parent / "all")) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and re.search(r"--out: folder '.*locked' is not writable \(Operation not permitted\); "
                                             r"choose a folder you can write to", lines[0]), lines
        assert os.listdir(parent) == []

    def test_refused_at_the_rename(self, files, tmp_path, immutable, monkeypatch, capsys):
        """--out made immutable while the run works: the rename is refused, exit 2 naming --out and the fix; the
        previous folder stays whole and the staging folder goes."""
        from migrate import staged_folder
        out = tmp_path / "all"
        assert main(_argv(files, out)) == 0
        before = {name: (out / name).read_bytes() for name in os.listdir(out)}
        monkeypatch.setattr(staged_folder, "pause_point", lambda stage: stage == "before-rename" and immutable(out))
        capsys.readouterr()
        assert main(_argv(files, out, "--force")) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and re.search(r"--out '.*all': cannot put the new folder in place \(Operation not "
                                             r"permitted\); choose another --out", lines[0]), lines
        assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
        assert sorted(os.listdir(tmp_path)) == ["all"]


def test_gradient_mode_is_restored(files, tmp_path, monkeypatch, capsys):
    """An interrupt that lands after torch.no_grad() switched gradients off and before its __exit__ was due (here:
    the verification leaves them off and is interrupted) leaves the calling program's gradient mode as it was."""
    import torch

    from migrate.cli import commands

    def verify(*args, **kwargs):
        torch.set_grad_enabled(False)
        raise KeyboardInterrupt
    monkeypatch.setattr(commands, "verify", verify)
    assert torch.is_grad_enabled()
    assert main(_argv(files, tmp_path / "all")) == 130
    assert torch.is_grad_enabled() and capsys.readouterr().err.splitlines() == [f"migrate all: {INTERRUPTED}"]
