"""The thread pool of the numpy and compiled back-ends, and how runs are cut into shares for it."""
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .base import mx_float


_POOL = {}


#: Flat runs shorter than this (elements, in all) run on the calling thread only.
MIN_SPLIT = 1 << 16


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


def shares(runs: list, parts: int, dtype: np.dtype) -> list:
    """``runs`` [(start, stop, lr, wd)] cut into at most ``parts`` shares of near-equal element counts (cuts on
    16-element boundaries), each as the kernels take it: (starts, stops, lrs, wds) arrays, lr and wd as ``mx_float``
    makes them."""
    total = sum(hi - lo for lo, hi, _, _ in runs)
    size = (-(-total // parts) + 15) // 16 * 16
    out, current, filled = [], [], 0
    for lo, hi, lr, wd in runs:
        while lo < hi:
            stop = min(hi, lo + size - filled)
            current.append((lo, stop, lr, wd))
            filled, lo = filled + stop - lo, stop
            if filled >= size:
                out.append(current)
                current, filled = [], 0
    f = mx_float(dtype)
    return [(np.array([r[0] for r in part], np.int64), np.array([r[1] for r in part], np.int64),
             np.array([f(r[2]) for r in part], dtype), np.array([f(r[3]) for r in part], dtype))
            for part in out + ([current] if current else [])]
