"""The one threading choice of the update kernels: a pool of Python threads, each calling a GIL-free kernel on its
own share of a table, the calling thread taking shares too.

No numba threading layer is involved (no ``prange``): nothing to clash with MXNet's or torch's OpenMP runtime, nothing
that breaks in a forked child (a child makes its own pool: ``pool`` is keyed by process id), no lock between two
threads that update at once (each call has its own share buffers), and a thread the OS holds back (other jobs on the
cores) leaves the rest of the work to the others (``SHARES_PER_THREAD`` shares per thread, taken as threads finish).
Who calls chooses the thread count: ``gluon_lr._fused`` takes ``thread_count()`` (OMP_NUM_THREADS, what MXNet uses),
``migrate.optim`` takes ``torch.get_num_threads()``.
"""
import functools
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


class Shares:
    """A table cut into at most ``parts`` shares of near-equal element counts, as the compiled kernels take them,
    worked out once per table (its rows and lengths never change) and refilled at each step.

    A tensor is cut where a share ends inside it, on a 16-element boundary from its start; each piece is a table row
    from an element offset. ``fill`` writes the pieces' addresses (the row's addresses moved to the piece's first
    element), lrs and wds into buffers of their own; ``views`` are the kernel arguments (addresses, lengths, lrs, wds)
    of each share, views into those buffers, so the same tuples serve every step.

    Examples:
        >>> cut = Shares(lengths, columns=3, dtype=np.dtype("float32"), parts=16)
        >>> cut.fill(addresses, lrs, wds)          # Table.addresses() rows, per-tensor lrs and wds of this step
        >>> run_shares(kernel, [(*view, consts, use_clip) for view in cut.views], threads)
    """

    def __init__(self, lengths: np.ndarray, columns: int, dtype: np.dtype, parts: int, align: int = 16):
        rows, starts, sizes, bounds = pieces(tuple(np.asarray(lengths).tolist()), parts, align)
        self.rows, self.offsets = rows, (starts * dtype.itemsize)[:, None]
        self.addresses = np.empty((rows.size, columns), dtype=np.int64)
        self.lrs, self.wds = np.empty(rows.size, dtype=dtype), np.empty(rows.size, dtype=dtype)
        self.views = [(self.addresses[a:b], sizes[a:b], self.lrs[a:b], self.wds[a:b]) for a, b in bounds]

    def fill(self, addresses: np.ndarray, lrs: np.ndarray, wds: np.ndarray) -> None:
        """Write this step's pieces from the table's ``addresses`` rows and per-tensor ``lrs`` and ``wds``."""
        np.take(addresses, self.rows, axis=0, out=self.addresses)
        self.addresses += self.offsets
        np.take(lrs, self.rows, out=self.lrs)
        np.take(wds, self.rows, out=self.wds)


@functools.lru_cache(maxsize=256)
def pieces(lengths: tuple, parts: int, align: int = 16) -> tuple:
    """(rows, starts, lengths, bounds): the pieces of at most ``parts`` shares (``Shares``), int64 arrays, and each
    share's [start, stop) range of pieces. A tensor is cut only at multiples of ``align`` (a multiple of 16) elements
    from its start. Cached: the same lengths give the same cut (do not write the arrays)."""
    size = (-(-sum(lengths) // parts) + align - 1) // align * align
    cut, bounds, first, filled = [], [], 0, 0
    for row, n in enumerate(lengths):
        start = 0
        while start < n:
            stop = min(n, (start + size - filled + align - 1) // align * align)
            cut.append((row, start, stop - start))
            filled, start = filled + stop - start, stop
            if filled >= size:
                bounds.append((first, len(cut)))
                first, filled = len(cut), 0
    if first < len(cut):
        bounds.append((first, len(cut)))
    table = np.array(cut, dtype=np.int64).reshape(-1, 3)
    return table[:, 0].copy(), table[:, 1].copy(), table[:, 2].copy(), bounds


def lanes(sizes: list, threads: int, width: int = 4) -> list:
    """Tensor indices for ``mxupdate.kernels.sum_sq``, one (groups, width) int64 array per thread: largest first,
    groups of ``width`` summed side by side, each group to the least-loaded thread; ``len(sizes)`` (an empty
    tensor) fills short groups."""
    filler = len(sizes)
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    groups = [order[i:i + width] + [filler] * max(0, i + width - len(order)) for i in range(0, len(order), width)]
    shares, loads = [[] for _ in range(threads)], [0] * threads
    for group in groups:
        lightest = loads.index(min(loads))
        shares[lightest].append(group)
        loads[lightest] += sizes[group[0]]
    return [np.array(share, dtype=np.int64).reshape(-1, width) for share in shares if share]


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
