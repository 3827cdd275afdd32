"""The ``.idx`` file beside a ``.rec``: one ``key<TAB>byte offset`` line per record, as MXNet's
``MXIndexedRecordIO`` writes it (``write_idx``) and reads it (keys through ``key_type``, ``int`` by default).
"""
from __future__ import annotations

import numpy as np

from mxformats import atomic
from migrate.errors import RecordIOError

__all__ = ["read_index", "write_index"]

_OFFSET_LIMIT = 1 << 63  # int64: the offsets are held as int64


def read_index(path: str, key_type=int) -> tuple[list, np.ndarray]:
    """The keys and byte offsets an ``.idx`` file lists, in its order.

    Args:
        path: The ``.idx`` file.
        key_type: What each key is made into (MXNet's ``key_type``): ``int`` (im2rec's) or ``str``.

    Returns:
        (keys, int64 offsets).

    Raises:
        RecordIOError: a line is not ``key<TAB>offset``, a key does not convert, a key repeats, or an offset is
            negative or past 2**63 (names the file and the line).

    Examples:
        >>> keys, offsets = read_index("train.idx")  # doctest: +SKIP
    """
    keys, offsets, lines = [], [], {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            key, offset = _parse_line(path, number, line, key_type)
            if key in lines:
                raise RecordIOError(f"{path!r} line {number}: key {key!r} is listed again (first on line "
                                    f"{lines[key]}); each record has one key: rebuild the index with "
                                    f"`migrate data index`", path)
            lines[key] = number
            keys.append(key)
            offsets.append(offset)
    return keys, np.asarray(offsets, dtype=np.int64)


def _parse_line(path: str, number: int, line: str, key_type) -> tuple:
    """(key, offset) of one ``.idx`` line."""
    fields = line.strip().split("\t")
    try:
        if len(fields) != 2:
            raise ValueError("fields")
        offset = int(fields[1])
        key = key_type(fields[0])
    except ValueError:
        raise RecordIOError(f"{path!r} line {number}: expected 'key<TAB>byte offset' with the key a "
                            f"{getattr(key_type, '__name__', key_type)} and the offset an integer, found "
                            f"{line.strip()[:80]!r}; is it the .idx of MXIndexedRecordIO (pass key_type=str for "
                            f"string keys)?", path) from None
    if not 0 <= offset < _OFFSET_LIMIT:
        problem = "is negative" if offset < 0 else "lies beyond any file (2**63 bytes)"
        raise RecordIOError(f"{path!r} line {number}: offset {str(offset)[:40]} {problem}; rebuild the index with "
                            f"`migrate data index`", path)
    return key, offset


def write_index(path: str, keys, offsets) -> None:
    """Write an ``.idx`` file (``key<TAB>offset`` lines, as ``MXIndexedRecordIO`` writes), atomically.

    Args:
        path: The ``.idx`` file to write.
        keys: One key per record.
        offsets: The byte offset of each record.

    Examples:
        >>> write_index("train.idx", [0, 1], [0, 4108])  # doctest: +SKIP
    """
    text = "".join(f"{key}\t{int(offset)}\n" for key, offset in zip(keys, offsets))
    atomic.write_text(path, text)
