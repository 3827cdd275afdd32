"""Hostile ``.params`` files against ``mxformats.ndarray`` (read without MXNet), built here: 200,000 arrays all named
the same (the check of repeated names was quadratic: 69 s for this 4 MB file), and shapes whose dimensions multiply
past what any array holds (numpy raised its own "array is too big" with no file or offset). Each is an
``MXNetFileError`` naming the file, the byte offset and the fault."""
import struct
import time

import pytest

from mxformats.errors import MXNetFileError
from mxformats.ndarray import decode_ndarray, index_ndarrays
from tests.mxformats.hostile_states import ndarray_header
from tests.torch_side import ndarray_bytes as B

NONE_ARRAY = struct.pack("<Iii", B.V2_MAGIC, 0, 0)  # a version-2 ndim-0 array: MXNet's empty "none" array


def _same_names(count: int) -> bytes:
    """An mx.nd.save file of ``count`` empty arrays, every one named 'a'."""
    return (struct.pack("<QQQ", 0x112, 0, count) + NONE_ARRAY * count + struct.pack("<Q", count)
            + (struct.pack("<Q", 1) + b"a") * count)


# (description, the file's bytes, message pattern)
CASES = [
    ("shape (0, 2**62) float32", B.list_bytes([ndarray_header((0, 2 ** 62))], ["x"]),
     r"array 0 has shape \(0, 4611686018427387904\) of 4-byte items: its dimensions multiply past 2\*\*63 bytes, more "
     r"than any array holds at byte 24"),
    ("shape (2**40,) float64 after a valid array", B.list_bytes([ndarray_header((1,)) + b"\0" * 4,
                                                                 ndarray_header((2 ** 40,), flag=1)], ["a", "b"]),
     r"array 1 values \(1099511627776 x float64\) needs 8796093022208 bytes but only 26 are left at byte 92"),
]


@pytest.mark.parametrize("description, data, pattern", CASES, ids=[c[0] for c in CASES])
def test_hostile_params_are_typed_errors(tmp_path, description, data, pattern):
    """MXNetFileError naming the file and the offset; the file is left as it is."""
    path = tmp_path / "hostile.params"
    path.write_bytes(data)
    with pytest.raises(MXNetFileError, match=pattern) as caught:
        index_ndarrays(path)
    assert "hostile.params" in str(caught.value) and path.read_bytes() == data


def test_pickled_ndarray_of_shape_0_by_2_62():
    """One NDArray's bytes (as a pickle holds them) of shape (0, 2**62): the typed error with the offset."""
    with pytest.raises(MXNetFileError, match=r"^s.states: NDArray has shape \(0, 4611686018427387904\) .* at byte 0"):
        decode_ndarray(ndarray_header((0, 2 ** 62)), "s.states")


def test_repeated_names_are_refused_in_linear_time(tmp_path):
    """200,000 arrays all named 'a' (a 4 MB file): the name and the offset of the names; indexing them takes about
    4x the time of 50,000 (linear: under 8x in one run; the quadratic check took 16x)."""
    times = []
    for count, offset in ((50_000, 600_024), (200_000, 2_400_024)):
        path = tmp_path / f"{count}.params"
        path.write_bytes(_same_names(count))
        start = time.perf_counter()
        with pytest.raises(MXNetFileError, match=rf"/{count}.params': 1 name occurs more than once \(\['a'\]; MXNet "
                                                 rf"writes a dict\) at byte {offset}"):
            index_ndarrays(path)
        times.append(time.perf_counter() - start)
    assert times[1] < 8 * times[0], times
