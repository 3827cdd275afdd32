"""RecordIO files written by MXNet, and what MXNet reads from them: the truth the reader in ``migrate.data`` is
compared with (here in tests/migrate/data/test_recordio.py, and in ./.venv-torch by tests/test_torch_env_recordio.py).

The image records are packed as im2rec packs them (``mx.recordio.IRHeader(0, label, lst index, 0)`` through
``mx.recordio.pack`` and ``MXIndexedRecordIO.write_idx``; the payloads are encoded files, as ``--pass-through`` packs
them: this venv has no cv2 for ``pack_img``).
"""
import os

import mxnet as mx
import numpy as np

from tests.torch_side import recordio_data as data


def write_image_set(folder) -> tuple[str, str]:
    """images.rec + images.idx of ``recordio_data.image_records()``, written by ``MXIndexedRecordIO``."""
    rec, idx = os.path.join(folder, "images.rec"), os.path.join(folder, "images.idx")
    writer = mx.recordio.MXIndexedRecordIO(idx, rec, "w")
    for key, header, payload in data.image_records():
        writer.write_idx(key, mx.recordio.pack(mx.recordio.IRHeader(*header), payload))
    writer.close()
    return rec, idx


def write_scalar_image_set(folder) -> tuple[str, str]:
    """scalar.rec + .idx: every payload of ``recordio_data.image_payloads()`` with a number label (its position), as
    ImageRecordIter with its default ``label_width=1`` accepts them."""
    rec, idx = os.path.join(folder, "scalar.rec"), os.path.join(folder, "scalar.idx")
    writer = mx.recordio.MXIndexedRecordIO(idx, rec, "w")
    for i, payload in enumerate(data.image_payloads().values()):
        writer.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(i), i, 0), payload))
    writer.close()
    return rec, idx


def write_raw_set(folder) -> str:
    """raw.rec of ``recordio_data.raw_payloads()`` (framing edge cases), written by ``MXRecordIO``."""
    rec = os.path.join(folder, "raw.rec")
    writer = mx.recordio.MXRecordIO(rec, "w")
    for payload in data.raw_payloads():
        writer.write(payload)
    writer.close()
    return rec


def write_class_set(folder, count: int) -> tuple[str, str]:
    """classes.rec + .idx: ``count`` PNGs, label = key = index = the red value of pixel (0, 0)."""
    rec, idx = os.path.join(folder, "classes.rec"), os.path.join(folder, "classes.idx")
    writer = mx.recordio.MXIndexedRecordIO(idx, rec, "w")
    for i in range(count):
        writer.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(i), i, 0), data.class_payload(i)))
    writer.close()
    return rec, idx


def sequential_records(rec: str) -> list:
    """Every record, as ``MXRecordIO.read`` returns them in turn."""
    reader, records = mx.recordio.MXRecordIO(rec, "r"), []
    while (record := reader.read()) is not None:
        records.append(record)
    reader.close()
    return records


def indexed_reading(rec: str, idx: str) -> dict:
    """What MXNet reads through the .idx: keys, each record, its ``unpack``ed header and its ``imdecode``d pixels."""
    reader = mx.recordio.MXIndexedRecordIO(idx, rec, "r")
    keys = list(reader.keys)
    records = [reader.read_idx(key) for key in keys]
    reader.close()
    unpacked = [mx.recordio.unpack(record) for record in records]
    return {"keys": keys, "records": records,
            "headers": [(h.flag, np.asarray(h.label, dtype=np.float32).tolist(), h.id, h.id2) for h, _ in unpacked],
            "pixels": [mx.image.imdecode(payload).asnumpy() for _, payload in unpacked]}
