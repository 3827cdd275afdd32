"""Benchmark: how long each hostile input of issue 38 takes to be refused, and how much memory the refusal costs.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. .venv/bin/python bench/bench_hostile.py

Each case is one call of the reader a command or ``LrTrainer.load_states`` goes through, on a file built here (the
states pickles of ``tests/mxformats/hostile_states.py``, .params, .idx and symbol files): "time" is its wall time
(median of 3), "peak" the largest rise of the process's peak RSS over its RSS before the call (VmHWM, reset through
/proc/self/clear_refs before each call, so no short peak is missed), "error" the exception type and the start of its
message. Before this issue: the 32-byte bytearray pickle took the CLI to 4.4 GB, the 2**40-path pickle and
``--steps 1e20`` ran on, the 200,000-name .params took 69 s, a dict key nested a million tuples deep killed the
process (segmentation fault). The tests (tests/mxformats/test_hostile_*.py, tests/migrate/cli/test_hostile_inputs.py,
tests/torch_side/test_recordio.py) assert the errors; this prints the figures.
"""
import os
import statistics
import struct
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from devtools.memory import reset_peak, status_bytes  # noqa: E402 (after the checkout is on the path)

MIB = 1024 ** 2


def _measure(call) -> tuple:
    """(median seconds, largest peak-RSS rise in bytes, the exception raised) over 3 calls."""
    times, peaks, raised = [], [], None
    for _ in range(3):
        before = reset_peak()
        start = time.perf_counter()
        try:
            call()
        except Exception as exc:  # the refusal being measured
            raised = exc
        times.append(time.perf_counter() - start)
        peaks.append(status_bytes("VmHWM") - before)
    return statistics.median(times), max(peaks), raised


def _cases(folder: str) -> dict:
    """Case name -> a call that reads one hostile input (building its file in ``folder`` first)."""
    import mxnet as mx  # noqa: F401 (the live reading of NDArrays)

    from migrate.data import RecordFile, framed, insightface_dataset, pack
    from migrate.source import load_mxnet
    from mxformats.ndarray import index_ndarrays
    from mxformats.states import split_states, unpickle_states
    from tests.mxformats import hostile_states as H

    cases = {f"states as data: {name}": (lambda raw=raw: unpickle_states(raw, "s.states", as_data=True))
             for name, raw in H.HOSTILE.items()}
    for name in ("bytearray(4e9)", "an NDArray header of 2**40 floats", "a dict key nested 1e6 tuples deep"):
        cases[f"states live (LrTrainer.load_states): {name}"] = lambda raw=H.HOSTILE[name]: unpickle_states(raw, "s")
    cases["states header JSON 100,000 deep"] = lambda: split_states(H.deep_header(), "deep.states")
    none = struct.pack("<Iii", H.V2_MAGIC, 0, 0)
    names = os.path.join(folder, "names.params")
    with open(names, "wb") as out:
        out.write(struct.pack("<QQQ", 0x112, 0, 200_000) + none * 200_000 + struct.pack("<Q", 200_000)
                  + (struct.pack("<Q", 1) + b"a") * 200_000)
    cases[".params: 200,000 arrays named 'a' (4 MB)"] = lambda: index_ndarrays(names)
    rec = os.path.join(folder, "two.rec")
    with open(rec, "wb") as out:
        out.write(framed(pack((0, 1.0, 0, 0), b"AAAA")) + framed(pack((0, 2.0, 1, 0), b"BBBBBB")))
    for label, offset in (("10**30", 10 ** 30), ("2**63-4", 2 ** 63 - 4)):
        idx = os.path.join(folder, f"{label}.idx")
        with open(idx, "w") as out:
            out.write(f"0\t0\n1\t{offset}\n")
        cases[f".idx offset {label}"] = lambda idx=idx: RecordFile(rec, idx)
    header = os.path.join(folder, "face.rec")
    with open(header, "wb") as out:
        out.write(framed(pack((2, [1e30, 3.0], 0, 0), b"")))
    cases["insightface header range 1e30"] = lambda: insightface_dataset(header)
    symbol = os.path.join(folder, "cut-symbol.json")
    with open(symbol, "wb") as out:
        out.write('{"nodes": [{"op": "null", "name": "caf\u00e9'.encode()[:-1])
    params = os.path.join(folder, "net-0000.params")
    mx.nd.save(params, {})
    cases["symbol.json cut inside a character, read by MXNet"] = lambda: load_mxnet((symbol, params), [(1, 2)],
                                                                                     ["float32"])
    return cases


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        rows = [(name, *_measure(call)) for name, call in _cases(folder).items()]
    print("| case | error | time (ms) | peak (MiB) |")
    print("|---|---|---|---|")
    for name, seconds, peak, raised in rows:
        error = f"{type(raised).__name__}: {str(raised)[:70]}..." if raised is not None else "none raised"
        print(f"| {name} | {error} | {seconds * 1e3:.1f} | {peak / MIB:.1f} |")


if __name__ == "__main__":
    main()
