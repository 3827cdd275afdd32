"""Every module of ``migrate`` and ``mxformats`` imports first in a fresh interpreter: no import circle that only the
order of imports elsewhere hides (``from migrate.generate import generate_torch`` once failed in a new process while
``mapping`` and ``generate`` imported each other), and ``import migrate`` loads no CLI module and no torch."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_DRIVER = r"""
import importlib, json, os, sys
import numpy, torch  # the libraries once; each child imports one module of ours first
failed = {}
for name in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            code = 0
        except BaseException as exc:
            os.write(write, f"{type(exc).__name__}: {exc}"[:500].encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    if os.waitpid(pid, 0)[1]:
        failed[name] = message
print(json.dumps(failed))
"""


def _modules(package: str) -> list:
    """The dotted names of every module of ``package`` (a folder of this repository)."""
    names = []
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
        for file in sorted(files):
            if file.endswith(".py"):
                parts = os.path.relpath(os.path.join(folder, file), ROOT)[:-3].split(os.sep)
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names)


def test_every_module_imports_first():
    """Each module of migrate and mxformats, imported first in a process that holds none of ours, imports."""
    names = _modules("migrate") + _modules("mxformats")
    done = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(names)], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(names) > 100 and json.loads(done.stdout.splitlines()[-1]) == {}


def test_import_migrate_loads_no_cli_and_no_torch():
    """``import migrate`` imports neither its command line nor torch (its names load on first use), and a name
    then resolves to its home."""
    code = ("import sys, migrate; print(sorted(m for m in sys.modules if m.startswith('migrate.cli') or m == 'torch'),"
            " migrate.load_migration.__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["[]", "migrate.migration_folder"]
