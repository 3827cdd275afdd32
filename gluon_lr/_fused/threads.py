"""The thread pool of the numpy and compiled back-ends, and how a table is cut into shares for it."""
import os
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np


_POOL = {}


#: Tables smaller than this (elements, in all) run on the calling thread only.
MIN_SPLIT = 1 << 16

#: Shares per thread for the compiled kernels: each thread takes the next share when it finishes one, so a thread
#: that the OS holds back (other jobs on the cores) leaves the rest of the work to the others.
SHARES_PER_THREAD = 8


def pool(threads: int) -> ThreadPoolExecutor:
    """A shared thread pool for the numpy and compiled kernels, one per process (a forked child has none of its
    parent's threads, so it makes its own)."""
    key = (os.getpid(), threads)
    if key not in _POOL:
        _POOL[key] = ThreadPoolExecutor(threads, thread_name_prefix="gluon_lr_fused")
    return _POOL[key]


def thread_count() -> int:
    """Threads for numpy kernels: OMP_NUM_THREADS (what MXNet uses) or the number of cores."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "") or os.cpu_count() or 1))
    except ValueError:
        return max(1, os.cpu_count() or 1)


def split_segments(segments: list, parts: int) -> list:
    """[(arrays, lr, wd)] cut into ``parts`` lists of (arrays, lr, wd, start, stop) of near-equal element counts."""
    total = sum(arrays[0].size for arrays, _, _ in segments)
    share, out, current, filled = -(-total // parts), [], [], 0
    for arrays, lr, wd in segments:
        start = 0
        while start < arrays[0].size:
            stop = min(arrays[0].size, start + share - filled)
            current.append((arrays, lr, wd, start, stop))
            filled, start = filled + stop - start, stop
            if filled >= share:
                out.append(current)
                current, filled = [], 0
    return out + [current] if current else out


def shares(addresses: np.ndarray, lengths: np.ndarray, lrs: np.ndarray, wds: np.ndarray, parts: int) -> list:
    """A table (``Table.addresses`` rows and lengths, per-tensor lrs and wds) cut into at most ``parts`` shares of
    near-equal element counts, as the kernels take them: [(addresses, lengths, lrs, wds)]. A tensor is cut where a
    share ends inside it, on a 16-element boundary from its start; the rows of a cut piece point at its first element.
    """
    size = (-(-int(lengths.sum()) // parts) + 15) // 16 * 16
    out, pieces, filled = [], [], 0
    for row, n in enumerate(lengths.tolist()):
        start = 0
        while start < n:
            stop = min(n, (start + size - filled + 15) // 16 * 16)
            pieces.append((row, start, stop))
            filled, start = filled + stop - start, stop
            if filled >= size:
                out.append(pieces)
                pieces, filled = [], 0
    itemsize = lrs.dtype.itemsize
    return [_share(addresses, lrs, wds, share, itemsize) for share in out + ([pieces] if pieces else [])]


def _share(addresses: np.ndarray, lrs: np.ndarray, wds: np.ndarray, pieces: list, itemsize: int) -> tuple:
    """The kernel arguments of one share: [(row, start, stop)] pieces of table rows."""
    rows = np.array([p[0] for p in pieces], dtype=np.int64)
    starts = np.array([p[1] for p in pieces], dtype=np.int64)
    lengths = np.array([p[2] - p[1] for p in pieces], dtype=np.int64)
    return addresses[rows] + starts[:, None] * itemsize, lengths, lrs[rows], wds[rows]


def run_shares(kernel, calls: list, threads: int) -> None:
    """``kernel(*call)`` for every call (the kernel releases the GIL): the calling thread and ``threads - 1`` pool
    threads each take the next call as they finish one; returns when all are done."""
    pending = iter(calls)  # next() on a list iterator holds the GIL: each call is taken once

    def drain():
        for call in pending:
            kernel(*call)

    futures = [pool(threads - 1).submit(drain) for _ in range(min(threads, len(calls)) - 1)]
    try:
        drain()
    finally:
        wait(futures)
    for future in futures:
        future.result()
