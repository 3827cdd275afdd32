"""migrate.data without MXNet: RecordIO framing, .idx, headers, image decoding, RecordDataset with DataLoader workers,
the converter and ``migrate data``; broken files give typed errors naming the file and the byte offset.

The files here are written by ``migrate.data.framed``/``pack`` (byte for byte MXNet's writer: checked against
``mx.recordio`` in tests/migrate/data/test_recordio.py). Runs in ./.venv-torch (numpy 2, no mxnet) and in ./.venv.
"""
import io
import json
import os
import pickle
import re
import struct
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from migrate.cli import main as migrate_main
from migrate.data import (ImageRecordAugment, RecordDataset, RecordFile, RecordHeader, convert_records, decode_image,
                          framed, insightface_dataset, open_image, pack, unpack)
from migrate.errors import OutputExistsError, RecordIOError, RecordKeyError
from tests.torch_side import recordio_data as data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAGIC = data.MAGIC_BYTES


@pytest.fixture
def image_set(tmp_path):
    """The image records (all label kinds) as images.rec + images.idx; (rec, idx, records)."""
    records = data.image_records()
    data.write_records(str(tmp_path / "images.rec"), str(tmp_path / "images.idx"), records)
    return str(tmp_path / "images.rec"), str(tmp_path / "images.idx"), records


class TestFramed:
    def test_parts_and_padding_by_hand(self):
        """b"abc": magic, length 3 (cflag 0), the bytes, one zero; a magic at byte 4 cuts it into parts 1 and 3."""
        assert framed(b"abc") == MAGIC + struct.pack("<I", 3) + b"abc\0"
        assert framed(b"1234" + MAGIC + b"56") == (MAGIC + struct.pack("<I", (1 << 29) | 4) + b"1234"
                                                   + MAGIC + struct.pack("<I", (3 << 29) | 2) + b"56\0\0")

    def test_unaligned_magic_is_not_cut(self):
        """A magic at byte 1 stays inside one whole part (the writer looks at 4-byte boundaries only)."""
        assert framed(b"x" + MAGIC + b"yyy")[:8] == MAGIC + struct.pack("<I", 8)

    @pytest.mark.parametrize("payload", data.raw_payloads(), ids=range(len(data.raw_payloads())))
    def test_round_trip(self, tmp_path, payload):
        """Every edge case reads back equal, the file length a multiple of 4."""
        path = tmp_path / "one.rec"
        path.write_bytes(framed(payload) + framed(b"next"))
        assert path.stat().st_size % 4 == 0
        assert list(RecordFile(path)) == [payload, b"next"]


class TestRecordFile:
    def test_indexed_access(self, image_set):
        """keys() are the .idx keys in its order; record(key) gives each record's bytes; len is the count."""
        rec, idx, records = image_set
        records_file = RecordFile(rec, idx)
        assert records_file.keys() == [key for key, _, _ in records] and len(records_file) == 13
        for key, header, payload in records:
            assert records_file.record(key) == pack(header, payload)

    def test_scan_without_index(self, image_set):
        """Without the .idx one scan finds the same offsets; keys are record numbers; write_index round-trips."""
        rec, idx, records = image_set
        scanned, indexed = RecordFile(rec), RecordFile(rec, idx)
        assert scanned.keys() == list(range(13))
        assert [scanned.offset(i) for i in range(13)] == [indexed.offset(key) for key, _, _ in records]
        scanned.write_index(os.path.join(os.path.dirname(rec), "scan.idx"))
        again = RecordFile(rec, os.path.join(os.path.dirname(rec), "scan.idx"))
        assert [again.record(i) for i in range(13)] == list(indexed)

    def test_iteration_is_file_order(self, tmp_path):
        """An .idx listing keys out of file order: iteration still goes in file order."""
        payloads = [b"first", b"second", b"third"]
        data.write_records(str(tmp_path / "a.rec"), None, [(i, (0, 0.0, i, 0), p) for i, p in enumerate(payloads)])
        offsets = RecordFile(tmp_path / "a.rec")
        (tmp_path / "a.idx").write_text("".join(f"{k}\t{offsets.offset(i)}\n" for k, i in ((9, 2), (4, 0), (7, 1))))
        records = RecordFile(tmp_path / "a.rec", tmp_path / "a.idx")
        assert records.keys() == [9, 4, 7] and records.in_file_order() == [4, 7, 9]
        assert [unpack(r)[1] for r in records] == payloads

    def test_string_keys(self, tmp_path):
        """key_type=str reads keys that are not integers, as MXIndexedRecordIO(key_type=str) does."""
        (tmp_path / "s.rec").write_bytes(framed(b"zero") + framed(b"one"))
        (tmp_path / "s.idx").write_text("img_a\t0\nimg_b\t12\n")
        records = RecordFile(tmp_path / "s.rec", tmp_path / "s.idx", key_type=str)
        assert records.keys() == ["img_a", "img_b"] and records.record("img_b") == b"one"

    def test_pickles_without_its_handle(self, image_set):
        """A pickled RecordFile (as spawn-started workers get it) reads the same records."""
        rec, idx, _ = image_set
        records = RecordFile(rec, idx)
        first = records.record(records.keys()[0])
        copy = pickle.loads(pickle.dumps(records))
        assert copy.record(copy.keys()[0]) == first and copy.keys() == records.keys()


class TestUnpack:
    def test_headers(self, image_set):
        """flag 0 with a float label, or flag = label count with a float32 array; id and id2 as written (64 bits)."""
        rec, idx, records = image_set
        records_file = RecordFile(rec, idx)
        for key, (_, label, id_, id2), payload in records:
            header, body = records_file.unpacked(key)
            assert (header.id, header.id2, body) == (id_, id2, payload)
            if isinstance(label, float):
                assert header.flag == 0 and header.label == label
            else:
                assert header.flag == len(label) and header.label.dtype == np.float32
                assert np.array_equal(header.label, np.asarray(label, dtype=np.float32))
        assert records_file.unpacked(103)[0].id == 2 ** 64 - 1  # png_rgb, the 7th: key (6 * 7) % 13 + 100

    def test_pack_matches_the_layout(self):
        """pack: 24 header bytes '<IfQQ', then the labels, then the payload."""
        assert pack(RecordHeader(0, [1.5, 2.0], 5, 6), b"p") == (struct.pack("<IfQQ", 2, 0.0, 5, 6)
                                                                 + struct.pack("<2f", 1.5, 2.0) + b"p")


class TestImages:
    def test_lossless_formats_decode_exactly(self):
        """PNG and BMP decode to their source pixels; 16-bit grayscale keeps the high byte, like OpenCV."""
        picture = np.random.RandomState(0).randint(0, 256, (5, 7, 3)).astype(np.uint8)
        for fmt in ("PNG", "BMP"):
            buffer = io.BytesIO()
            Image.fromarray(picture).save(buffer, fmt)
            assert np.array_equal(decode_image(buffer.getvalue()), picture), fmt
        deep = (picture[..., 0].astype(np.uint16) * 257 + 200)
        buffer = io.BytesIO()
        Image.fromarray(deep).save(buffer, "PNG")
        assert np.array_equal(decode_image(buffer.getvalue()), np.repeat((deep >> 8).astype(np.uint8)[..., None], 3, 2))

    def test_every_kind_is_rgb(self):
        """Every payload kind decodes to an RGB image of its own size."""
        for name, payload in data.image_payloads().items():
            image = open_image(payload)
            assert image.mode == "RGB" and decode_image(payload).shape == (image.height, image.width, 3), name


class TestRecordDataset:
    def test_items(self, image_set):
        """(CHW uint8 image, float32 label): 0-d for number labels, 1-d for arrays; transform gets a PIL image."""
        rec, idx, records = image_set
        dataset = RecordDataset(rec, idx)
        assert len(dataset) == 13
        for i, (key, (_, label, _, _), payload) in enumerate(records):
            image, target = dataset[i]
            assert image.dtype == torch.uint8 and image.is_contiguous()
            assert np.array_equal(image.permute(1, 2, 0).numpy(), decode_image(payload)), key
            assert target.dtype == torch.float32 and target.shape == np.shape(label)
            assert np.array_equal(target.numpy(), np.asarray(label, dtype=np.float32))
        sizes = RecordDataset(rec, idx, transform=lambda image: image.size, target_transform=lambda t: t.numel())
        assert sizes[0] == ((53, 37), 1)


class TestImageRecordAugment:
    def test_random_crops_cover_every_offset(self):
        """Each random crop is exactly one crop of the whole image resized (bilinear, no antialiasing), and 200 draws
        give all 9 offsets ImageRecordIter's uniform draw can give."""
        image = open_image(data.image_payloads()["png_rgb"])  # 53x37 -> resize 20: 28x20, crops of 26x18
        augment = ImageRecordAugment((3, 18, 26), resize=20, rand_crop=True)
        whole = torch.nn.functional.interpolate(torch.from_numpy(np.array(image)).permute(2, 0, 1)[None], size=(20, 28),
                                                mode="bilinear", antialias=False)[0]
        offsets = set()
        for _ in range(200):
            crop = augment(image)
            matches = [(x, y) for y in range(3) for x in range(3) if torch.equal(whole[:, y:y + 18, x:x + 26], crop)]
            assert len(matches) == 1, f"{len(matches)} crops of the resized image are equal to the crop"
            offsets.add(matches[0])
        assert len(offsets) == 9

    def test_centre_crop_and_mirror(self):
        """Without rand_crop: the centre; rand_mirror flips about half the draws, each an exact mirror."""
        image = open_image(data.image_payloads()["jpeg_422"])  # 31x40, no resize
        centre = ImageRecordAugment((3, 20, 10))(image)
        assert torch.equal(centre.permute(1, 2, 0), torch.from_numpy(np.array(image)[10:30, 10:20]))
        flips = [ImageRecordAugment((3, 20, 10), rand_mirror=True)(image) for _ in range(200)]
        mirrored = [torch.equal(f, centre.flip(2)) for f in flips]
        assert all(m or torch.equal(f, centre) for m, f in zip(mirrored, flips)) and 70 < sum(mirrored) < 130

    def test_resized_size_is_mxnets_integer_arithmetic(self):
        """Shorter edge to `resize`, the longer to resize * long // short (ImageRecordIter's arithmetic)."""
        augment = ImageRecordAugment(resize=256)
        assert augment.resized_size(500, 375) == (341, 256) and augment.resized_size(333, 500) == (256, 384)
        assert ImageRecordAugment().resized_size(50, 40) == (50, 40)

    def test_image_smaller_than_data_shape(self):
        """A crop larger than the (resized) image: RecordIOError naming both sizes."""
        with pytest.raises(RecordIOError, match=r"an image of 53x37 \(width x height; 28x20 after resize=20\) is "
                                                r"smaller than data_shape's 32x32"):
            ImageRecordAugment((3, 32, 32), resize=20)(open_image(data.image_payloads()["png_rgb"]))


LOADER_SCRIPT = """
import json, sys, torch
from torch.utils.data import DataLoader, DistributedSampler
from migrate.data import RecordDataset, RecordFile
rec, idx, start = sys.argv[1], sys.argv[2], sys.argv[3]
dataset = RecordDataset(rec, idx)
dataset[5]  # the parent reads first: its handle exists when the workers fork
def epoch(loader):
    seen = []
    for images, labels in loader:
        assert torch.equal(images[:, 0, 0, 0].float(), labels), "an image is not its record's"
        seen += labels.long().tolist()
    return seen
torch.manual_seed(0)
result = {str(w): [epoch(DataLoader(dataset, batch_size=5, shuffle=True, num_workers=w, multiprocessing_context=start))
                   for _ in range(2)] for w in (2, 4)}
result["distributed"] = []
for rank in range(2):
    sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=3)
    sampler.set_epoch(1)
    result["distributed"].append(epoch(DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                                                  multiprocessing_context=start)))
result["mxnet"] = "mxnet" in sys.modules
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def loader_epochs(tmp_path_factory):
    """Epochs of a 50-image class set (label = index = the red value of pixel (0, 0)) through DataLoaders with 2 and 4
    workers (fork) and DistributedSampler over 2 ranks, in a fresh interpreter (no MXNet in it to fork)."""
    folder = tmp_path_factory.mktemp("loader")
    data.write_class_set(str(folder / "c.rec"), str(folder / "c.idx"), 50)
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", LOADER_SCRIPT, str(folder / "c.rec"), str(folder / "c.idx"), "fork"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


class TestDataLoader:
    @pytest.mark.parametrize("workers", ["2", "4"])
    def test_each_record_once_per_epoch(self, loader_epochs, workers):
        """Shuffled, 2 or 4 workers: each of the 50 records exactly once per epoch, each image with its own label,
        and the two epochs in different orders."""
        first, second = loader_epochs[workers]
        assert sorted(first) == sorted(second) == list(range(50))
        assert first != second and first != list(range(50))
        assert not loader_epochs["mxnet"]

    def test_distributed_sampler(self, loader_epochs):
        """DistributedSampler over 2 ranks (2 workers each): disjoint halves that cover the set once."""
        rank0, rank1 = loader_epochs["distributed"]
        assert len(rank0) == len(rank1) == 25 and not set(rank0) & set(rank1)
        assert sorted(rank0 + rank1) == list(range(50))


def _bytes_of(tmp_path, name: str, content: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


def _two_records() -> bytes:
    return framed(pack((0, 1.0, 0, 0), b"AAAA")) + framed(pack((0, 2.0, 1, 0), b"BBBBBB"))


# (description, .rec bytes, .idx text or None, what is read, pattern of the message)
BROKEN = [
    ("not RecordIO", b"GIF89a" + b"\0" * 30, None, "open", r"no RecordIO record at byte 0: expected the magic "
     r"0xced7230a, found 0x"),
    ("header cut", _two_records()[:40], None, "open", r"file ends at byte 40, inside the "
     r"8-byte header where a record starts \(byte 36\): the file is truncated"),
    ("payload cut", _two_records()[:-3], None, "open", r"record part at byte 36 holds 30 bytes but the file ends at "
     r"byte 73: the file is truncated"),
    ("multi-part cut", framed(b"1234" + MAGIC + b"5678")[:12], None, "open", r"file ends at byte 12, inside the 8-byte "
     r"header where the next part of a multi-part record starts \(byte 12\)"),
    ("cflag out of sequence", MAGIC + struct.pack("<I", (2 << 29) | 4) + b"abcd", None, "open", r"part at byte 0 has "
     r"cflag 2, expected 0 \(whole record\) or 1 \(first part\)"),
    ("index past the end", _two_records(), "0\t0\n1\t4096\n", "open", r"key 1 has offset 4096, which points past the "
     r"end of the file \(76 bytes\)"),
    ("index off a boundary", _two_records(), "0\t0\n1\t6\n", "open", r"key 1 has offset 6, which is not on a 4-byte "
     r"boundary"),
    ("index into a part", framed(b"1234" + MAGIC + b"5678"), "0\t0\n1\t12\n", "record 1", r"part at byte 12 has cflag "
     r"3, expected 0 \(whole record\) or 1 \(first part\)"),
    ("index at no record", _two_records(), "0\t0\n1\t8\n", "record 1", r"no RecordIO record at byte 8"),
    ("index line malformed", _two_records(), "0\t0\n1 36\n", "open", r"line 2: expected 'key<TAB>byte offset'"),
    ("index key repeated", _two_records(), "0\t0\n0\t36\n", "open", r"line 2: key 0 is listed again \(first on line "
     r"1\)"),
    ("index offset 10**30 (line)", _two_records(), f"0\t0\n1\t{10 ** 30}\n", "open", r"line 2: offset "
     r"1000000000000000000000000000000 lies beyond any file \(2\*\*63 bytes\); rebuild the index"),
    ("index offset 2**63-4", _two_records(), f"0\t0\n1\t{2 ** 63 - 4}\n", "open", r"key 1 has offset "
     r"9223372036854775804, which points past the end of the file \(76 bytes\)"),
    ("insightface header range NaN", framed(pack((2, [float("nan"), 3.0], 0, 0), b"")), None, "insightface",
     r"key 0 \(record at byte 0\): insightface's header says the images are keys 1 .. label\[0\] - 1, but label\[0\] "
     r"is nan for a file of 1 records"),
    ("insightface header range 1e30", framed(pack((2, [1e30, 3.0], 0, 0), b"")), None, "insightface",
     r"but label\[0\] is 1.0000000150474662e\+30 for a file of 1 records"),
    ("label count above the record", framed(struct.pack("<IfQQ", 3, 0.0, 0, 0) + b"\0" * 8), None, "unpack 0",
     r"key 0 \(record at byte 0\): the header counts 3 labels \(12 bytes\) but the record holds 8 bytes"),
    ("shorter than a header", framed(b"\0" * 10), None, "unpack 0", r"key 0 \(record at byte 0\): 10 bytes, fewer "
     r"than the 24-byte image-record header"),
    ("payload not an image", _two_records(), None, "dataset 1", r"key 1 \(record at byte 36\): 6 bytes that Pillow "
     r"cannot decode as an image \(no known image format"),
    ("label width", framed(pack((0, [1.0, 2.0], 0, 0), data.class_payload(1))), None, "width 1", r"key 0 \(record at "
     r"byte 0\): 2 labels \(header flag 2\), expected label_width=1"),
]


class TestBrokenFiles:
    @pytest.mark.parametrize("description, content, index, action, pattern", BROKEN, ids=[b[0] for b in BROKEN])
    def test_typed_error_names_file_and_offset(self, tmp_path, description, content, index, action, pattern):
        """RecordIOError naming the file and the offset (the .idx line for a bad line), in the message and as
        attributes: when opened, or when the record is read."""
        rec = _bytes_of(tmp_path, "broken.rec", content)
        idx = None if index is None else _bytes_of(tmp_path, "broken.idx", index.encode())
        with pytest.raises(RecordIOError) as caught:
            kind, _, arg = action.partition(" ")
            if kind == "open":
                RecordFile(rec, idx)
            elif kind == "record":
                RecordFile(rec, idx).record(int(arg))
            elif kind == "unpack":
                RecordFile(rec, idx).unpacked(int(arg))
            elif kind == "dataset":
                RecordDataset(rec, idx)[int(arg)]
            elif kind == "insightface":
                insightface_dataset(rec, idx)
            else:
                RecordDataset(rec, idx, label_width=int(arg))[0]
        message = str(caught.value)
        assert re.search(pattern, message), f"{description}: {message}"
        named = idx if description in ("index line malformed", "index key repeated", "index offset 10**30 (line)") \
            else rec
        assert repr(named) in message, f"{description}: {message}"
        in_index = description in ("index line malformed", "index key repeated", "index past the end",
                                   "index off a boundary", "index offset 10**30 (line)", "index offset 2**63-4")
        assert caught.value.path == (idx if in_index else rec), description
        assert (caught.value.offset is None) == ("line" in description or "repeated" in description), description

    def test_unknown_key(self, image_set):
        """A key the index lacks: RecordKeyError (a KeyError) naming the key and some keys there are."""
        rec, idx, _ = image_set
        with pytest.raises(KeyError) as caught:
            RecordFile(rec, idx).record(5)
        assert isinstance(caught.value, RecordKeyError)
        assert "no record has key 5 (int); its 13 keys are 100, 107, 101, 108, 102, ..." in str(caught.value)

    def test_missing_files(self, tmp_path):
        """A missing .rec or .idx: RecordIOError naming it."""
        with pytest.raises(RecordIOError, match=r"absent.rec': no such RecordIO \(.rec\) file"):
            RecordFile(tmp_path / "absent.rec")
        rec = _bytes_of(tmp_path, "a.rec", _two_records())
        with pytest.raises(RecordIOError, match=r"absent.idx': no such index \(.idx\) file"):
            RecordFile(rec, tmp_path / "absent.idx")

    def test_error_offsets_are_attributes(self, tmp_path):
        """The error carries the file and the byte offset as attributes too."""
        rec = _bytes_of(tmp_path, "cut.rec", _two_records()[:-3])
        with pytest.raises(RecordIOError) as caught:
            RecordFile(rec)
        assert (caught.value.path, caught.value.offset) == (rec, 36)


class TestConvert:
    def test_class_folders(self, tmp_path):
        """Number labels: <class>/<key>.png folders, zero-padded so sorted order is numeric, payloads as stored."""
        data.write_class_set(str(tmp_path / "c.rec"), str(tmp_path / "c.idx"), 12)
        done = convert_records(tmp_path / "c.rec", tmp_path / "out", idx=tmp_path / "c.idx")
        assert (done.layout, done.records, done.classes, done.not_images) == ("classes", 12, 12, 0)
        assert sorted(os.listdir(tmp_path / "out")) == [f"{i:02d}" for i in range(12)] + ["manifest.json",
                                                                                          "records.jsonl"]
        assert (tmp_path / "out" / "07" / "7.png").read_bytes() == data.class_payload(7)
        lines = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
        assert lines[3] == {"key": 3, "file": "03/3.png", "flag": 0, "label": 3.0, "id": 3, "id2": 0}

    def test_flat_folder_and_tar_shards(self, image_set, tmp_path):
        """Array labels: images/<key>.<ext> with the labels in records.jsonl; tar: shards of <key>.<ext>, .json and
        .cls (for number labels) members."""
        rec, idx, records = image_set
        flat = convert_records(rec, tmp_path / "flat", idx=idx)
        assert (flat.layout, flat.records) == ("flat", 13)
        assert (tmp_path / "flat" / "images" / "103.png").read_bytes() == records[6][2]
        shards = convert_records(rec, tmp_path / "tar", idx=idx, format="tar", per_shard=5)
        assert (shards.layout, shards.shards) == ("shards", 3)
        with tarfile.open(tmp_path / "tar" / "shard-000000.tar") as tar:
            names = tar.getnames()
            first_key = RecordFile(rec, idx).in_file_order()[0]
            meta = json.loads(tar.extractfile(f"{first_key}.json").read())
        assert len(names) == 5 * 2 + 3 and meta == {"flag": 0, "label": 3.0, "id": 100, "id2": 0}  # 3 number labels

    def test_existing_output(self, tmp_path):
        """An earlier export is replaced only with force; a folder of other files never."""
        data.write_class_set(str(tmp_path / "c.rec"), str(tmp_path / "c.idx"), 3)
        convert_records(tmp_path / "c.rec", tmp_path / "out")
        with pytest.raises(OutputExistsError, match=r"out/0' exists; pass --force to replace the folder"):
            convert_records(tmp_path / "c.rec", tmp_path / "out")
        assert convert_records(tmp_path / "c.rec", tmp_path / "out", format="tar", force=True).shards == 1
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "notes.txt").write_text("keep")
        with pytest.raises(OutputExistsError, match=r"holds files `migrate data convert` does not write \(notes.txt\)"):
            convert_records(tmp_path / "c.rec", tmp_path / "mine", force=True)
        assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"

    def test_a_broken_record_leaves_nothing(self, tmp_path):
        """A record that fails half way: the error names its offset; no output folder, no temporary folder left."""
        good = framed(pack((0, 0.0, 0, 0), data.class_payload(0)))
        rec = _bytes_of(tmp_path, "b.rec", good + framed(struct.pack("<IfQQ", 9, 0.0, 1, 0)))
        with pytest.raises(RecordIOError, match=rf"key 1 \(record at byte {len(good)}\): the header counts 9 labels"):
            convert_records(rec, tmp_path / "out")
        assert sorted(os.listdir(tmp_path)) == ["b.rec"]


class TestCommandLine:
    def test_index_and_convert(self, image_set, tmp_path, capsys):
        """``migrate data index`` writes the offsets an .idx holds; ``convert --format tar --json`` reports them."""
        rec, idx, _ = image_set
        assert migrate_main(["data", "index", "--rec", rec, "--out", str(tmp_path / "scan.idx"), "--quiet"]) == 0
        offsets = [line.split("\t")[1] for line in open(idx).read().splitlines()]
        assert [line.split("\t") for line in (tmp_path / "scan.idx").read_text().splitlines()] == [
            [str(i), o] for i, o in enumerate(sorted(offsets, key=int))]
        capsys.readouterr()
        assert migrate_main(["data", "convert", "--rec", rec, "--idx", idx, "--out", str(tmp_path / "t"), "--format",
                             "tar", "--per-shard", "10", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["data"]["shards"] == 2 and report["data"]["records"] == 13 and report["exit_code"] == 0

    def test_errors_exit_2_with_one_line(self, tmp_path, capsys):
        """A broken .rec, or an existing .idx without --force: exit 2, one line naming the file (and offset)."""
        rec = _bytes_of(tmp_path, "cut.rec", _two_records()[:-3])
        assert migrate_main(["data", "convert", "--rec", rec, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert "cut.rec" in err and "record part at byte 36" in err and not (tmp_path / "o").exists()
        (tmp_path / "x.idx").write_text("old")
        assert migrate_main(["data", "index", "--rec", rec, "--out", str(tmp_path / "x.idx")]) == 2
        assert "exists; pass --force" in capsys.readouterr().err and (tmp_path / "x.idx").read_text() == "old"
