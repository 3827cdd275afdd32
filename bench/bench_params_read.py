"""Benchmark: reading a large ``.params`` file without MXNet (``mxformats.ndarray``) against ``mx.nd.load``.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/bench_params_read.py [--millions 671] [--width 8192] [--repeat 3]

A child process (MXNet) writes an ``mx.nd.save`` file of a chain of Dense(width, width) layers (``arg:`` weights and
biases, float32, uniform values; 671M parameters = 2.5 GiB by default); the file is read once to put it in the page
cache. Then each reader runs ``--repeat`` times, each run in a fresh process, the readers' order alternating:

- ``mx.nd.load`` (MXNet 1.9.1; ``mx.nd.waitall()`` inside the timing);
- ``load_ndarrays`` (mxformats, in a process where importing mxnet fails): every array into numpy;
- ``index + one at a time`` (``index_ndarrays``, each array read and dropped): what ``convert_weights`` of a path does;
- ``load_ndarrays, advised``: the same as ``load_ndarrays`` but in arrays that keep numpy's huge-page advice, which
  the reader switches off (see ``mxformats.ndarray._empty``): the cost of that advice on this machine.

"time" is the median wall time of the read, "peak" the largest rise of the process's peak RSS over its RSS before the
read (VmHWM, reset through /proc/self/clear_refs before it, so no short peak is missed), in GiB and over the file's
size; the ratios compare with mx.nd.load in the same run. Every reader's arrays are checked equal to mx.nd.load's
(CRC-32 of each array, after the timing). Targets (issue 30): no slower than mx.nd.load, peak at most 1.1x the file.
"""
import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import zlib

from devtools.memory import reset_peak, status_bytes

GIB = 1024 ** 3
READERS = ("mx.nd.load", "load_ndarrays", "index + one at a time", "load_ndarrays, advised")


def _write_file(path, millions, width, queue):
    """The chain's parameters saved by mx.nd.save, in this (fresh) MXNet process."""
    import mxnet as mx
    depth = max(1, round(millions * 1e6 / (width * width + width)))
    arrays = {}
    for i in range(depth):
        arrays[f"arg:chain_dense{i}_weight"] = mx.nd.random.uniform(-0.01, 0.01, shape=(width, width))
        arrays[f"arg:chain_dense{i}_bias"] = mx.nd.random.uniform(-0.01, 0.01, shape=(width,))
    mx.nd.save(path, arrays)
    queue.put({"depth": depth, "params": depth * (width * width + width)})


def _mx_nd_load(path, checksums):
    import mxnet as mx
    start = time.perf_counter()
    arrays = mx.nd.load(path)
    mx.nd.waitall()
    seconds = time.perf_counter() - start
    return seconds, {name: zlib.crc32(value.asnumpy()) for name, value in arrays.items()} if checksums else {}


def _load_ndarrays(path, checksums):
    from mxformats.ndarray import load_ndarrays
    start = time.perf_counter()
    arrays = load_ndarrays(path)
    seconds = time.perf_counter() - start
    return seconds, {name: zlib.crc32(value) for name, value in arrays.items()} if checksums else {}


def _one_at_a_time(path, checksums):
    from mxformats.ndarray import index_ndarrays
    seconds, sums, start = 0.0, {}, time.perf_counter()
    index = index_ndarrays(path)
    for name in index:
        value = index[name]
        seconds += time.perf_counter() - start
        if checksums:  # not timed
            sums[name] = zlib.crc32(value)
        del value
        start = time.perf_counter()
    return seconds, sums


def _read(reader, path, checksums, queue):
    """One timed read by ``reader`` in this (fresh) process: seconds, peak RSS rise, CRC-32 per array."""
    import mxformats.ndarray
    if reader == "mx.nd.load":
        import mxnet  # noqa: F401 (imported before the baseline is taken)
    else:
        sys.modules["mxnet"] = None  # importing mxnet fails here, as where it is not installed
    if reader == "load_ndarrays, advised":
        mxformats.ndarray._set_madvise_hugepage = None  # plain np.empty: numpy advises huge pages
    before = reset_peak()
    seconds, sums = _TIMED[reader](path, checksums)
    peak = status_bytes("VmHWM") - before
    queue.put({"seconds": seconds, "peak": peak, "sums": sums, "mxnet": sys.modules.get("mxnet") is not None})


_TIMED = {"mx.nd.load": _mx_nd_load, "load_ndarrays": _load_ndarrays, "index + one at a time": _one_at_a_time,
          "load_ndarrays, advised": _load_ndarrays}


def _in_child(target, *args):
    """``target(*args, queue)`` in a fresh spawned process; its result (a child that fails raises here)."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue))
    child.start()
    result = queue.get()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"{target.__name__} failed (exit code {child.exitcode})")
    return result


def _warm(path):
    with open(path, "rb", buffering=0) as handle:
        while handle.read(1 << 26):
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--millions", type=float, default=671, help="parameters of the file, in millions")
    parser.add_argument("--width", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as folder:
        path = os.path.join(folder, "chain-0000.params")
        made = _in_child(_write_file, path, args.millions, args.width)
        size = os.path.getsize(path)
        _warm(path)
        runs = {reader: [] for reader in READERS}
        for round_ in range(args.repeat):
            order = READERS if round_ % 2 == 0 else READERS[::-1]
            for reader in order:
                runs[reader].append(_in_child(_read, reader, path, round_ == 0))
    _report(runs, made, size, args)


def _report(runs, made, size, args):
    print(f"{made['params'] / 1e6:.1f}M parameters ({made['depth']} x Dense({args.width}, {args.width})), file "
          f"{size / GIB:.2f} GiB, {args.repeat} fresh processes per reader")
    base_time = statistics.median(r["seconds"] for r in runs["mx.nd.load"])
    base_peak = max(r["peak"] for r in runs["mx.nd.load"])
    truth = runs["mx.nd.load"][0]["sums"]
    print(f"{'reader':<24} {'time s':>7} {'min s':>6} {'peak GiB':>9} {'peak/file':>9} {'time/mx':>8} "
          f"{'peak/mx':>8} {'same values':>11}")
    for reader, rows in runs.items():
        seconds, peak = statistics.median(r["seconds"] for r in rows), max(r["peak"] for r in rows)
        same = "yes" if rows[0]["sums"] == truth else "NO"
        print(f"{reader:<24} {seconds:>7.2f} {min(r['seconds'] for r in rows):>6.2f} {peak / GIB:>9.2f} "
              f"{peak / size:>9.3f} {seconds / base_time:>8.2f} {peak / base_peak:>8.3f} {same:>11}")
    ours = runs["load_ndarrays"]
    slower = statistics.median(r["seconds"] for r in ours) / base_time
    peak = max(r["peak"] for r in ours) / size
    print(f"targets: load_ndarrays no slower than mx.nd.load ({slower:.2f}x: {'met' if slower <= 1.0 else 'NOT met'}),"
          f" peak at most 1.1x the file ({peak:.3f}x: {'met' if peak <= 1.1 else 'NOT met'}); mxnet imported by "
          f"the readers without MXNet: {any(r['mxnet'] for reader in READERS[1:] for r in runs[reader])}")


if __name__ == "__main__":
    main()
