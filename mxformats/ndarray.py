"""MXNet's NDArray serialization, read into numpy without MXNet.

The layout (MXNet 1.x ``src/ndarray/ndarray.cc``, little-endian): an array starts with a 4-byte magic: ``0xF993FAC9``
(version 2, what MXNet 1.x writes), ``0xF993FACA`` (version 3, written under numpy shape semantics), ``0xF993FAC8``
(version 1), or, in the legacy format before those, the number of dimensions itself. Then, for versions 2 and 3, the
storage type (int32: 0 dense, 1 row_sparse, 2 csr) and, for a sparse array, its storage shape; the shape (int32 ndim,
then int64 dims; the legacy format has uint32 ndim and uint32 dims); nothing more for an empty ("none") array; the
context (int32 device type, int32 device id); the dtype flag (int32: 0 float32, 1 float64, 2 float16, 3 uint8,
4 int32, 5 int8, 6 int64, 7 bool); then the values, C order.

A pickled NDArray (optimizer states, ``Trainer.save_states``) holds exactly one such array
(``MXNDArraySaveRawBytes``); an ``mx.nd.save`` file (``.params``) holds a list of them: ``uint64 0x112``, a
reserved ``uint64``, the ``uint64`` count and the arrays, then the ``uint64`` count of names and each name
(``uint64`` length + UTF-8 bytes; no names for a saved list).

Example:
    >>> array = decode_ndarray(raw_bytes, "trainer.states")  # doctest: +SKIP
    >>> weights = load_ndarrays("net-0000.params")  # doctest: +SKIP
"""
import io
import os
import struct

import numpy as np

from .errors import MXNetFileError

__all__ = ["DTYPES", "decode_ndarray", "read_ndarray", "load_ndarrays"]

V1_MAGIC, V2_MAGIC, V3_MAGIC = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
LIST_MAGIC = 0x112
#: MXNet's dtype flags (mshadow's type enum) -> numpy dtypes, little-endian.
DTYPES = {0: np.dtype("<f4"), 1: np.dtype("<f8"), 2: np.dtype("<f2"), 3: np.dtype("u1"), 4: np.dtype("<i4"),
          5: np.dtype("i1"), 6: np.dtype("<i8"), 7: np.dtype("?")}
_NAMED_FLAGS = {8: "int16", 9: "uint16", 10: "uint32", 11: "uint64", 12: "bfloat16"}
_STORAGE = {0: "default (dense)", 1: "row_sparse", 2: "csr"}
_MAX_NDIM = 32


class _Stream:
    """A binary stream that knows its offset and its end, and refuses to read past it (naming both)."""

    def __init__(self, handle, source: str, error, size: int):
        self.handle, self.source, self.error, self.size = handle, source, error, size
        self.offset = handle.tell()

    def fail(self, what: str, offset=None):
        return self.error(f"{self.source}: {what} at byte {self.offset if offset is None else offset}; the file is "
                          f"damaged, truncated or not written by MXNet: save it again from MXNet.")

    def read(self, count: int, what: str) -> bytes:
        if count > self.size - self.offset:
            raise self.fail(f"{what} needs {count} bytes but only {max(self.size - self.offset, 0)} are left")
        data = self.handle.read(count)
        if len(data) != count:
            raise self.fail(f"{what} ended after {len(data)} of {count} bytes")
        self.offset += count
        return data

    def unpack(self, fmt: str, what: str):
        values = struct.unpack(fmt, self.read(struct.calcsize(fmt), what))
        return values if len(values) > 1 else values[0]

    def read_into(self, array: np.ndarray, what: str) -> None:
        """Fill ``array`` (C-contiguous) with the next ``array.nbytes`` bytes, without an intermediate copy."""
        if array.nbytes > self.size - self.offset:
            raise self.fail(f"{what} needs {array.nbytes} bytes but only {max(self.size - self.offset, 0)} are left")
        view = memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")
        got = self.handle.readinto(view) if array.nbytes else 0
        if got != array.nbytes:
            raise self.fail(f"{what} ended after {got} of {array.nbytes} bytes")
        self.offset += array.nbytes


def _shape(stream: _Stream, what: str, legacy_ndim=None) -> tuple:
    """A TShape: int32 ndim + int64 dims, or (legacy) the given uint32 ndim + uint32 dims; -1 marks unknown."""
    start = stream.offset
    ndim = legacy_ndim if legacy_ndim is not None else stream.unpack("<i", f"{what} ndim")
    if ndim == -1:
        return None
    if not 0 <= ndim <= _MAX_NDIM:
        raise stream.fail(f"{what} has {ndim} dimensions (expected 0..{_MAX_NDIM})", start)
    dims = stream.unpack(f"<{ndim}{'I' if legacy_ndim is not None else 'q'}", f"{what} dims") if ndim else ()
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if any(d < 0 for d in dims):
        raise stream.fail(f"{what} {dims} has a negative dimension", start)
    return dims


def read_ndarray(stream: _Stream, what: str):
    """The next array of ``stream`` as a numpy array (None for MXNet's empty "none" array).

    Raises:
        stream.error: a sparse array, a dtype numpy cannot hold, or bytes that are not an NDArray (names the offset).
    """
    start = stream.offset
    magic = stream.unpack("<I", f"{what} magic")
    if magic in (V2_MAGIC, V3_MAGIC):
        storage = stream.unpack("<i", f"{what} storage type")
        if storage != 0:
            raise stream.error(f"{stream.source}: {what} (at byte {start}) is a {_STORAGE.get(storage, storage)} "
                               f"sparse array; only dense arrays are read without MXNet: convert it with "
                               f"`.tostype('default')` in MXNet and save it again.")
        shape = _shape(stream, f"{what} shape")
        if shape is None or (magic == V2_MAGIC and shape == ()):
            return None
    else:
        shape = _shape(stream, f"{what} shape") if magic == V1_MAGIC else _legacy_shape(stream, magic, what, start)
        if not shape:
            return None
    stream.unpack("<ii", f"{what} context")
    flag = stream.unpack("<i", f"{what} dtype flag")
    if flag not in DTYPES:
        name = _NAMED_FLAGS.get(flag)
        raise stream.error(f"{stream.source}: {what} (at byte {start}) has dtype "
                           f"{name or f'flag {flag}'}, which " + ("numpy cannot hold; cast it to float32 in MXNet "
                           "and save it again." if name else "MXNet 1.x never writes: the file is damaged."))
    array = np.empty(shape, dtype=DTYPES[flag])
    stream.read_into(array, f"{what} values ({array.size} x {array.dtype.name})")
    return array


def _legacy_shape(stream: _Stream, ndim: int, what: str, start: int):
    """The legacy format's shape (no magic: the first word is ndim), with a check that it is one."""
    if ndim > _MAX_NDIM:
        raise stream.fail(f"{what} starts with 0x{ndim:08X}, which is neither an NDArray magic number nor a "
                          f"dimension count", start)
    return _shape(stream, f"{what} shape", legacy_ndim=ndim)


def decode_ndarray(data, source: str, error=MXNetFileError):
    """One NDArray's bytes (as a pickled NDArray holds them) as a numpy array (None for an empty array).

    Args:
        data: The bytes ``MXNDArraySaveRawBytes`` wrote.
        source: How messages name the file the bytes came from.
        error: The exception class raised for bytes that are not one NDArray.

    Raises:
        error: the bytes are not exactly one dense NDArray (names the source and the byte offset).

    Example:
        >>> decode_ndarray(bytes(state["handle"]), "trainer.states").dtype  # doctest: +SKIP
        dtype('float32')
    """
    view = memoryview(data)
    stream = _Stream(io.BytesIO(view), source, error, view.nbytes)
    array = read_ndarray(stream, "NDArray")
    if stream.offset != view.nbytes:
        raise stream.fail(f"{view.nbytes - stream.offset} bytes follow the NDArray")
    return array


def load_ndarrays(path, error=MXNetFileError):
    """The arrays of an ``mx.nd.save`` file (a ``.params`` file): a dict by name, or a list when saved unnamed.

    Reads one array at a time into its final numpy array (no second copy of the file in memory).

    Args:
        path: The file.
        error: The exception class raised for a file that is not an NDArray list.

    Returns:
        ``{name: numpy array}`` (file order), or a list for a file saved without names. Empty "none" arrays are None.

    Raises:
        error: the file is missing, truncated, corrupt or holds sparse arrays (names the file and the byte offset).

    Example:
        >>> weights = load_ndarrays("resnet-0000.params")  # doctest: +SKIP
        >>> weights["arg:conv0_weight"].shape  # doctest: +SKIP
        (64, 3, 7, 7)
    """
    source = os.fspath(path)
    try:
        handle = open(source, "rb")
    except OSError as exc:
        raise error(f"Cannot read {source!r}: {exc.strerror}; pass a file written by mx.nd.save or "
                    f"Block.save_parameters.") from None
    with handle:
        stream = _Stream(handle, repr(source), error, os.fstat(handle.fileno()).st_size)
        magic, _ = stream.unpack("<QQ", "header")
        if magic != LIST_MAGIC:
            raise stream.fail(f"the header is 0x{magic:X}, not MXNet's NDArray list magic 0x{LIST_MAGIC:X} (not an "
                              f"mx.nd.save file)", 0)
        count = _count(stream, "array count")
        arrays = [read_ndarray(stream, f"array {i}") for i in range(count)]
        names = [_name(stream, i) for i in range(_count(stream, "name count"))]
        if stream.offset != stream.size:
            raise stream.fail(f"{stream.size - stream.offset} bytes follow the names")
    if not names:
        return arrays
    if len(names) != count or len(set(names)) != count:
        raise error(f"{source!r}: {count} arrays but {len(names)} names ({len(set(names))} distinct); the file is "
                    f"damaged: save it again from MXNet.")
    return dict(zip(names, arrays))


def _count(stream: _Stream, what: str) -> int:
    start = stream.offset
    count = stream.unpack("<Q", what)
    if count > stream.size - stream.offset:  # every entry takes at least one byte
        raise stream.fail(f"{what} {count} exceeds the bytes left", start)
    return count


def _name(stream: _Stream, index: int) -> str:
    start = stream.offset
    length = stream.unpack("<Q", f"name {index} length")
    try:
        return stream.read(length, f"name {index}").decode("utf-8")
    except UnicodeDecodeError:
        raise stream.fail(f"name {index} is not UTF-8", start) from None
