"""Hostile states pickles (``tests/mxformats/hostile_states.py``) against the one reader both halves use
(``mxformats.states.unpickle_states``), read live (MXNet's objects, the trainer's side) and as data (numpy, the torch
side): each is a typed error naming the file and what is wrong, within a bounded time and with a traced peak of
memory bounded by the file's own size (a 30-byte file asked for 4 GB; 2**40 paths through shared lists recursed
forever; a dict key nested a million tuples deep killed the interpreter)."""
import signal
import time
import tracemalloc

import mxnet  # noqa: F401 (the live reading needs MXNet's classes importable)
import pytest

from mxformats.errors import StatesFileError, UnsafeStatesError
from mxformats.states import split_states, unpickle_states
from tests.mxformats import hostile_states as H
from tests.mxformats.hostile_states import CASES

MIB = 1 << 20

class _Deadline:
    """SIGALRM after ``seconds``: a case that hangs fails instead of holding the suite."""

    def __init__(self, seconds: int):
        self.seconds = seconds

    def __enter__(self):
        def expire(signum, frame):
            raise TimeoutError(f"still running after {self.seconds} s")
        self.previous = signal.signal(signal.SIGALRM, expire)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)


@pytest.mark.parametrize("as_data", [False, True], ids=["live", "as data"])
@pytest.mark.parametrize("description, error, pattern", CASES, ids=[c[0] for c in CASES])
def test_hostile_states_are_typed_errors(description, error, pattern, as_data):
    """The typed error naming the file and the fault; nothing allocated beyond a few times the file (tracemalloc's
    peak), done within 20 s (a hang guard; each case takes well under a second: bench/bench_hostile.py)."""
    data = H.HOSTILE[description]
    tracemalloc.start()
    try:
        with _Deadline(20), pytest.raises(error, match=pattern) as caught:
            unpickle_states(data, "hostile.states", as_data=as_data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(caught.value, StatesFileError)
    assert peak < 4 * len(data) + 2 * MIB, f"{description}: {peak / MIB:.1f} MiB traced for a {len(data)}-byte file"


def test_deep_header_is_a_states_file_error():
    """A gluon-lr header of JSON nested 100,000 deep: StatesFileError saying so (it was a RecursionError)."""
    with pytest.raises(StatesFileError, match=r"^States file 'deep.states' has a corrupt header \(its JSON is nested "
                                              r"too deeply to be one"):
        split_states(H.deep_header(), "deep.states")


def test_the_tuple_scan_is_linear():
    """The opcode scan that refuses deep tuples reads 2 MB of opcodes in about the time of 1 MB twice over (linear:
    ratio below 3 in one run, measured on the same machine)."""
    times = []
    for depth in (250_000, 500_000):
        data = b"\x80\x02}" + b"(" * depth + b"t" * depth + b"K\x00s."
        start = time.perf_counter()
        with pytest.raises(UnsafeStatesError):
            unpickle_states(data, "deep.states", as_data=True)
        times.append(time.perf_counter() - start)
    assert times[1] < 3 * times[0], times
