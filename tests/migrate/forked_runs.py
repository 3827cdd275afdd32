"""`migrate all` run many times as children forked from one warm process (``test_interrupts.py`` runs this script).

The children fork from this process once torch, MXNet and migrate are imported and one complete run has warmed every
lazy import, so a run lasts as long as the command's own work (a fraction of a second on the tiny model) instead of
seconds of imports. Each child runs ``migrate.cli.command_line`` exactly as ``python -m migrate`` does, and ends the
same way (``os._exit`` with the command's code).

Modes (one JSON object printed per run):

- ``interrupt FILES PARENT SEED SIGINTS SIGTERMS``: three clean runs (their median duration sets the range), then
  one run per signal, each signalled at a seeded random time within that duration:
  {"delay", "signal", "returncode", "stderr", "outputs", "left", "elapsed"}.
- ``race FILES PARENT ROUNDS``: a reference run of each of two different commands (A: with --states, weights as
  .pt; B: without --states, .safetensors), then, without and with --force, ROUNDS rounds in which both start at
  once into the same --out, and one round in which A pauses before its rename while B completes:
  {"force", "round", "returncodes", "stderr", "matches", "left"}; ``matches`` is "A" or "B" when the folder is
  exactly that command's reference folder (every file byte for byte), else the folder's listing.
"""
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import time

_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_ARGV = ["all", "--symbol", "{d}/res-symbol.json", "--params", "{d}/res-0000.params", "--settings", "{d}/settings.json",
         "--torch", "tests.migrate.models:torch_residual", "--input-shape", "1,3,8,8", "--out", "{out}"]
_WITH_STATES = ["--states", "{d}/trainer.states"]


def argv(files: str, out: str, extra=()) -> list:
    """The `migrate all` arguments for the fixture files in ``files``, writing ``out``."""
    return [a.format(d=files, out=out) for a in [*_ARGV, *extra]]


def fork_command(arguments: list, stderr_path: str, environment=None) -> int:
    """Fork a child that runs the command line with ``arguments`` (stderr to ``stderr_path``); its pid.

    The signals stay blocked from before the fork until the child is the ``migrate`` command (as ``import migrate``
    makes ``python -m migrate``): a signal sent at once waits for it instead of hitting this driver's code.
    """
    from migrate.cli import command_line, interrupts
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.dup2(os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            os.environ.update(environment or {})
            signal.signal(signal.SIGINT, signal.default_int_handler)
            interrupts.mark_command_line(arguments)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
            command_line(arguments)
        finally:
            os._exit(99)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    return pid


def _finished(pid: int, stderr_path: str) -> tuple:
    """(exit code, stderr) of a forked child, once it ends."""
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    with open(stderr_path) as source:
        stderr = source.read()
    os.remove(stderr_path)
    return code, stderr


def _left(parent: str) -> list:
    return sorted(name for name in os.listdir(parent) if name.startswith(".tmp-"))


def _interrupted_run(files: str, parent: str, index: int, delay, signum) -> dict:
    """One run into ``parent/all-<index>``, signalled after ``delay`` seconds (None: not signalled)."""
    out, stderr_path = os.path.join(parent, f"all-{index}"), os.path.join(parent, f"stderr-{index}.txt")
    start = time.perf_counter()
    pid = fork_command(argv(files, out, _WITH_STATES), stderr_path)
    if delay is not None:
        time.sleep(delay)
        os.kill(pid, signum)  # a child that already ended is a zombie until waited: the signal is then lost
    code, stderr = _finished(pid, stderr_path)
    return {"delay": delay, "signal": signum, "returncode": code, "stderr": stderr, "left": _left(parent),
            "outputs": sorted(os.listdir(out)) if os.path.isdir(out) else None,
            "elapsed": time.perf_counter() - start}


def interrupt(files: str, parent: str, seed: int, sigints: int, sigterms: int) -> None:
    _warm_up(files, parent)
    clean = [_interrupted_run(files, parent, -index, None, None) for index in range(3)]
    for run in clean:
        print(json.dumps(run), flush=True)
    duration = sorted(run["elapsed"] for run in clean)[1]  # the median: one slow run under load does not set it
    rng = random.Random(seed)
    signals = [signal.SIGINT] * sigints + [signal.SIGTERM] * sigterms
    rng.shuffle(signals)
    for index, signum in enumerate(signals, 1):
        delay = rng.uniform(0.0, duration * 1.1)
        print(json.dumps(_interrupted_run(files, parent, index, delay, signum)), flush=True)


def _tree(folder: str) -> dict:
    return {name: hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(folder))} if os.path.isdir(folder) else {}


def race(files: str, parent: str, rounds: int) -> None:
    _warm_up(files, parent)
    out = os.path.join(parent, "race")
    commands = {"A": argv(files, out, [*_WITH_STATES, "--format", "pt"]),
                "B": argv(files, out, ["--format", "safetensors"])}
    references = {}
    for key, arguments in commands.items():
        pid = fork_command(arguments, os.path.join(parent, "reference.txt"))
        assert _finished(pid, os.path.join(parent, "reference.txt"))[0] == 0
        references[key] = _tree(out)
        shutil.rmtree(out)
    for force in (False, True):
        _race_rounds({key: value + (["--force"] if force else []) for key, value in commands.items()}, references,
                     parent, out, rounds)


def _race_rounds(commands: dict, references: dict, parent: str, out: str, rounds: int) -> None:
    for index in range(rounds + 1):
        paused = index == rounds  # A waits before its rename while B starts and completes
        order = ["A", "B"] if index % 2 == 0 else ["B", "A"]
        pids = {}
        for key in order:
            environment = {"MIGRATE_PAUSE_AT": "before-rename", "MIGRATE_PAUSE_SECONDS": "1.5"} if (
                paused and key == "A") else {}
            pids[key] = fork_command(commands[key], os.path.join(parent, f"race-{key}.txt"), environment)
        results = {key: _finished(pid, os.path.join(parent, f"race-{key}.txt")) for key, pid in pids.items()}
        tree = _tree(out)
        matches = next((key for key, reference in references.items() if tree == reference), sorted(tree))
        print(json.dumps({"force": "--force" in commands["A"], "round": "paused" if paused else index,
                          "returncodes": {k: r[0] for k, r in results.items()},
                          "stderr": {k: r[1] for k, r in results.items()}, "matches": matches,
                          "left": _left(parent)}), flush=True)
        shutil.rmtree(out, ignore_errors=True)


def _warm_up(files: str, parent: str) -> None:
    """One complete run in this process: every lazy import done before forking, one thread for torch."""
    import torch

    from migrate.cli import main as run
    torch.set_num_threads(1)
    warm = os.path.join(parent, "warm-up")
    assert run(argv(files, warm)) == 0
    shutil.rmtree(warm)


if __name__ == "__main__":
    mode, files_folder, parent_folder, *numbers = sys.argv[1:]
    if mode == "interrupt":
        interrupt(files_folder, parent_folder, *map(int, numbers))
    else:
        race(files_folder, parent_folder, int(numbers[0]))
