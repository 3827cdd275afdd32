"""MXNet's RecordIO framing (dmlc-core ``recordio.h``), read and written without MXNet.

A ``.rec`` file is a sequence of parts, each starting on a 4-byte boundary (all numbers little-endian)::

    magic (uint32 0xced7230a) | lrecord (uint32) | data (length bytes) | zero padding up to a multiple of 4

``lrecord`` holds the part's ``length`` in its lower 29 bits and ``cflag`` in its upper 3. ``cflag`` 0 is a whole
record. A record whose payload holds the magic at a 4-byte-aligned position is cut there by the writer (MXNet's
``MXRecordIO.write``), the magic itself dropped: ``cflag`` 1, 2, 3 mark its first, middle and last part, and the
reader puts the magic back between the parts. Only the last part is padded (the others end on a boundary). A record
holds less than 2**29 bytes.

Reads use ``os.pread`` (positional: no shared file offset), so one descriptor serves any number of threads.
"""
from __future__ import annotations

import os
import struct
import threading

import numpy as np

from migrate.errors import RecordIOError

__all__ = ["MAGIC", "MAX_LENGTH", "framed", "read_record", "record_offsets"]

MAGIC = 0xCED7230A
MAX_LENGTH = (1 << 29) - 1
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_PART_HEAD = struct.Struct("<II")
_WHOLE, _FIRST, _MIDDLE, _LAST = 0, 1, 2, 3
_SEEK_LOCK = threading.Lock()  # only where os.pread is missing (Windows)


def framed(payload: bytes) -> bytes:
    """The bytes MXNet's ``MXRecordIO.write(payload)`` appends to a ``.rec`` file (dmlc ``WriteRecord``).

    Args:
        payload: One record (what ``mx.recordio.pack`` returns, say).

    Returns:
        The record's parts, cut at every 4-byte-aligned magic, the last one padded to 4 bytes.

    Raises:
        RecordIOError: ``payload`` holds 2**29 bytes or more (RecordIO's limit).

    Examples:
        >>> framed(b"abc").hex()
        '0a23d7ce0300000061626300'
    """
    data = bytes(payload)
    if len(data) > MAX_LENGTH:
        raise RecordIOError(f"a record of {len(data)} bytes: RecordIO holds less than 2**29 bytes per record; split "
                            f"the payload")
    cuts = [i for i in range(0, len(data) - 3, 4) if data[i:i + 4] == _MAGIC_BYTES]
    parts, start = [], 0
    for cut in cuts:
        parts.append(_PART_HEAD.pack(MAGIC, ((_FIRST if start == 0 else _MIDDLE) << 29) | (cut - start)))
        parts.append(data[start:cut])
        start = cut + 4
    parts.append(_PART_HEAD.pack(MAGIC, ((_LAST if cuts else _WHOLE) << 29) | (len(data) - start)))
    parts.append(data[start:])
    parts.append(b"\0" * (-len(data) % 4))
    return b"".join(parts)


def _pread(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes at ``offset`` (fewer only at the end of the file)."""
    if hasattr(os, "pread"):
        chunks = []
        while size > 0:
            chunk = os.pread(fd, size, offset)
            if not chunk:
                break
            chunks.append(chunk)
            size, offset = size - len(chunk), offset + len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    with _SEEK_LOCK:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)


def _part_at(fd: int, offset: int, path: str, first: bool) -> tuple[int, int]:
    """(cflag, length) of the part whose header starts at ``offset``; RecordIOError when it is no valid header."""
    head = _pread(fd, 8, offset)
    if len(head) < 8:
        where = "a record starts" if first else "the next part of a multi-part record starts"
        raise RecordIOError(f"{path!r}: the file ends at byte {offset + len(head)}, inside the 8-byte header where "
                            f"{where} (byte {offset}): the file is truncated", path, offset)
    magic, lrecord = _PART_HEAD.unpack(head)
    if magic != MAGIC:
        raise RecordIOError(f"{path!r}: no RecordIO record at byte {offset}: expected the magic 0x{MAGIC:08x}, found "
                            f"0x{magic:08x}; the file is not MXNet RecordIO, is corrupt there, or an index (.idx) "
                            f"offset is wrong", path, offset)
    cflag, length = lrecord >> 29, lrecord & MAX_LENGTH
    allowed = (_WHOLE, _FIRST) if first else (_MIDDLE, _LAST)
    if cflag not in allowed:
        expected = "0 (whole record) or 1 (first part)" if first else "2 (middle part) or 3 (last part)"
        raise RecordIOError(f"{path!r}: the part at byte {offset} has cflag {cflag}, expected {expected}; the file "
                            f"is corrupt there, or an index (.idx) offset points into a record", path, offset)
    return cflag, length


def read_record(fd: int, offset: int, path: str) -> tuple[bytes, int]:
    """The record that starts at ``offset`` and the offset just after it (dmlc ``RecordIOReader::NextRecord``).

    Args:
        fd: A descriptor open for reading (positional reads: its offset is not used).
        offset: Where the record's first part starts.
        path: The file's name, for errors.

    Returns:
        (the record's payload, its parts joined with the magic put back; the offset of the next record).

    Raises:
        RecordIOError: no magic or a wrong cflag at a part's start, or the file ends inside the record (names the
            file and the byte offset).

    Examples:
        >>> fd = os.open("train.rec", os.O_RDONLY)  # doctest: +SKIP
        >>> payload, next_offset = read_record(fd, 0, "train.rec")  # doctest: +SKIP
    """
    pieces, position, first = [], offset, True
    while True:
        cflag, length = _part_at(fd, position, path, first)
        padded = (length + 3) & ~3
        data = _pread(fd, padded, position + 8)
        if len(data) < padded:
            raise RecordIOError(f"{path!r}: the record part at byte {position} holds {length} bytes (padded to "
                                f"{padded}) but the file ends at byte {position + 8 + len(data)}: the file is "
                                f"truncated", path, position)
        pieces.append(data[:length] if padded != length else data)
        position += 8 + padded
        if cflag in (_WHOLE, _LAST):
            return (pieces[0] if len(pieces) == 1 else b"".join(pieces)), position
        pieces.append(_MAGIC_BYTES)
        first = False


def record_offsets(fd: int, path: str, size: int) -> np.ndarray:
    """The byte offset of every record in the file, in file order, found by one scan of the part headers.

    Args:
        fd: A descriptor open for reading.
        path: The file's name, for errors.
        size: The file's size in bytes.

    Returns:
        int64 offsets, one per record (multi-part records once).

    Raises:
        RecordIOError: a part header is missing, has no magic or a cflag out of sequence, or a part runs past the
            end of the file (names the file and the byte offset).

    Examples:
        >>> fd = os.open("train.rec", os.O_RDONLY)  # doctest: +SKIP
        >>> record_offsets(fd, "train.rec", os.path.getsize("train.rec"))  # doctest: +SKIP
        array([   0, 4108, 8192])
    """
    offsets, position, first = [], 0, True
    while position < size or not first:
        cflag, length = _part_at(fd, position, path, first)
        if first:
            offsets.append(position)
        end = position + 8 + ((length + 3) & ~3)
        if end > size:
            raise RecordIOError(f"{path!r}: the record part at byte {position} holds {length} bytes but the file "
                                f"ends at byte {size}: the file is truncated", path, position)
        position, first = end, cflag in (_WHOLE, _LAST)
    return np.asarray(offsets, dtype=np.int64)
