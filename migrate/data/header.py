"""The image-record header MXNet puts before each payload (``mx.recordio.IRHeader``; ``ImageRecordIO::Header``).

A record is ``flag`` (uint32), ``label`` (float32), ``id`` (uint64), ``id2`` (uint64), 24 bytes, little-endian; then,
when ``flag`` > 0, ``flag`` float32 labels (the header's own ``label`` is then unused, written 0); then the payload
(an encoded image, for im2rec's records). ``mx.recordio.pack`` writes a number label with ``flag`` 0 and an array
label with ``flag`` = its size: im2rec's multi-labels (``--pack-label``) and detection labels (GluonCV's
``[header width, object width, extra..., objects...]``) are arrays.
"""
from __future__ import annotations

import numbers
import struct
from typing import NamedTuple, Union

import numpy as np

from migrate.errors import RecordIOError

__all__ = ["HEADER_SIZE", "RecordHeader", "pack", "unpack"]

_HEADER = struct.Struct("<IfQQ")
HEADER_SIZE = _HEADER.size  # 24


class RecordHeader(NamedTuple):
    """One record's header, field for field as ``mx.recordio.IRHeader`` (``tuple(header)`` compares with it).

    Attributes:
        flag: 0 for a number label; else the count of float32 labels.
        label: A float (``flag`` 0) or a float32 array of ``flag`` labels.
        id: The record's id (im2rec: the image's index in the .lst file).
        id2: The id's upper 64 bits (0 in practice).
    """

    flag: int
    label: Union[float, np.ndarray]
    id: int
    id2: int


def unpack(record: bytes, where: str = "the record") -> tuple[RecordHeader, bytes]:
    """Split a record into its header and payload, as ``mx.recordio.unpack`` does.

    Args:
        record: One record (``RecordFile.record(key)``).
        where: How errors name the record (``RecordFile`` passes the file, key and byte offset).

    Returns:
        (header, payload): ``header.label`` a float when ``header.flag`` is 0, else a float32 array of ``flag``
        values (a copy, writable).

    Raises:
        RecordIOError: the record is shorter than the 24-byte header, or than the ``flag`` labels its header counts.

    Examples:
        >>> header, payload = unpack(pack(RecordHeader(0, [1, 2], 7, 0), b"jpeg"))
        >>> header.flag, header.label.tolist(), header.id, payload
        (2, [1.0, 2.0], 7, b'jpeg')
    """
    if len(record) < HEADER_SIZE:
        raise RecordIOError(f"{where}: {len(record)} bytes, fewer than the {HEADER_SIZE}-byte image-record header "
                            f"(flag, label, id, id2); was it written by mx.recordio.pack?")
    flag, label, id_, id2 = _HEADER.unpack_from(record)
    if flag == 0:
        return RecordHeader(flag, label, id_, id2), bytes(record[HEADER_SIZE:])
    end = HEADER_SIZE + 4 * flag
    if len(record) < end:
        raise RecordIOError(f"{where}: the header counts {flag} labels ({4 * flag} bytes) but the record holds "
                            f"{len(record) - HEADER_SIZE} bytes after the header; the label count disagrees with the "
                            f"record (corrupt, or not written by mx.recordio.pack)")
    labels = np.frombuffer(record, dtype="<f4", count=flag, offset=HEADER_SIZE).astype(np.float32)
    return RecordHeader(flag, labels, id_, id2), bytes(record[end:])


def pack(header, payload: bytes) -> bytes:
    """A record from a header and a payload, byte for byte as ``mx.recordio.pack`` makes it.

    Args:
        header: ``(flag, label, id, id2)``; a number label is written with flag 0, an array label with flag = its
            size (the given flag is ignored, as MXNet ignores it).
        payload: The encoded image (or any bytes).

    Returns:
        The record's bytes.

    Examples:
        >>> len(pack((0, 3.0, 1, 0), b"png!"))
        28
    """
    _, label, id_, id2 = header
    if isinstance(label, numbers.Number):
        return _HEADER.pack(0, float(label), int(id_), int(id2)) + bytes(payload)
    labels = np.asarray(label, dtype="<f4")
    return _HEADER.pack(labels.size, 0.0, int(id_), int(id2)) + labels.tobytes() + bytes(payload)
