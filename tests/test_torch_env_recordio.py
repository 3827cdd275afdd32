"""MXNet's RecordIO files read in the environment without MXNet (./.venv-torch: numpy 2, no mxnet), against what
MXNet 1.9.1 reads from them here (./.venv).

MXNet writes the files (``tests/migrate/_mx_recordio.py``: im2rec's packing, framing edge cases, a class set); the
reader in ./.venv-torch (``tests/torch_side/recordio_worker.py``) returns the same keys, record bytes and headers, the
same raw records in turn, pixels equal to ``mx.image.imdecode``'s (max difference 0 for every JPEG and PNG kind), and
DataLoader epochs with 2 and 4 workers that give each record once; ``mxnet`` is never imported there. As
tests/test_torch_env.py, these tests skip when ./.venv-torch is missing, unless ``GLUON_LR_REQUIRE_TORCH_ENV=1``.
"""
import json
import os
import subprocess

import numpy as np
import pytest

from tests.migrate import _mx_recordio as M
from tests.test_torch_env import ROOT, torch_python  # noqa: F401 (the fixture: ./.venv-torch's interpreter)


@pytest.fixture(scope="module")
def numpy2_reading(torch_python, tmp_path_factory):  # noqa: F811
    """MXNet's files and reading of them here; the worker's reading in ./.venv-torch: (truth, summary, arrays)."""
    folder = tmp_path_factory.mktemp("recordio_env")
    images = M.write_image_set(str(folder))
    job = {"images": images, "raw": M.write_raw_set(str(folder)), "classes": M.write_class_set(str(folder), 30),
           "out": str(folder)}
    (folder / "job.json").write_text(json.dumps(job))
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    done = subprocess.run([torch_python, "-m", "tests.torch_side.recordio_worker", str(folder / "job.json")],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    truth = dict(M.indexed_reading(*images), raw=M.sequential_records(job["raw"]))
    return truth, json.loads(done.stdout.strip().splitlines()[-1]), np.load(folder / "read.npz")


def test_no_mxnet_and_numpy_2(numpy2_reading):
    """The worker ran on numpy >= 2 and never imported mxnet."""
    _, summary, _ = numpy2_reading
    assert np.lib.NumpyVersion(summary["numpy"]) >= "2.0.0" and not summary["mxnet_imported"]


def test_records_and_headers_equal_mxnets(numpy2_reading):
    """Keys in .idx order, every record byte for byte, every header (flag, label, id, id2 up to 2**64 - 1) as MXNet's;
    the raw records (empty, magic-holding, multi-part) as MXRecordIO.read gives them in turn."""
    truth, summary, arrays = numpy2_reading
    assert summary["keys"] == truth["keys"] and len(truth["keys"]) == 13
    for i, record in enumerate(truth["records"]):
        assert arrays[f"record{i}"].tobytes() == record, truth["keys"][i]
    assert [tuple(h) for h in summary["headers"]] == truth["headers"]
    assert [arrays[f"raw{i}"].tobytes() for i in range(len(truth["raw"]))] == truth["raw"]
    assert f"raw{len(truth['raw'])}" not in arrays.files


def test_pixels_equal_mxnet_imdecode(numpy2_reading):
    """Decoded with Pillow there, every image equals MXNet's OpenCV decode here pixel for pixel (max difference 0)."""
    truth, _, arrays = numpy2_reading
    for i, theirs in enumerate(truth["pixels"]):
        ours = arrays[f"pixels{i}"]
        assert ours.shape == theirs.shape and ours.dtype == np.uint8, truth["keys"][i]
        worst = int(np.abs(ours.astype(np.int16) - theirs).max())
        assert worst == 0, f"key {truth['keys'][i]}: max |Pillow - OpenCV| = {worst}"


@pytest.mark.parametrize("workers", ["2", "4"])
def test_dataloader_workers_give_each_record_once(numpy2_reading, workers):
    """A shuffled epoch with 2 or 4 workers over MXNet's 30-record class set: each record once, with its own image."""
    _, summary, _ = numpy2_reading
    labels = summary["epochs"][workers]
    assert sorted(labels) == list(range(30)) and labels != list(range(30))
