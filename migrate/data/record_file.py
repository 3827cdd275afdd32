"""``RecordFile``: a ``.rec`` (with or without its ``.idx``) read as MXNet's ``MXRecordIO``/``MXIndexedRecordIO`` read
it, without MXNet, safe to share with DataLoader workers."""
from __future__ import annotations

import os

import numpy as np

from migrate.data import framing, index
from migrate.data.header import RecordHeader, unpack
from migrate.errors import RecordIOError, RecordKeyError

__all__ = ["RecordFile"]


class RecordFile:
    """Indexed and sequential access to the records of an MXNet RecordIO file.

    With an ``.idx`` (im2rec and ``MXIndexedRecordIO`` write one), the keys are its keys, in its order; without one,
    the file is scanned once and the keys are the record numbers 0..n-1 in file order (``write_index`` saves them
    as an ``.idx``). Every index offset is checked to lie inside the file when it is opened; each record's framing
    is checked when it is read.

    The file is opened lazily by each process that reads (a DataLoader worker opens its own handle) and read with
    positional reads: no file offset is shared between processes or threads. A ``RecordFile`` pickles without its
    handle.

    Args:
        path: The ``.rec`` file.
        idx: Its ``.idx`` file, or None to scan the ``.rec``.
        key_type: What ``.idx`` keys are made into (MXNet's ``key_type``): ``int`` (im2rec's) or ``str``.

    Raises:
        RecordIOError: the ``.rec`` is not RecordIO (no magic at byte 0, or a broken part found by the scan), an
            ``.idx`` line is malformed, or an offset points outside the file or off a 4-byte boundary (names the
            file, the key and the offset), or a file is missing.

    Examples:
        >>> records = RecordFile("train.rec", "train.idx")  # doctest: +SKIP
        >>> header, payload = records.unpacked(records.keys()[0])  # doctest: +SKIP
        >>> header.label, len(records)  # doctest: +SKIP
        (3.0, 1281167)
    """

    def __init__(self, path, idx=None, key_type=int):
        self.path, self.idx_path = os.fspath(path), (os.fspath(idx) if idx is not None else None)
        self._fd, self._pid = None, None
        for what, name in (("RecordIO (.rec)", self.path), ("index (.idx)", self.idx_path)):
            if name is not None and not os.path.isfile(name):
                raise RecordIOError(f"{name!r}: no such {what} file (missing, or not a regular file); give the path "
                                    f"of the file im2rec or MXRecordIO wrote", name)
        self.size = os.path.getsize(self.path)
        if self.idx_path is not None:
            self._keys, self._offsets = index.read_index(self.idx_path, key_type)
            self._check_offsets()
        else:
            self._offsets = framing.record_offsets(self._handle(), self.path, self.size)
            self._keys = list(range(len(self._offsets)))
        self._positions = {key: i for i, key in enumerate(self._keys)}

    def _check_offsets(self) -> None:
        """RecordIOError naming the first key whose offset lies past the end of the file or off a 4-byte boundary."""
        bad = np.flatnonzero((self._offsets > self.size - 8) | (self._offsets % 4 != 0))  # no int64 overflow
        if bad.size:
            key, offset = self._keys[bad[0]], int(self._offsets[bad[0]])
            problem = (f"points past the end of the file ({self.size} bytes)" if offset + 8 > self.size
                       else "is not on a 4-byte boundary, where every record starts")
            raise RecordIOError(f"{self.idx_path!r}: key {key!r} has offset {offset}, which {problem} of "
                                f"{self.path!r} ({bad.size} such keys); is this the .idx of that .rec? rebuild it "
                                f"with `migrate data index`", self.idx_path, offset)

    def _handle(self) -> int:
        """This process's descriptor of the ``.rec`` (opened on first use in each process)."""
        if self._fd is None or self._pid != os.getpid():
            self._fd, self._pid = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0)), os.getpid()
        return self._fd

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> list:
        """The keys, in ``.idx`` order (record numbers 0..n-1 in file order without an ``.idx``)."""
        return list(self._keys)

    def held_keys(self, keys) -> list:
        """``keys`` as a list, each checked to be one of the file's (one pass).

        Raises:
            RecordKeyError: some are not (names how many, and the first five).

        Examples:
            >>> RecordFile("train.rec", "train.idx").held_keys(range(1, 4))  # doctest: +SKIP
            [1, 2, 3]
        """
        wanted = list(keys)
        missing = [key for key in wanted if not _hashable(key) or key not in self._positions]
        if missing:
            shown = ", ".join(repr(k) for k in missing[:5]) + (", ..." if len(missing) > 5 else "")
            raise RecordKeyError(f"{self.path!r}: {len(missing)} of the {len(wanted)} keys asked for are not in "
                                 f"{'its .idx' if self.idx_path else 'the file'} ({shown}; it holds "
                                 f"{len(self._keys)} keys); give keys the index lists (keys(), key_type for string "
                                 f"keys)", self.path)
        return wanted

    def offset(self, key) -> int:
        """The byte offset where the record of ``key`` starts.

        Raises:
            RecordKeyError: no record has this key.
        """
        position = self._positions.get(key)
        if position is None:
            shown = ", ".join(repr(k) for k in self._keys[:5]) + (", ..." if len(self._keys) > 5 else "")
            raise RecordKeyError(f"{self.path!r}: no record has key {key!r} ({type(key).__name__}); its "
                                 f"{len(self._keys)} keys are {shown or 'none'}", self.path)
        return int(self._offsets[position])

    def record(self, key) -> bytes:
        """The record of ``key``: the bytes ``MXIndexedRecordIO.read_idx(key)`` returns.

        Raises:
            RecordKeyError: no record has this key.
            RecordIOError: its framing is broken or the file ends inside it (names the offset).
        """
        return framing.read_record(self._handle(), self.offset(key), self.path)[0]

    def unpacked(self, key) -> tuple[RecordHeader, bytes]:
        """``unpack(self.record(key))``: the header and the payload; errors name the file, key and offset."""
        record = self.record(key)
        try:
            return unpack(record, self.where(key))
        except RecordIOError as exc:
            exc.path, exc.offset = self.path, self.offset(key)
            raise

    def in_file_order(self) -> list:
        """The keys sorted by their records' offsets (the order a sequential reader meets them)."""
        return [self._keys[position] for position in np.argsort(self._offsets, kind="stable")]

    def where(self, key) -> str:
        """How errors name the record of ``key``: the file, the key and the byte offset."""
        return f"{self.path!r} key {key!r} (record at byte {self.offset(key)})"

    def __iter__(self):
        """The records in file order (offset order: as ``MXRecordIO.read`` returns them when every record is
        indexed)."""
        for key in self.in_file_order():
            yield self.record(key)

    def write_index(self, path) -> None:
        """Write the keys and offsets as an ``.idx`` (``MXIndexedRecordIO`` reads it), atomically.

        Examples:
            >>> RecordFile("train.rec").write_index("train.idx")  # doctest: +SKIP
        """
        index.write_index(os.fspath(path), self._keys, self._offsets)

    def close(self) -> None:
        """Close this process's handle (a later read opens it again)."""
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = self._pid = None

    def __enter__(self) -> "RecordFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except (OSError, AttributeError, TypeError):
            pass

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_fd"] = state["_pid"] = None
        return state

    def __repr__(self) -> str:
        return f"RecordFile({self.path!r}, idx={self.idx_path!r}): {len(self)} records"


def _hashable(key) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True
