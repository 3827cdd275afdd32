"""MXNet 1.9.1's per-element optimizer arithmetic, shared by LrTrainer's fast step (``gluon_lr._fused``) and migrate's
exact torch optimizers (``migrate.optim``); it imports neither MXNet nor torch.

- ``kernels``: MXNet's update kernels (sgd, nag, adam, rmsprop, ftrl, signum, lamb) and ``multi_sum_sq``, compiled
  with numba, each walking a table of segments (the addresses of a weight, its gradient and its states, a length,
  an lr and a wd per row); imported on first use (``load_kernels``), so ``import mxupdate`` does not import numba.
- ``threads``: the one threading choice: a table cut into shares (``Shares``), each share one GIL-free kernel call,
  taken by a pool of Python threads and the calling thread (``run_shares``); no numba threading layer.

Both callers hand the kernels the same values: hyperparameters as MXNet's C ``float`` parameters hold them, in the
data's dtype. ``gluon_lr._fused`` fills the tables from MXNet's NDArrays, ``migrate.optim.compiled`` from torch CPU
tensors.

Examples:
    >>> kernels = load_kernels()
    >>> cut = Shares(lengths, columns=3, dtype=np.dtype("float32"), parts=16)  # doctest: +SKIP
    >>> cut.fill(addresses, lrs, wds)  # doctest: +SKIP
    >>> run_shares(kernels.sgd_mom, [(*view, consts, False) for view in cut.views], threads=2)  # doctest: +SKIP
"""
import importlib

from mxupdate.threads import MIN_SPLIT, SHARES_PER_THREAD, Shares, lanes, pool, run_shares, split_segments, \
    thread_count

__all__ = ["MIN_SPLIT", "SHARES_PER_THREAD", "Shares", "lanes", "load_kernels", "pool", "run_shares",
           "split_segments", "thread_count"]


def load_kernels():
    """The ``mxupdate.kernels`` module (imports numba, loads or compiles the kernels from numba's cache).

    Raises:
        ImportError: numba is not installed (callers fall back to their other implementations).
    """
    return importlib.import_module("mxupdate.kernels")
