"""Image payloads and record sets for the RecordIO tests, made without MXNet (Pillow and numpy): the MXNet side
(``tests/migrate/_mx_recordio.py``) packs the same payloads with ``mx.recordio``, as im2rec ``--pass-through`` packs
image files as they are."""
import io
import struct

import numpy as np
from PIL import Image

from migrate.data import framed, pack

MAGIC_BYTES = struct.pack("<I", 0xCED7230A)


def _picture(height: int, width: int, seed: int) -> np.ndarray:
    """A smooth RGB picture with some noise (JPEG-like content), uint8."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * 3 + seed) % 256, (y * 5) % 256, ((x + y) * 2 + 40 * seed) % 256], axis=-1)
    return np.clip(base + rng.randint(-25, 26, base.shape), 0, 255).astype(np.uint8)


def _encoded(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def _with_comment(jpeg: bytes, comment: bytes) -> bytes:
    """The JPEG with a COM segment right after its SOI marker (decoders skip it)."""
    return jpeg[:2] + b"\xff\xfe" + struct.pack(">H", len(comment) + 2) + comment + jpeg[2:]


def image_payloads() -> dict:
    """name -> encoded image: the JPEG and PNG kinds an image set holds (odd sizes, chroma subsamplings,
    progressive, grayscale, CMYK, RGBA, palette, 16-bit) and BMP."""
    rgb = Image.fromarray(_picture(37, 53, 1))
    payloads = {
        "jpeg_420": _encoded(rgb, "JPEG", quality=90, subsampling=2),
        "jpeg_422": _encoded(Image.fromarray(_picture(40, 31, 2)), "JPEG", quality=75, subsampling=1),
        "jpeg_444": _encoded(Image.fromarray(_picture(16, 16, 3)), "JPEG", quality=95, subsampling=0),
        "jpeg_progressive": _encoded(rgb, "JPEG", quality=85, progressive=True),
        "jpeg_gray": _encoded(rgb.convert("L"), "JPEG", quality=90),
        "jpeg_cmyk": _encoded(rgb.convert("CMYK"), "JPEG", quality=90),
        "png_rgb": _encoded(rgb, "PNG"),
        "png_rgba": _encoded(Image.fromarray(np.dstack([_picture(21, 19, 4), _picture(21, 19, 5)[..., :1]])), "PNG"),
        "png_gray": _encoded(rgb.convert("L"), "PNG"),
        "png_palette": _encoded(rgb.convert("P"), "PNG"),
        "png_gray16": _encoded(Image.fromarray((_picture(12, 14, 6)[..., 0].astype(np.uint16) * 257 + 129)), "PNG"),
        "bmp": _encoded(Image.fromarray(_picture(9, 11, 7)), "BMP"),
    }
    # the magic at every alignment inside the JPEG: the record is cut into parts where it falls on a 4-byte boundary
    payloads["jpeg_with_magic"] = _with_comment(payloads["jpeg_444"], (MAGIC_BYTES + b"!") * 4 + MAGIC_BYTES * 2)
    return payloads


def image_records() -> list:
    """(key, (flag, label, id, id2), payload) per image record, keys in im2rec's shuffled .lst order: number labels,
    im2rec ``--pack-label`` multi-labels, GluonCV detection labels (``[header width 4, object width 5, image width,
    image height, objects...]``), and ids at the 64-bit limits."""
    payloads = image_payloads()
    labels = [3.0, 0.0, [1.0, 0.0, 1.0], [4.0, 5.0, 53.0, 37.0, 1.0, 0.1, 0.2, 0.5, 0.6, 0.0, 0.3, 0.3, 0.9, 0.8],
              7.0, [2.5, -1.0], 12.0, 1.0, [0.0], 2.0, 5.0, 6.0, 4.0]
    records = []
    for number, (name, payload) in enumerate(payloads.items()):
        key = (number * 7) % len(payloads) + 100
        ids = (2 ** 64 - 1, 2 ** 40 + 3) if name == "png_rgb" else (key, 0)
        records.append((key, (0, labels[number], *ids), payload))
    return records


def raw_payloads() -> list:
    """Framing edge cases: empty, 1 to 4 bytes, the magic at the start, the end, twice in a row, unaligned only."""
    return [b"", b"a", b"ab", b"abc", b"abcd", MAGIC_BYTES, MAGIC_BYTES + b"tail", b"head" + MAGIC_BYTES,
            MAGIC_BYTES * 3, b"x" + MAGIC_BYTES + b"yyy", b"1234" + MAGIC_BYTES + b"5678" + MAGIC_BYTES + b"9",
            bytes(range(256)) * 3]


def class_payload(index: int, size: int = 8) -> bytes:
    """A PNG whose pixel (0, 0) holds ``index`` in its red channel (lossless: read back exactly)."""
    picture = _picture(size, size + 2, index)
    picture[0, 0, 0] = index
    return _encoded(Image.fromarray(picture), "PNG")


def write_class_set(rec_path: str, idx_path: str, count: int) -> list:
    """``count`` PNG records with label = key = index (as ``mx.recordio.pack`` + ``MXIndexedRecordIO`` write them);
    returns the keys."""
    write_records(rec_path, idx_path, [(i, (0, float(i), i, 0), class_payload(i)) for i in range(count)])
    return list(range(count))


def write_records(rec_path: str, idx_path, records) -> None:
    """Write (key, header, payload) records as MXIndexedRecordIO does (``idx_path`` None: as MXRecordIO does)."""
    blobs, lines, offset = [], [], 0
    for key, header, payload in records:
        blob = framed(pack(header, payload))
        blobs.append(blob)
        lines.append(f"{key}\t{offset}\n")
        offset += len(blob)
    with open(rec_path, "wb") as handle:
        handle.write(b"".join(blobs))
    if idx_path is not None:
        with open(idx_path, "w") as handle:
            handle.write("".join(lines))


def insightface_records() -> list:
    """(key, (flag, label, id, id2), payload) of a set in insightface's layout (its face2rec / MS1M files): record 0
    the header (flag 2, label [first identity key, end]), images 1..7 of identities 0, 0, 1, 1, 1, 2, 2 (number labels
    and, as older packs wrote them, [identity, 0] arrays; PNG and JPEG), then one record per identity whose label is
    the [first, end) range of its image keys, no payload."""
    payloads = image_payloads()
    identities = [0, 0, 1, 1, 1, 2, 2]
    images = [class_payload(1), payloads["jpeg_420"], class_payload(3), payloads["jpeg_444"], class_payload(5),
              payloads["png_rgb"], payloads["jpeg_progressive"]]
    records = [(0, (2, [8.0, 11.0], 0, 0), b"")]
    for key, (identity, payload) in enumerate(zip(identities, images), start=1):
        label = float(identity) if key % 2 else [float(identity), 0.0]
        records.append((key, (0, label, key, 0), payload))
    for identity, (first, end) in enumerate([(1, 3), (3, 6), (6, 8)]):
        records.append((8 + identity, (2, [float(first), float(end)], 8 + identity, 0), b""))
    return records
