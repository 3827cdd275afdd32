"""migrate.data against MXNet itself: files written by ``mx.recordio`` (im2rec's packing: number labels, multi-labels,
detection labels, 64-bit ids, a payload holding the magic, JPEG and PNG) read back with the same bytes, headers and
pixels; what ``migrate.data`` writes (framing, .idx) is what MXNet writes and reads.

The same comparison in the numpy-2 environment without MXNet: tests/test_torch_env_recordio.py.
"""
import struct

import mxnet as mx
import numpy as np
import pytest
import torch

from migrate.data import ImageRecordAugment, RecordDataset, RecordFile, decode_image, framed, pack, unpack
from tests.migrate import _mx_recordio as M
from tests.torch_side import recordio_data as data


@pytest.fixture(scope="module")
def mx_files(tmp_path_factory):
    """The sets MXNet wrote: images and scalar (rec, idx), raw (rec), classes (rec, idx); MXNet's reading of images."""
    folder = str(tmp_path_factory.mktemp("mxrec"))
    images = M.write_image_set(folder)
    return {"images": images, "scalar": M.write_scalar_image_set(folder), "raw": M.write_raw_set(folder),
            "classes": M.write_class_set(folder, 12),
            "mx_images": M.indexed_reading(*images)}


class TestWriterBytes:
    def test_framing_is_mxnets(self, mx_files):
        """``framed`` gives the bytes MXRecordIO.write appends, for every framing edge case and every image record."""
        with open(mx_files["raw"], "rb") as handle:
            assert b"".join(framed(p) for p in data.raw_payloads()) == handle.read()
        with open(mx_files["images"][0], "rb") as handle:
            assert b"".join(framed(pack(h, p)) for _, h, p in data.image_records()) == handle.read()

    def test_pack_is_mxnets(self):
        """``pack`` gives mx.recordio.pack's bytes for number labels, label arrays and 64-bit ids."""
        for _, header, payload in data.image_records():
            assert pack(header, payload) == mx.recordio.pack(mx.recordio.IRHeader(*header), payload)

    def test_the_magic_record_is_multi_part(self, mx_files):
        """The JPEG holding the magic was written by MXNet in parts (cflag 1 first): the case is exercised."""
        rec, idx = mx_files["images"]
        records = RecordFile(rec, idx)
        key = next(k for k, _, p in data.image_records() if p == data.image_payloads()["jpeg_with_magic"])
        with open(rec, "rb") as handle:
            handle.seek(records.offset(key))
            magic, lrecord = struct.unpack("<II", handle.read(8))
        assert magic == 0xCED7230A and lrecord >> 29 == 1


class TestReading:
    def test_indexed_records_equal_mxnets(self, mx_files):
        """keys() are MXIndexedRecordIO's keys in order; record(key) equals read_idx(key), byte for byte."""
        truth, records = mx_files["mx_images"], RecordFile(*mx_files["images"])
        assert records.keys() == truth["keys"] and len(truth["keys"]) == 13
        assert [records.record(key) for key in truth["keys"]] == truth["records"]

    @pytest.mark.parametrize("name", ["raw", "images"])
    def test_sequential_records_equal_mxnets(self, mx_files, name):
        """Iteration (no .idx: one scan) gives MXRecordIO.read's records in turn, the empty record included."""
        rec = mx_files[name] if name == "raw" else mx_files[name][0]
        assert list(RecordFile(rec)) == M.sequential_records(rec)

    def test_headers_equal_mxnets(self, mx_files):
        """unpack gives mx.recordio.unpack's flag, label (float or float32 array), id, id2 and payload."""
        records = RecordFile(*mx_files["images"])
        for key, record in zip(mx_files["mx_images"]["keys"], mx_files["mx_images"]["records"]):
            ours, theirs = unpack(records.record(key)), mx.recordio.unpack(record)
            assert ours[1] == theirs[1] and (ours[0].flag, ours[0].id, ours[0].id2) == theirs[0][:1] + theirs[0][2:]
            assert type(ours[0].label) is type(theirs[0].label) or ours[0].flag > 0
            assert np.array_equal(np.asarray(ours[0].label), np.asarray(theirs[0].label)), key

    def test_index_written_is_read_by_mxnet(self, mx_files, tmp_path):
        """write_index of a scanned file: MXIndexedRecordIO reads the same records through it."""
        rec = mx_files["images"][0]
        RecordFile(rec).write_index(tmp_path / "scan.idx")
        reader = mx.recordio.MXIndexedRecordIO(str(tmp_path / "scan.idx"), rec, "r")
        assert reader.keys == list(range(13))
        assert [reader.read_idx(k) for k in range(13)] == M.sequential_records(rec)
        reader.close()


class TestDecoding:
    def test_pixels_equal_mxnet_imdecode(self, mx_files):
        """decode_image equals mx.image.imdecode (OpenCV) pixel for pixel for every kind: JPEG 4:2:0/4:2:2/4:4:4,
        progressive, grayscale, CMYK; PNG RGB, RGBA, gray, palette, 16-bit; BMP."""
        records = RecordFile(*mx_files["images"])
        names = {payload: name for name, payload in data.image_payloads().items()}
        for key, theirs in zip(mx_files["mx_images"]["keys"], mx_files["mx_images"]["pixels"]):
            payload = records.unpacked(key)[1]
            ours = decode_image(payload)
            assert ours.shape == theirs.shape, names[payload]
            worst = int(np.abs(ours.astype(np.int16) - theirs).max())
            assert worst == 0, f"{names[payload]}: max |Pillow - OpenCV| = {worst}"

    def test_dataset_equals_image_record_iter(self, mx_files):
        """RecordDataset's images and labels equal mx.io.ImageRecordIter's (no resize or crop), record by record."""
        rec, idx = mx_files["classes"]
        batches = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 8, 10), batch_size=4, shuffle=False,
                                        preprocess_threads=1)
        theirs = [(b.data[0].asnumpy(), b.label[0].asnumpy()) for b in batches]
        images = np.concatenate([d for d, _ in theirs])
        labels = np.concatenate([lab for _, lab in theirs])
        dataset = RecordDataset(rec, idx)
        ours = [dataset[i] for i in range(len(dataset))]
        assert np.array_equal(np.stack([image.numpy() for image, _ in ours]).astype(np.float32), images)
        assert torch.equal(torch.stack([label for _, label in ours]), torch.from_numpy(labels))


class TestImageRecordAugment:
    @pytest.mark.parametrize("resize, shape", [(24, (3, 20, 20)), (40, (3, 36, 30)), (-1, (3, 9, 11))])
    def test_pixels_within_1_of_image_record_iters(self, mx_files, resize, shape):
        """ImageRecordIter(resize, data_shape, centre crop) and RecordDataset + ImageRecordAugment on every image
        record (shrunk and enlarged): within 1 (OpenCV's fixed-point rounding), equal without a resize."""
        rec, idx = mx_files["scalar"]
        batches = mx.io.ImageRecordIter(path_imgrec=rec, path_imgidx=idx, data_shape=shape, batch_size=13,
                                        resize=resize, inter_method=1, preprocess_threads=1, verbose=False)
        theirs = next(iter(batches)).data[0].asnumpy()
        dataset = RecordDataset(rec, idx, transform=ImageRecordAugment(shape, resize=resize))
        ours = np.stack([dataset[i][0].numpy() for i in range(13)]).astype(np.float32)
        assert ours.shape == theirs.shape and np.abs(ours - theirs).max() == (0 if resize == -1 else 1)
