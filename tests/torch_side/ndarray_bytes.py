"""MXNet's NDArray bytes written by hand, in every layout MXNet 1.x reads (``NDArray::Save``, ``NDArray::Load`` and
``LegacyLoad`` in MXNet's ``src/ndarray/ndarray.cc``): version 2 and 3 (magic, storage type, int64 shape), version 1
(magic, int64 shape) and legacy (uint32 ndim and dims, no magic); a list file (``NDArray::Save`` of a list: 0x112,
reserved, count, arrays, names). ``tests/mxformats/test_ndarray_files.py`` shows MXNet's ``mx.nd.load`` reads these
bytes to the same arrays, and that the version-2 bytes equal what ``mx.nd.save`` writes. No MXNet needed here.
"""
import struct

import numpy as np

V1_MAGIC, V2_MAGIC, V3_MAGIC = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
FLAGS = {"float32": 0, "float64": 1, "float16": 2, "uint8": 3, "int32": 4, "int8": 5, "int64": 6, "bool": 7}
VERSIONS = ("legacy", "v1", "v2", "v3")
DTYPES = tuple(FLAGS)


def array_bytes(array: np.ndarray, version: str = "v2", flag: int = None, context=(1, 0)) -> bytes:
    """One dense array as MXNet's ``version`` lays it out (a version-2 ndim-0 array is MXNet's "none" array)."""
    shape = array.shape
    if version == "legacy":
        head = struct.pack(f"<I{len(shape)}I", len(shape), *shape)
    else:
        magic = {"v1": V1_MAGIC, "v2": V2_MAGIC, "v3": V3_MAGIC}[version]
        storage = b"" if version == "v1" else struct.pack("<i", 0)
        head = struct.pack("<I", magic) + storage + struct.pack(f"<i{len(shape)}q", len(shape), *shape)
    flag = FLAGS[array.dtype.name] if flag is None else flag
    return head + struct.pack("<iii", *context, flag) + np.ascontiguousarray(array).tobytes()  # x86: little-endian


def row_sparse_bytes(rows: np.ndarray, indices: np.ndarray, shape: tuple) -> bytes:
    """A row_sparse array (version 2): storage shape, shape, context, dtype, aux dtype and shape, values, indices."""
    def tshape(dims):
        return struct.pack(f"<i{len(dims)}q", len(dims), *dims)
    return (struct.pack("<Ii", V2_MAGIC, 1) + tshape(rows.shape) + tshape(shape)
            + struct.pack("<iii", 1, 0, FLAGS[rows.dtype.name]) + struct.pack("<i", 6) + tshape(indices.shape)
            + rows.tobytes() + indices.astype("<i8").tobytes())


def list_bytes(arrays: list, names=None) -> bytes:
    """An ``mx.nd.save`` file of the given array records (bytes), named when ``names`` is given."""
    body = struct.pack("<QQQ", 0x112, 0, len(arrays)) + b"".join(arrays)
    names = [name.encode() for name in names or ()]
    return body + struct.pack("<Q", len(names)) + b"".join(struct.pack("<Q", len(n)) + n for n in names)


def random_array(dtype: str, shape: tuple, rng: np.random.RandomState) -> np.ndarray:
    """Values spanning the dtype: random bits for integers, normal values with NaN, +-inf and -0.0 for floats."""
    if dtype == "bool":
        return np.asarray(rng.rand(*shape) > 0.5)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return np.asarray(rng.randint(info.min, info.max, size=shape, dtype=dtype))
    values = np.asarray(rng.randn(*shape) * 100).astype(dtype)
    flat = values.reshape(-1)
    for i, special in enumerate((np.nan, np.inf, -np.inf, -0.0)[:flat.size // 4]):
        flat[i] = special
    return values
