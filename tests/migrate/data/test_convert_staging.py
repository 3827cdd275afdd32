"""`migrate data convert` builds its folder as `migrate all` does (``migrate.staged_folder``): killed (-9) at any stage
it leaves no output and the next conversion removes its staging; two conversions into one ``--out`` never replace
each other silently (the second refuses, or with ``--force`` swaps its whole export in); every output has the usual
mode; ``manifest.json`` keeps its tag in ``format``."""
import json
import os
import signal
import subprocess
import sys

import pytest

from migrate.cli import main
from mxformats.atomic import usual_mode
from tests.migrate.cli.test_hostile_inputs import paused_migrate
from tests.torch_side import recordio_data as data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
pytestmark = pytest.mark.slow  # each test starts `python -m migrate` (about 3 s)


@pytest.fixture
def class_set(tmp_path):
    """A 6-image class set (c.rec + c.idx) in ``tmp_path/in``."""
    folder = tmp_path / "in"
    folder.mkdir()
    data.write_class_set(str(folder / "c.rec"), str(folder / "c.idx"), 6)
    return str(folder / "c.rec"), str(folder / "c.idx")


def _convert(rec, idx, out, *extra) -> list:
    return ["data", "convert", "--rec", rec, "--idx", idx, "--out", str(out), "--quiet", *extra]


def _staging(parent) -> list:
    return sorted(name for name in os.listdir(parent) if name.startswith(".tmp-"))


@pytest.mark.parametrize("stage", ["staged", "before-rename"])
def test_kill_9_leaves_nothing_after_the_next_run(class_set, tmp_path, stage):
    """kill -9 while staged or just before the rename: no --out, the dead run's staging beside it; the next
    conversion into the same folder (no --force needed: nothing is there) removes that staging and succeeds. A
    staging folder of the old naming (.tmp-data-<dead pid>-...) goes too."""
    out = tmp_path / "images"
    process = paused_migrate(_convert(*class_set, out), stage)
    process.kill()
    process.wait()
    assert not out.exists() and len(_staging(tmp_path)) == 1, os.listdir(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f".tmp-data-{dead.pid}-images-x1y2").mkdir()
    assert main(_convert(*class_set, out)) == 0
    assert _staging(tmp_path) == [] and sorted(os.listdir(out))[-2:] == ["manifest.json", "records.jsonl"]


def test_a_running_conversions_staging_is_left_alone(class_set, tmp_path):
    """A conversion paused at work keeps its staging while another runs into another folder of the same parent."""
    process = paused_migrate(_convert(*class_set, tmp_path / "first"), "staged")
    try:
        assert main(_convert(*class_set, tmp_path / "second")) == 0
        assert len(_staging(tmp_path)) == 1
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("force", [False, True], ids=["second refuses", "second with --force swaps in"])
def test_concurrent_conversions_into_one_out(class_set, tmp_path, capsys, force):
    """A conversion paused before its rename while another completes into the same --out: without --force the paused
    one exits 2 naming --out and the other run, leaving that export whole; with --force it swaps its own whole export
    in (tar shards replacing the class folders). No staging is left either way."""
    out = tmp_path / "images"
    argv = _convert(*class_set, out, "--format", "tar", *(["--force"] if force else []))
    first = paused_migrate(argv, "before-rename", seconds=3)
    assert main(_convert(*class_set, out)) == 0
    written = sorted(os.listdir(out))
    err = first.communicate(timeout=60)[1]
    if force:
        assert first.returncode == 0, err
        assert sorted(os.listdir(out)) == ["manifest.json", "records.jsonl", "shard-000000.tar"]
    else:
        assert first.returncode == 2 and "another run wrote this folder while this one worked" in err, err
        assert sorted(os.listdir(out)) == written and "0" in written
    assert _staging(tmp_path) == []


def test_outputs_modes_and_manifest(class_set, tmp_path):
    """Every file and folder of the export has the usual mode (the umask's), and manifest.json's format is its tag
    with the conversion's own format under output_format (schema 2)."""
    out = tmp_path / "shards"
    assert main(_convert(*class_set, out, "--format", "tar", "--per-shard", "4")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["format"], manifest["schema_version"], manifest["output_format"]) == (
        "gluon-lr-recordio-export", 2, "tar")
    modes = {name: os.stat(out / name).st_mode & 0o777 for name in os.listdir(out)}
    assert modes == dict.fromkeys(["manifest.json", "records.jsonl", "shard-000000.tar", "shard-000001.tar"],
                                  usual_mode()), modes
    assert os.stat(out).st_mode & 0o777 == usual_mode(folder=True)


def test_sigterm_exits_130_and_leaves_nothing(class_set, tmp_path):
    """SIGTERM while staged: exit 130, the one INTERRUPTED line, no --out and no staging."""
    out = tmp_path / "images"
    process = paused_migrate(_convert(*class_set, out), "staged")
    process.send_signal(signal.SIGTERM)
    err = process.communicate(timeout=60)[1]
    assert process.returncode == 130 and "INTERRUPTED" in err, err
    assert not out.exists() and _staging(tmp_path) == []
