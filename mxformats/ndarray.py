"""MXNet's NDArray serialization, read into numpy without MXNet.

The layout (MXNet 1.x ``src/ndarray/ndarray.cc``, ``NDArray::Load``/``LegacyLoad``, little-endian): an array starts
with a 4-byte magic: ``0xF993FAC9`` (version 2, what MXNet 1.x writes), ``0xF993FACA`` (version 3, written under
numpy shape semantics, ``mx.util.np_shape(True)``), ``0xF993FAC8`` (version 1), or, in the legacy format before
those, the number of dimensions itself. Then, for versions 2 and 3, the storage type (int32: 0 dense, 1 row_sparse,
2 csr) and, for a sparse array, its storage shape; the shape (int32 ndim, then int64 dims; the legacy format has the
uint32 dims after its uint32 ndim); nothing more for a version-2 ndim-0 array (MXNet's empty "none" array); the
context (int32 device type, int32 device id); the dtype flag (int32: 0 float32, 1 float64, 2 float16, 3 uint8,
4 int32, 5 int8, 6 int64, 7 bool, 12 bfloat16); for a sparse array, each auxiliary array's dtype flag and shape; then
the values, C order (and a sparse array's auxiliary arrays). A 0-d array (ndim 0) is a scalar in versions 3, 1 and
legacy.

A pickled NDArray (optimizer states, ``Trainer.save_states``) holds exactly one such array
(``MXNDArraySaveRawBytes``); an ``mx.nd.save`` file (``.params``) holds a list of them: ``uint64 0x112``, a
reserved ``uint64``, the ``uint64`` count and the arrays, then the ``uint64`` count of names and each name
(``uint64`` length + UTF-8 bytes; no names for a saved list).

Where MXNet's own loader is more lenient, this reader refuses: bytes after the last name, two arrays of the same
name (``mx.nd.load`` keeps the last), a shape with an unknown (-1) dimension count. Every refusal is an
``MXNetFileError`` naming the file and the byte offset; every size is checked against the bytes left before anything
is allocated, so a damaged dimension never makes numpy allocate more than the file holds.

Examples:
    >>> array = decode_ndarray(raw_bytes, "trainer.states")  # doctest: +SKIP
    >>> weights = load_ndarrays("net-0000.params")  # doctest: +SKIP
    >>> params = index_ndarrays("net-0000.params")  # doctest: +SKIP
    >>> params.info("arg:conv0_weight").shape, params["arg:conv0_weight"].dtype  # one array read  # doctest: +SKIP
    ((64, 3, 7, 7), dtype('float32'))
"""
import collections
import io
import math
import os
import struct
import threading
from collections.abc import Mapping
from typing import NamedTuple, Optional

import numpy as np

from .errors import MXNetFileError
from .reading import special_kind

try:  # numpy's switch of its huge-page advice (numpy 2 moved it; private, so optional)
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage
    except ImportError:
        _set_madvise_hugepage = None

__all__ = ["DTYPES", "V1_MAGIC", "V2_MAGIC", "V3_MAGIC", "LIST_MAGIC", "NDArrayInfo", "NDArrayFile",
           "decode_ndarray", "ndarray_info", "read_ndarray", "index_ndarrays", "load_ndarrays"]

V1_MAGIC, V2_MAGIC, V3_MAGIC = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
LIST_MAGIC = 0x112
#: MXNet's dtype flags (mshadow's type enum) -> numpy dtypes, little-endian; bfloat16 as MXNet's own Python API
#: gives it (``mx.nd.load(...).dtype``: a structured dtype over uint16).
DTYPES = {0: np.dtype("<f4"), 1: np.dtype("<f8"), 2: np.dtype("<f2"), 3: np.dtype("u1"), 4: np.dtype("<i4"),
          5: np.dtype("i1"), 6: np.dtype("<i8"), 7: np.dtype("?"), 12: np.dtype([("bfloat16", "<u2")])}
#: Flags mshadow knows but MXNet 1.9.1's loader refuses ("Unknown type enum"), with their item sizes.
_REFUSED_FLAGS = {8: ("int16", 2), 9: ("uint16", 2), 10: ("uint32", 4), 11: ("uint64", 8)}
_STORAGE = {0: "default", 1: "row_sparse", 2: "csr"}
_AUX_ARRAYS = {"row_sparse": 1, "csr": 2}  # indices; indptr and indices
_MAX_NDIM = 32
_SMALLEST_ARRAY = 12  # bytes: magic, storage type, ndim 0 (a version-2 "none" array)
_SMALLEST_NAME = 8  # bytes: its length
_LONGEST_HEADER = 4 + 4 + 2 * (4 + 8 * _MAX_NDIM) + 8 + 4 + max(_AUX_ARRAYS.values()) * (4 + 4 + 8 * _MAX_NDIM)
_LARGEST_ARRAY = 1 << 63  # bytes: numpy's sizes (and MXNet's, int64) stay below
_HUGE_PAGE_ADVICE_FROM = 1 << 22  # numpy advises huge pages for arrays of 4 MiB and more
_ADVICE_LOCK = threading.Lock()


class NDArrayInfo(NamedTuple):
    """One array of an NDArray file, as its header describes it.

    Attributes:
        start: Byte offset of the array's header (its magic).
        offset: Byte offset of its values.
        shape: Its shape (``()`` for a 0-d array); None for MXNet's empty "none" array.
        dtype: Its numpy dtype; None for a "none" array or a sparse one.
        storage: ``"default"`` (dense), ``"row_sparse"`` or ``"csr"``.
        nbytes: Bytes of values after ``offset`` (a sparse array's auxiliary arrays included).
    """

    start: int
    offset: int
    shape: Optional[tuple]
    dtype: Optional[np.dtype]
    storage: str
    nbytes: int


class _Stream:
    """A binary stream that knows its offset and its end, and refuses to read past it (naming both)."""

    def __init__(self, handle, source: str, error, size: int):
        self.handle, self.source, self.error, self.size = handle, source, error, size
        self.offset = handle.tell()

    @property
    def left(self) -> int:
        return max(self.size - self.offset, 0)

    def fail(self, what: str, offset=None):
        return self.error(f"{self.source}: {what} at byte {self.offset if offset is None else offset}; the file is "
                          f"damaged, truncated or not written by MXNet: save it again from MXNet.")

    def need(self, count: int, what: str) -> None:
        if count > self.left:
            raise self.fail(f"{what} needs {count} bytes but only {self.left} are left")

    def read(self, count: int, what: str) -> bytes:
        self.need(count, what)
        data = self.handle.read(count)
        if len(data) != count:
            raise self.fail(f"{what} ended after {len(data)} of {count} bytes")
        self.offset += count
        return data

    def unpack(self, fmt: str, what: str):
        values = struct.unpack(fmt, self.read(struct.calcsize(fmt), what))
        return values if len(values) > 1 else values[0]

    def skip(self, count: int, what: str) -> None:
        self.need(count, what)
        self.offset = self.handle.seek(self.offset + count)

    def read_into(self, array: np.ndarray, what: str) -> None:
        """Fill ``array`` (C-contiguous) with the next ``array.nbytes`` bytes, without an intermediate copy."""
        self.need(array.nbytes, what)
        view = memoryview(array.reshape(-1).view(np.uint8)) if array.nbytes else memoryview(b"")
        got = 0
        while got < array.nbytes:  # one read() returns at most ~2 GiB on Linux
            count = self.handle.readinto(view[got:])
            if not count:
                raise self.fail(f"{what} ended after {got} of {array.nbytes} bytes")
            got += count
        self.offset += array.nbytes


def _empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """``np.empty`` for values about to be read from a file, without numpy's huge-page advice (``madvise``): where the
    kernel defragments memory for such advice (transparent huge pages, ``defrag`` = ``madvise``, a common default),
    faulting in the pages stalls on a busy machine: reading 2.5 GiB took 7.2 s with the advice (median of 5 runs;
    0.8 s at best, when huge pages were at hand) against 1.8 s without it and 2.0 s for ``mx.nd.load``
    (``bench/bench_params_read.py``). The advice is off only while the array is allocated."""
    if _set_madvise_hugepage is None or math.prod(shape) * dtype.itemsize < _HUGE_PAGE_ADVICE_FROM:
        return np.empty(shape, dtype=dtype)
    with _ADVICE_LOCK:
        advised = _set_madvise_hugepage(False)
        try:
            return np.empty(shape, dtype=dtype)
        finally:
            _set_madvise_hugepage(advised)


def _shape(stream: _Stream, what: str, legacy_ndim=None) -> tuple:
    """A TShape: int32 ndim + int64 dims, or (legacy) the given uint32 ndim + uint32 dims."""
    start = stream.offset
    ndim = legacy_ndim if legacy_ndim is not None else stream.unpack("<i", f"{what} ndim")
    if not 0 <= ndim <= _MAX_NDIM:
        raise stream.fail(f"{what} has {ndim} dimensions (expected 0..{_MAX_NDIM}; MXNet cannot load -1, an "
                          f"unknown shape)", start)
    dims = stream.unpack(f"<{ndim}{'I' if legacy_ndim is not None else 'q'}", f"{what} dims") if ndim else ()
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if any(d < 0 for d in dims):
        raise stream.fail(f"{what} {dims} has a negative dimension", start)
    return dims


def _check_extent(stream: _Stream, what: str, shape: tuple, itemsize: int, start: int) -> None:
    """Refuse a shape whose nonzero dimensions together pass 2**63 bytes: numpy refuses to make such an array even
    when a zero dimension leaves it empty ("array is too big"), and MXNet never wrote one."""
    if math.prod(d for d in shape if d) * itemsize >= _LARGEST_ARRAY:
        raise stream.fail(f"{what} has shape {shape} of {itemsize}-byte items: its dimensions multiply past 2**63 "
                          f"bytes, more than any array holds", start)


def _dtype(stream: _Stream, what: str):
    """The numpy dtype of the next dtype flag; refuses the flags MXNet 1.x cannot load."""
    flag = stream.unpack("<i", f"{what} dtype flag")
    if flag in DTYPES:
        return DTYPES[flag]
    if flag in _REFUSED_FLAGS:
        raise stream.error(f"{stream.source}: {what} has dtype {_REFUSED_FLAGS[flag][0]} (flag {flag}) at byte "
                           f"{stream.offset - 4}, which MXNet 1.x's own mx.nd.load refuses too; cast it to a "
                           f"supported dtype (float32, int32, ...) where it was written and save it again.")
    raise stream.fail(f"{what} has dtype flag {flag}, which MXNet 1.x never writes", stream.offset - 4)


def _item_size(stream: _Stream, what: str) -> int:
    """The item size of the next dtype flag, for skipping a sparse array's values (any flag mshadow knows)."""
    start = stream.offset
    flag = stream.unpack("<i", f"{what} dtype flag")
    if flag in DTYPES:
        return DTYPES[flag].itemsize
    if flag in _REFUSED_FLAGS:
        return _REFUSED_FLAGS[flag][1]
    raise stream.fail(f"{what} has dtype flag {flag}, which MXNet 1.x never writes", start)


def _header(stream: _Stream, what: str, skip_sparse: bool = False) -> NDArrayInfo:
    """The next array's header, leaving ``stream`` at its values; their size is checked against the bytes left.
    A sparse array is refused at once, or (``skip_sparse``) described so that a list can be read past it."""
    start = stream.offset
    magic = stream.unpack("<I", f"{what} magic")
    if magic in (V2_MAGIC, V3_MAGIC):
        code = stream.unpack("<i", f"{what} storage type")
        if code not in _STORAGE:
            raise stream.fail(f"{what} has storage type {code} (MXNet writes 0 dense, 1 row_sparse, 2 csr)", start + 4)
        if code != 0 and not skip_sparse:
            raise _sparse_error(stream, [_sparse_label(what, _STORAGE[code], start)])
        if code != 0:
            return _sparse_header(stream, what, start, _STORAGE[code])
        shape = _shape(stream, f"{what} shape")
        if magic == V2_MAGIC and shape == ():
            return NDArrayInfo(start, stream.offset, None, None, "default", 0)
    elif magic == V1_MAGIC:
        shape = _shape(stream, f"{what} shape")
    elif magic <= _MAX_NDIM:
        shape = _shape(stream, f"{what} shape", legacy_ndim=magic)
    else:
        raise stream.fail(f"{what} starts with 0x{magic:08X}, which is neither an NDArray magic number nor a "
                          f"dimension count", start)
    stream.unpack("<ii", f"{what} context")
    dtype = _dtype(stream, what)
    _check_extent(stream, what, shape, dtype.itemsize, start)
    info = NDArrayInfo(start, stream.offset, shape, dtype, "default", math.prod(shape) * dtype.itemsize)
    stream.need(info.nbytes, f"{what} values ({math.prod(shape)} x {dtype.name})")
    return info


def _sparse_header(stream: _Stream, what: str, start: int, storage: str) -> NDArrayInfo:
    """A sparse array's header (storage shape, shape, context, dtype, auxiliary dtypes and shapes), with the size of
    all its values, so that a list can be read past it. As MXNet's loader (``Chunk::CheckAndAlloc``), the values'
    size follows from the auxiliary shapes (the storage shape can be stale: MXNet writes it before the array is
    computed)."""
    _shape(stream, f"{what} storage shape")
    shape = _shape(stream, f"{what} shape")
    stream.unpack("<ii", f"{what} context")
    item, aux = _item_size(stream, what), []
    _check_extent(stream, what, shape, item, start)
    for i in range(_AUX_ARRAYS[storage]):
        size = _item_size(stream, f"{what} auxiliary array {i}")
        aux.append((size, _shape(stream, f"{what} auxiliary array {i} shape")))
        _check_extent(stream, f"{what} auxiliary array {i}", aux[-1][1], size, start)
    if any(len(dims) != 1 for _, dims in aux) or (storage == "row_sparse" and not shape):
        raise stream.fail(f"{what}: a {storage} array of shape {shape} with auxiliary shapes {[d for _, d in aux]}",
                          start)
    values = aux[0][1][0] * math.prod(shape[1:]) if storage == "row_sparse" else aux[1][1][0]
    nbytes = values * item + sum(size * dims[0] for size, dims in aux)
    stream.need(nbytes, f"{what} {storage} values")
    return NDArrayInfo(start, stream.offset, shape, None, storage, nbytes)


def _sparse_label(what: str, storage: str, start: int) -> str:
    return f"{what} (a {storage} sparse array at byte {start})"


def _sparse_error(stream: _Stream, labels: list):
    return stream.error(f"{stream.source}: {', '.join(labels)}: only dense arrays are read without MXNet; convert "
                        f"{'it' if len(labels) == 1 else 'them'} with `.tostype('default')` in MXNet and save again.")


def read_ndarray(stream: _Stream, what: str):
    """The next array of ``stream`` as a numpy array (None for MXNet's empty "none" array).

    Raises:
        stream.error: a sparse array, a dtype MXNet cannot load, or bytes that are not an NDArray (names the offset).
    """
    info = _header(stream, what)
    if info.shape is None:
        return None
    array = _empty(info.shape, info.dtype)
    stream.read_into(array, f"{what} values ({array.size} x {array.dtype.name})")
    return array


def decode_ndarray(data, source: str, error=MXNetFileError):
    """One NDArray's bytes (as a pickled NDArray holds them) as a numpy array (None for an empty array).

    Args:
        data: The bytes ``MXNDArraySaveRawBytes`` wrote.
        source: How messages name the file the bytes came from.
        error: The exception class raised for bytes that are not one NDArray.

    Raises:
        error: the bytes are not exactly one dense NDArray (names the source and the byte offset).

    Examples:
        >>> decode_ndarray(bytes(state["handle"]), "trainer.states").dtype  # doctest: +SKIP
        dtype('float32')
    """
    view = memoryview(data)
    stream = _Stream(io.BytesIO(view), source, error, view.nbytes)
    array = read_ndarray(stream, "NDArray")
    if stream.offset != view.nbytes:
        raise stream.fail(f"{view.nbytes - stream.offset} bytes follow the NDArray")
    return array


def ndarray_info(data, source: str, error=MXNetFileError) -> NDArrayInfo:
    """The header of one NDArray's bytes (as a pickled NDArray holds them), checked to announce exactly the bytes that
    follow it; no value is read or allocated. Dense and sparse arrays alike (MXNet reads both).

    Args:
        data: The bytes ``MXNDArraySaveRawBytes`` wrote.
        source: How messages name the file the bytes came from.
        error: The exception class raised for bytes that are not one NDArray.

    Raises:
        error: the header is damaged, or announces more or fewer bytes than follow (names the source and the offset).

    Examples:
        >>> ndarray_info(bytes(state["handle"]), "trainer.states").shape  # doctest: +SKIP
        (64, 3, 7, 7)
    """
    view = memoryview(data)
    head = bytes(view[:_LONGEST_HEADER])  # every header field lies within it; the size checks use the whole length
    stream = _Stream(io.BytesIO(head), source, error, view.nbytes)
    info = _header(stream, "NDArray", skip_sparse=True)
    if info.offset + info.nbytes != view.nbytes:
        raise stream.fail(f"{view.nbytes - info.offset - info.nbytes} bytes follow the NDArray",
                          info.offset + info.nbytes)
    return info


class NDArrayFile(Mapping):
    """An ``mx.nd.save`` file (a ``.params`` file), indexed: each array read from the file when asked for.

    A Mapping in file order: name -> numpy array for a file saved with names, index -> numpy array for a saved list.
    ``file[key]`` reads that one array (a new numpy array each time); ``info(key)`` tells its shape, dtype and
    offset without reading it. MXNet's empty "none" arrays read as None.

    Examples:
        >>> params = index_ndarrays("net-0000.params")  # doctest: +SKIP
        >>> for name in params: weight = params[name]  # one array in memory at a time  # doctest: +SKIP
    """

    def __init__(self, path: str, infos: list, names: Optional[list], size: int, error=MXNetFileError):
        self.path, self.size, self._error = path, size, error
        self.named = names is not None
        self._infos = dict(zip(names, infos)) if self.named else dict(enumerate(infos))

    def __len__(self):
        return len(self._infos)

    def __iter__(self):
        return iter(self._infos)

    def __contains__(self, key):
        return key in self._infos

    def info(self, key) -> NDArrayInfo:
        """Where ``key``'s array lies and what it holds (shape, dtype), from the index; nothing is read."""
        return self._infos[key]

    def __getitem__(self, key):
        return self.read([key])[key]

    def read(self, keys=None) -> dict:
        """``{key: numpy array}`` for ``keys`` (all, in file order, when None), read through one open file.

        Raises:
            error: the file changed or shrank since it was indexed (names the file and the offset).
        """
        wanted = list(self._infos) if keys is None else list(keys)
        infos = [self._infos[key] for key in wanted]  # KeyError for a key the file does not hold
        with _open(self.path, self._error) as handle:
            stream = _Stream(handle, repr(self.path), self._error, os.fstat(handle.fileno()).st_size)
            if stream.size != self.size:
                raise self._error(f"{self.path!r} is {stream.size} bytes now, {self.size} when it was indexed; "
                                  f"it changed while being read: index it again.")
            return {key: _read_values(stream, info, key) for key, info in zip(wanted, infos)}

    def __repr__(self):
        return f"NDArrayFile({self.path!r}, {len(self)} {'named ' if self.named else ''}arrays)"


def _read_values(stream: _Stream, info: NDArrayInfo, key):
    if info.shape is None:
        return None
    if stream.offset != info.offset:
        stream.offset = stream.handle.seek(info.offset)
    array = _empty(info.shape, info.dtype)
    stream.read_into(array, f"array {key!r} values ({array.size} x {array.dtype.name})")
    return array


def _open(path: str, error):
    kind = special_kind(path)
    if kind is not None:
        raise error(f"Cannot read {path!r}: it is {kind}, not a regular file; pass a file written by mx.nd.save or "
                    f"Block.save_parameters.")
    try:
        return open(path, "rb")
    except OSError as exc:
        raise error(f"Cannot read {path!r}: {exc.strerror}; pass a file written by mx.nd.save or "
                    f"Block.save_parameters.") from None


def index_ndarrays(path, error=MXNetFileError) -> NDArrayFile:
    """Index an ``mx.nd.save`` file (a ``.params`` file): every header and name read, no values.

    Args:
        path: The file.
        error: The exception class raised for a file that is not an NDArray list.

    Returns:
        The ``NDArrayFile``: a Mapping name (or index, for a saved list) -> array, each read when asked for.

    Raises:
        error: the file is missing, not a regular file, truncated or corrupt, or holds sparse arrays (names the file,
            the byte offset, and the sparse arrays by name).

    Examples:
        >>> params = index_ndarrays("resnet-0000.params")  # doctest: +SKIP
        >>> params.info("arg:conv0_weight").shape  # doctest: +SKIP
        (64, 3, 7, 7)
    """
    source = os.fspath(path)
    with _open(source, error) as handle:
        stream = _Stream(handle, repr(source), error, os.fstat(handle.fileno()).st_size)
        magic, _ = stream.unpack("<QQ", "header")
        if magic != LIST_MAGIC:
            raise stream.fail(f"the header is 0x{magic:X}, not MXNet's NDArray list magic 0x{LIST_MAGIC:X} (not an "
                              f"mx.nd.save file)", 0)
        infos = []
        for i in range(_count(stream, "array count", _SMALLEST_ARRAY)):
            infos.append(_header(stream, f"array {i}", skip_sparse=True))
            stream.skip(infos[-1].nbytes, f"array {i} values")
        names_at = stream.offset
        names = [_name(stream, i) for i in range(_count(stream, "name count", _SMALLEST_NAME))]
        if stream.offset != stream.size:
            raise stream.fail(f"{stream.size - stream.offset} bytes follow the {'names' if names else 'arrays'}")
        _check_names(stream, names, len(infos), names_at)
        sparse = [_sparse_label(repr(names[i]) if names else f"array {i}", info.storage, info.start)
                  for i, info in enumerate(infos) if info.storage != "default"]
        if sparse:
            raise _sparse_error(stream, sparse)
        return NDArrayFile(source, infos, names or None, stream.size, error)


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

    Examples:
        >>> weights = load_ndarrays("resnet-0000.params")  # doctest: +SKIP
        >>> weights["arg:conv0_weight"].shape  # doctest: +SKIP
        (64, 3, 7, 7)
    """
    arrays = index_ndarrays(path, error)
    values = arrays.read()
    return values if arrays.named else list(values.values())


def _count(stream: _Stream, what: str, smallest: int) -> int:
    start = stream.offset
    count = stream.unpack("<Q", what)
    if count * smallest > stream.left:
        raise stream.fail(f"{what} {count} exceeds what the {stream.left} bytes left can hold", start)
    return count


def _name(stream: _Stream, index: int) -> str:
    start = stream.offset
    length = stream.unpack("<Q", f"name {index} length")
    try:
        return stream.read(length, f"name {index}").decode("utf-8")
    except UnicodeDecodeError:
        raise stream.fail(f"name {index} is not UTF-8", start) from None


def _check_names(stream: _Stream, names: list, count: int, at: int) -> None:
    if names and len(names) != count:
        raise stream.fail(f"{count} arrays but {len(names)} names", at)
    counts = collections.Counter(names)  # one pass: a file of 200,000 equal names stays linear
    if len(counts) != len(names):
        twice = sorted(name for name, count in counts.items() if count > 1)
        many = "names occur" if len(twice) > 1 else "name occurs"
        raise stream.fail(f"{len(twice)} {many} more than once ({twice[:5]}; MXNet writes a dict)", at)
