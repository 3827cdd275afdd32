"""insightface's RecordIO layout (record 0 a header whose label holds the image key range, identity records after the
images) read by ``migrate.data.insightface_dataset``, against the logic of arcface_torch's ``MXFaceDataset``
(insightface ``recognition/arcface_torch/dataset.py``, written out below with MXNet's own recordio and imdecode): the
same samples and labels, index for index, through a DataLoader with 2 workers; and ``RecordDataset``'s ``keys`` and
``raw``.
"""
import numbers
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
import torch

from migrate.data import RecordDataset, insightface_dataset
from migrate.errors import RecordKeyError
from tests.torch_side import recordio_data as data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def face_set(tmp_path_factory):
    """train.rec + train.idx in insightface's layout, written by MXIndexedRecordIO (as insightface's tools write)."""
    folder = tmp_path_factory.mktemp("faces")
    rec, idx = str(folder / "train.rec"), str(folder / "train.idx")
    writer = mx.recordio.MXIndexedRecordIO(idx, rec, "w")
    for key, header, payload in data.insightface_records():
        writer.write_idx(key, mx.recordio.pack(mx.recordio.IRHeader(*header), payload))
    writer.close()
    return rec, idx


def mxface_samples(rec: str, idx: str) -> list:
    """``MXFaceDataset`` without its transform: (imdecode's HWC RGB pixels, int64 label) per index. Its logic: read
    record 0; when its flag is > 0, the images are keys ``range(1, int(label[0]))``, else every key; per item, the
    label (its first value when it is an array) as a long tensor and ``mx.image.imdecode`` of the payload."""
    imgrec = mx.recordio.MXIndexedRecordIO(idx, rec, "r")
    header, _ = mx.recordio.unpack(imgrec.read_idx(0))
    imgidx = np.array(range(1, int(header.label[0]))) if header.flag > 0 else np.array(list(imgrec.keys))
    samples = []
    for key in imgidx:
        header, img = mx.recordio.unpack(imgrec.read_idx(int(key)))
        label = header.label
        if not isinstance(label, numbers.Number):
            label = label[0]
        label = torch.tensor(label).to(torch.long)  # torch.tensor(label, dtype=torch.long); torch 2.14 refuses that
        samples.append((mx.image.imdecode(img).asnumpy(), label))  # for a numpy float32: same truncation, 2 steps
    imgrec.close()
    return samples


LOADER_SCRIPT = """
import sys
import numpy as np
from torch.utils.data import DataLoader
from migrate.data import insightface_dataset
rec, idx, out = sys.argv[1:4]
def as_list(batch):
    return batch
dataset = insightface_dataset(rec, idx)
found = {}
for batch in DataLoader(dataset, batch_size=3, num_workers=2, collate_fn=as_list):
    for image, label in batch:
        n = len(found) // 2
        found[f"image{n}"], found[f"label{n}"] = image.permute(1, 2, 0).numpy(), np.array(label.item(), np.int64)
found["dtype"] = np.array(str(label.dtype))
found["mxnet"] = np.array("mxnet" in sys.modules)
np.savez(out, **found)
"""


class TestInsightFace:
    def test_samples_and_labels_equal_mxface_datasets(self, face_set, tmp_path):
        """Through a DataLoader with 2 workers (a fresh interpreter, no MXNet): 7 samples, the header and the 3
        identity records left out; each image pixel-equal to imdecode's and each label MXFaceDataset's int64."""
        reference = mxface_samples(*face_set)
        env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
        out = str(tmp_path / "ours.npz")
        done = subprocess.run([sys.executable, "-c", LOADER_SCRIPT, *face_set, out], capture_output=True, text=True,
                              cwd=ROOT, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        ours = np.load(out)
        assert len(reference) == 7 and len([k for k in ours.files if k.startswith("image")]) == 7
        assert str(ours["dtype"]) == "torch.int64" and not bool(ours["mxnet"])
        for i, (pixels, label) in enumerate(reference):
            assert ours[f"image{i}"].shape == pixels.shape and np.array_equal(ours[f"image{i}"], pixels), i
            assert int(ours[f"label{i}"]) == int(label), i
        assert [int(label) for _, label in reference] == [0, 0, 1, 1, 1, 2, 2]

    def test_plain_set_is_every_key(self, tmp_path):
        """A file whose record 0 is an image (flag 0): every key is a sample, as MXFaceDataset reads it."""
        rec, idx = str(tmp_path / "c.rec"), str(tmp_path / "c.idx")
        data.write_class_set(rec, idx, 5)
        reference = mxface_samples(rec, idx)
        dataset = insightface_dataset(rec, idx)
        assert len(dataset) == len(reference) == 5
        for i, (pixels, label) in enumerate(reference):
            image, identity = dataset[i]
            assert np.array_equal(image.permute(1, 2, 0).numpy(), pixels) and torch.equal(identity, label)

    def test_the_plain_dataset_refuses_the_header(self, face_set):
        """RecordDataset without keys reads every record: the header's empty payload is no image (what made
        MXFaceDataset's users change 8 lines); with keys 1..7 it reads the images."""
        from migrate.errors import RecordIOError
        with pytest.raises(RecordIOError, match=r"key 0 \(record at byte 0\): 0 bytes that Pillow cannot decode"):
            RecordDataset(*face_set)[0]
        assert len(RecordDataset(*face_set, keys=range(1, 8))) == 7


class TestKeysAndRaw:
    def test_keys_subset_in_order(self, face_set):
        """keys=[3, 1, 1]: those records, in that order (repeats kept); labels as the records hold them."""
        dataset = RecordDataset(*face_set, keys=[3, 1, 1])
        labels = [float(dataset[i][1]) for i in range(3)]
        assert len(dataset) == 3 and labels == [1.0, 0.0, 0.0]

    def test_raw_payloads(self, face_set):
        """raw=True: each item's payload bytes as mx.recordio.unpack gives them, the transform called on them."""
        reader = mx.recordio.MXIndexedRecordIO(face_set[1], face_set[0], "r")
        expected = [mx.recordio.unpack(reader.read_idx(key))[1] for key in (2, 9)]
        reader.close()
        dataset = RecordDataset(*face_set, keys=[2, 9], raw=True)
        assert [dataset[i][0] for i in range(2)] == expected and expected[1] == b""
        assert torch.equal(dataset[1][1], torch.tensor([3.0, 6.0]))
        assert RecordDataset(*face_set, keys=[2], raw=True, transform=len)[0][0] == len(expected[0])

    @pytest.mark.parametrize("keys, pattern", [
        ([1, 50, 60], r"2 of the 3 keys asked for are not in its .idx \(50, 60; it holds 11 keys\)"),
        (["1"], r"1 of the 1 keys asked for are not in its .idx \('1'; it holds 11 keys\).*key_type for string"),
        ([[1]], r"1 of the 1 keys asked for are not in its .idx \(\[1\]"),
    ], ids=["absent keys", "a string for an int key", "an unhashable key"])
    def test_keys_not_held(self, face_set, keys, pattern):
        """Keys the file lacks: RecordKeyError at construction naming how many and which."""
        with pytest.raises(RecordKeyError, match=pattern):
            RecordDataset(*face_set, keys=keys)
