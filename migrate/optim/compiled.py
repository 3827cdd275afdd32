"""MXNet's compiled update kernels (``mxupdate.kernels``, shared with LrTrainer's fast step) on torch CPU tensors.

A call takes one optimizer group's rows (a weight with its gradient and state tensors), keeps those the kernels can
update in place (``available``: numba importable, CPU, contiguous, float32 or float64, one dtype per row), and
updates them with one launch per dtype: a table of the rows' addresses, cut into shares run on
``torch.get_num_threads()`` threads by ``mxupdate.threads`` (the kernels release the GIL). It returns the rows it
left (CUDA, strided, half-precision tensors) for the optimizer's torch path. Every launch goes through ``launch``.
numba is imported, and the kernels loaded from its on-disk cache (or compiled), at the first launch.

Examples:
    >>> left = update("sgd_mom", rows, lrs, wds, lambda kind: [kind(1.0), kind(-1.0), kind(0.9)], use_clip=False)
"""
import functools
import importlib.util

import numpy as np
import torch

import mxupdate
from mxupdate.threads import MIN_SPLIT, SHARES_PER_THREAD, lanes, pieces, run_shares

__all__ = ["available", "lamb_apply", "lamb_direction", "launch", "sum_sqs", "update"]

_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}
#: numba's empty float32 array: tells a kernel the dtype of a float32 column (LAMB's direction).
_LIKE32 = np.empty(0, dtype=np.float32)


@functools.lru_cache(maxsize=None)
def _numba_found() -> bool:
    """Whether numba can be imported (a dependency; without it the torch paths run)."""
    return importlib.util.find_spec("numba") is not None


def available(*tensors) -> bool:
    """Whether the kernels can update ``tensors`` in place: numba importable, all on the CPU, contiguous, float32 or
    float64, one dtype."""
    if not _numba_found():
        return False
    dtype = tensors[0].dtype
    return dtype in _DTYPES and all(t.device.type == "cpu" and t.dtype == dtype and t.is_contiguous()
                                    for t in tensors)


def launch(name: str, calls: list, threads: int) -> None:
    """``mxupdate.kernels.<name>(*call)`` for every call (one share of a table each) on ``threads`` threads."""
    run_shares(getattr(mxupdate.load_kernels(), name), calls, threads)


def _threads(total: int) -> int:
    """Threads for a table of ``total`` elements: torch's intra-op thread count, 1 for a small table."""
    return max(1, torch.get_num_threads()) if total >= MIN_SPLIT else 1


def _cut(rows: list, align: int = 16) -> tuple:
    """(threads, piece rows, piece starts, piece addresses, piece lengths, share bounds) of a table of ``rows`` (each
    column's address moved to the piece's first element by that column's itemsize)."""
    lengths = tuple(row[0].numel() for row in rows)
    threads = _threads(sum(lengths))
    rows_of, starts, sizes, bounds = pieces(lengths, threads * SHARES_PER_THREAD if threads > 1 else 1, align)
    addresses = np.array([[t.data_ptr() for t in row] for row in rows], dtype=np.int64).reshape(len(rows), -1)
    itemsizes = np.array([t.element_size() for t in rows[0]], dtype=np.int64)
    return threads, rows_of, starts, addresses[rows_of] + starts[:, None] * itemsizes, sizes, bounds


def update(name: str, rows: list, lrs: list, wds: list, consts_of, use_clip: bool, enabled: bool = True) -> list:
    """Update the rows the kernels can take with ``mxupdate.kernels.<name>``; return the positions of the others.

    Args:
        name: The kernel (``sgd``, ``sgd_mom``, ``nag_mom``, ``adam``, ``rmsprop``, ...).
        rows: Per parameter, the tuple of tensors the kernel's table rows hold (weight, gradient, states).
        lrs, wds: Per row, its lr and wd as python floats holding the float32 values MXNet's kernel gets.
        consts_of: ``numpy scalar type -> list`` of the kernel's constants in that dtype.
        use_clip: Whether the gradient is clipped (to the clip constant).
        enabled: False: take no row (the group's ``compiled`` option).

    Returns:
        Positions in ``rows`` of the rows left for the torch path, in order.
    """
    by_dtype, left = {}, []
    for position, row in enumerate(rows):
        if enabled and available(*row):
            by_dtype.setdefault(row[0].dtype, []).append(position)
        else:
            left.append(position)
    for dtype, positions in by_dtype.items():
        kind = _DTYPES[dtype]
        threads, rows_of, _, addresses, sizes, bounds = _cut([rows[p] for p in positions])
        piece_lrs = np.array([lrs[p] for p in positions], dtype=kind)[rows_of]
        piece_wds = np.array([wds[p] for p in positions], dtype=kind)[rows_of]
        consts = np.array(consts_of(kind), dtype=kind)
        launch(name, [(addresses[a:b], sizes[a:b], piece_lrs[a:b], piece_wds[a:b], consts, bool(use_clip))
                      for a, b in bounds], threads)
    return left


def sum_sqs(tensors: list) -> np.ndarray:
    """MXNet's CPU ``multi_sum_sq`` of ``tensors`` (one dtype, ``available``): each tensor summed alone, element by
    element in order, into a C float; 4 tensors side by side per thread.

    Returns:
        A float32 numpy array of the sums, bit for bit MXNet's.
    """
    sizes = [t.numel() for t in tensors]
    threads = _threads(sum(sizes))
    addresses = np.array([t.data_ptr() for t in tensors] + [0], dtype=np.int64)
    lengths = np.array(sizes + [0], dtype=np.int64)
    out = np.zeros(len(tensors) + 1, dtype=np.float32)
    like = np.empty(0, dtype=_DTYPES[tensors[0].dtype])
    launch("sum_sq", [(addresses, lengths, share, out, like)
                      for share in lanes(sizes, threads)], threads)
    return out[:-1]


def lamb_direction(rows: list, wds: list, corrections: list, consts: list, use_clip: bool, bias_correction: bool,
                   sums: bool) -> np.ndarray:
    """MXNet's ``multi_lamb_update`` step 1 on ``rows`` (weight, grad, mean, var, float32 direction; ``available``
    but for the direction), and, when ``sums``, the float64 sums of squares of each weight and direction; when
    ``sums``, also the direction in the data's dtype (``mxupdate.kernels.lamb_direction``'s ``exact`` off).

    Args:
        wds: Per row, its wd (a float32 value). corrections: per row (1 - b1^t, 1 - b2^t) in the data's dtype.
        consts: (rescale, clip, b1, b2, 1 - b1, 1 - b2, eps) in the data's dtype.

    Returns:
        (rows, 2) float64 sums of squares of each weight and direction (zeros when not ``sums``).
    """
    kind = _DTYPES[rows[0][0].dtype]
    block = mxupdate.load_kernels().BLOCK
    threads, rows_of, starts, addresses, sizes, bounds = _cut(rows, align=block)
    counts = np.array([-(-row[0].numel() // block) for row in rows], dtype=np.int64)
    first_block = np.cumsum(counts) - counts
    blocks = first_block[rows_of] + starts // block if sums else np.full(len(rows_of), -1, dtype=np.int64)
    block_sums = np.zeros((max(1, int(counts.sum())), 2), dtype=np.float64)
    piece_wds = np.array(wds, dtype=kind)[rows_of]
    piece_corrections = np.array(corrections, dtype=kind).reshape(-1, 2)[rows_of]
    constants = np.array(consts, dtype=kind)
    launch("lamb_direction", [(addresses[a:b], sizes[a:b], piece_wds[a:b], piece_corrections[a:b], constants,
                               bool(use_clip), bool(bias_correction), not sums, blocks[a:b], block_sums, _LIKE32)
                              for a, b in bounds], threads)
    out = np.zeros((len(rows), 2), dtype=np.float64)
    filled = counts > 0  # each tensor's blocks added by numpy (the same sum whatever the cut into shares)
    if filled.any():
        out[filled] = np.add.reduceat(block_sums, first_block[filled], axis=0)
    return out


def lamb_apply(rows: list, lrs: list) -> None:
    """MXNet's ``multi_lamb_update`` step 2 on ``rows`` (weight, float32 direction): ``w = w - lr * d`` with each
    row's ``lr`` (``lr * r1/r2`` in the data's dtype)."""
    kind = _DTYPES[rows[0][0].dtype]
    threads, rows_of, _, addresses, sizes, bounds = _cut(rows)
    piece_lrs = np.array(lrs, dtype=kind)[rows_of]
    launch("lamb_apply", [(addresses[a:b], sizes[a:b], piece_lrs[a:b], _LIKE32) for a, b in bounds], threads)
