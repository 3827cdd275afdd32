"""Hostile MXNet states pickles (the bytes ``save_states`` writes after the gluon-lr header), built here from their
opcodes: small, deterministic, none of them runs code. Each is what a crafted or damaged file could hold; the readers
(``mxformats.states``, ``LrTrainer.load_states``, ``migrate optim --states``) must refuse them with a typed error in
bounded time and memory. No MXNet needed.
"""
import json
import pickle
import struct

import numpy as np

from mxformats.errors import StatesFileError, UnsafeStatesError
from mxformats.states import MAGIC

V2_MAGIC = 0xF993FAC9
DEEP = 1_000_000


def _unicode(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def _bytes(data: bytes) -> bytes:
    return b"B" + struct.pack("<I", len(data)) + data  # BINBYTES


def ndarray_pickle(raw: bytes) -> bytes:
    """``{0: NDArray}`` whose handle holds ``raw`` (the bytes ``MXNDArraySaveRawBytes`` writes), as MXNet pickles an
    NDArray: ``NDArray(None)`` then ``__setstate__({'handle': bytearray(raw)})``."""
    handle = b"cbuiltins\nbytearray\n" + _bytes(raw) + b"\x85R"  # bytearray(raw)
    array = b"cmxnet.ndarray.ndarray\nNDArray\nN\x85R}" + _unicode("handle") + handle + b"sb"  # REDUCE, BUILD
    return b"\x80\x02}K\x00" + array + b"s."


def ndarray_header(shape, flag: int = 0) -> bytes:
    """A version-2 dense NDArray header of ``shape`` (int64 dims), CPU context, dtype ``flag``: no values follow."""
    return struct.pack(f"<Iii{len(shape)}q", V2_MAGIC, 0, len(shape), *shape) + struct.pack("<iii", 1, 0, flag)


def shared_lists(depth: int) -> bytes:
    """``{0: x}`` with ``x = [x', x']`` nested ``depth`` deep, each level the same list twice: 2**depth paths."""
    value = []
    for _ in range(depth):
        value = [value, value]
    return pickle.dumps({0: value}, protocol=2)


def shared_tuples(depth: int) -> bytes:
    """``{0: t}`` with ``t = (t', t')`` nested ``depth`` deep by DUP + TUPLE2 (2 bytes a level)."""
    return b"\x80\x02}K\x00)" + b"2\x86" * depth + b"s."


HOSTILE = {  # name -> the states bytes
    "bytearray(4e9)": b"\x80\x02cbuiltins\nbytearray\n\x8a\x05\x00(k\xee\x00\x85R.",  # 32 bytes, LONG1 4,000,000,000
    "2**40 paths (shared lists)": shared_lists(40),
    "2**40 paths (shared tuples)": shared_tuples(40),
    "a list nested 1e6 deep": b"\x80\x02}K\x00" + b"(" * DEEP + b"l" * DEEP + b"s.",
    "a dict key nested 1e6 tuples deep": b"\x80\x02}" + b"(" * DEEP + b"t" * DEEP + b"K\x00s.",
    "a list holding itself": b"\x80\x02}K\x00]q\x00h\x00as.",
    "a numpy object array": pickle.dumps({0: np.array([1, None], dtype=object)}, protocol=3),
    "numpy _reconstruct of 2**40 bytes": b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n\x8a\x06"
                                         b"\x00\x00\x00\x00\x00\x01\x85C\x01b\x87R.",
    "an NDArray of shape (0, 2**62)": ndarray_pickle(ndarray_header((0, 2 ** 62))),
    "an NDArray header of 2**40 floats": ndarray_pickle(ndarray_header((2 ** 40,))),
    "a state sharing one list": pickle.dumps({0: (lambda shared: (shared, shared))([np.zeros(2, np.float32)])},
                                             protocol=3),
    "a whole pickle of an int": pickle.dumps(7, protocol=2),
    "a whole pickle that builds nothing": b"\x80\x02K\x00K\x01a.",
    "a pickle cut short": b"\x80\x02}K\x00",
}


# (name in HOSTILE, error type, message pattern): what unpickle_states(HOSTILE[name], "hostile.states") raises, live
# and as data
CASES = [
    ("bytearray(4e9)", UnsafeStatesError, r"^States file 'hostile.states' asks for a bytearray of 4,000,000,000 bytes, "
     r"more than its 32 bytes hold; it was refused before allocating"),
    ("2**40 paths (shared lists)", UnsafeStatesError, r"'hostile.states': containers nest more than 32 deep \(at "
     r"byte \d+\), which no optimizer states file does"),
    ("2**40 paths (shared tuples)", UnsafeStatesError, r"'hostile.states': containers nest more than 32 deep \(at "
     r"byte 69\)"),
    ("a list nested 1e6 deep", UnsafeStatesError, r"containers nest more than 32 deep \(at byte 1000037\)"),
    ("a dict key nested 1e6 tuples deep", UnsafeStatesError, r"containers nest more than 32 deep \(at byte "
     r"1000035\)"),
    ("a list holding itself", UnsafeStatesError, r"'hostile.states': a list holds itself"),
    ("a numpy object array", UnsafeStatesError, r"holds a numpy array of Python objects, which optimizer states never "
     r"hold"),
    ("numpy _reconstruct of 2**40 bytes", UnsafeStatesError, r"asks for a numpy array of shape \(1099511627776,\) x "
     r"int8, more than its \d+ bytes hold"),
    ("an NDArray of shape (0, 2**62)", StatesFileError, r"^States file 'hostile.states': the bytes of a pickled "
     r"NDArray: NDArray has shape \(0, 4611686018427387904\) of 4-byte items: its dimensions multiply past 2\*\*63 bytes, more "
     r"than any array holds at byte 0"),
    ("an NDArray header of 2**40 floats", StatesFileError, r"^States file 'hostile.states': the bytes of a pickled "
     r"NDArray: NDArray values \(1099511627776 x float32\) needs 4398046511104 bytes but only 0 are left at byte 32"),
    ("a state sharing one list", StatesFileError, r"the state of parameter index 0 is not one MXNet makes \(it holds "
     r"the same list at two places"),
    ("a whole pickle of an int", StatesFileError, r"expected MXNet optimizer states \(a dict index -> state\), got "
     r"int"),
    ("a whole pickle that builds nothing", StatesFileError, r"could not be unpickled \(AttributeError: 'int' object "
     r"has no attribute 'append'\); their pickle is whole \(8 bytes of opcodes, ending with STOP\) but builds no states"),
    ("a pickle cut short", StatesFileError, r"could not be unpickled \(.*\); their pickle is cut short at byte 5"),
]


def wrapped(raw: bytes, params=None) -> bytes:
    """``raw`` behind a gluon-lr states header (``params`` its per-parameter list, by default one 2-element weight)."""
    params = [{"name": "w", "shape": [2], "lr_mult": 1.0, "wd_mult": 1.0}] if params is None else params
    header = json.dumps({"format": "gluon-lr-states", "schema_version": 1, "params": params}).encode()
    return MAGIC + len(header).to_bytes(8, "big") + header + raw


def deep_header(depth: int = 100_000) -> bytes:
    """A gluon-lr states file whose JSON header is a list nested ``depth`` deep."""
    header = b"[" * depth + b"]" * depth
    return MAGIC + len(header).to_bytes(8, "big") + header + pickle.dumps({}, protocol=2)
