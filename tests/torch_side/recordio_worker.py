"""Reads RecordIO files MXNet wrote with ``migrate.data`` alone: run by tests/test_torch_env_recordio.py in
./.venv-torch (numpy 2, no mxnet), which compares what it read with what MXNet reads.

``python -m tests.torch_side.recordio_worker JOB.json``: the job names ``images`` (rec, idx), ``raw`` (rec) and
``classes`` (rec, idx) and an ``out`` folder. Writes ``out/read.npz`` (each indexed record's bytes and decoded
pixels, each raw record read in turn) and prints one JSON line: the keys and headers, the labels each DataLoader epoch
gave (2 and 4 workers, shuffled), the numpy version and whether ``mxnet`` was imported.
"""
import json
import os
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader

from migrate.data import RecordDataset, RecordFile, decode_image


def _epoch_labels(dataset, workers: int) -> list:
    """One shuffled epoch's labels; each image checked to be its record's (pixel (0, 0) holds the label)."""
    seen = []
    for images, labels in DataLoader(dataset, batch_size=5, shuffle=True, num_workers=workers):
        assert torch.equal(images[:, 0, 0, 0].float(), labels), "an image came with another record's label"
        seen += labels.long().tolist()
    return seen


def main(job_path: str) -> dict:
    with open(job_path) as handle:
        job = json.load(handle)
    records = RecordFile(*job["images"])
    arrays, headers = {}, []
    for i, key in enumerate(records.keys()):
        header, payload = records.unpacked(key)
        arrays[f"record{i}"] = np.frombuffer(records.record(key), dtype=np.uint8)
        arrays[f"pixels{i}"] = decode_image(payload)
        headers.append([header.flag, np.asarray(header.label, dtype=np.float32).tolist(), header.id, header.id2])
    for i, record in enumerate(RecordFile(job["raw"])):
        arrays[f"raw{i}"] = np.frombuffer(record, dtype=np.uint8)
    np.savez(os.path.join(job["out"], "read.npz"), **arrays)
    torch.manual_seed(0)
    classes = RecordDataset(*job["classes"])
    epochs = {str(workers): _epoch_labels(classes, workers) for workers in (2, 4)}
    return {"keys": records.keys(), "headers": headers, "epochs": epochs, "numpy": np.__version__,
            "mxnet_imported": "mxnet" in sys.modules}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
