"""``migrate.optim.compiled``: MXNet's compiled kernels (``mxupdate.kernels``) on torch CPU tensors, against MXNet
1.9.1's operators: the rows they take and leave, tables cut across threads, threads launching at once, fork."""
import multiprocessing
import threading

import mxnet as mx
import numpy as np
import pytest
import torch

from migrate.optim import compiled
from migrate.optim.adagrad_family import Ftrl
from migrate.optim.base import kernel_float

FTRL = {"lr": 0.1, "wd": 0.01, "lamda1": 0.01, "beta": 1.0, "rescale_grad": 0.5, "clip_gradient": 0.3}
#: Tensors of a table: one over mxupdate's MIN_SPLIT in all, so the table is cut into shares for the threads.
SIZES = (1000, (1 << 16) + 4321, 7)


def _ftrl_rows(dtype, seed):
    """Seeded (weight, grad, z, n) torch tensors of each of SIZES."""
    rng = np.random.RandomState(seed)
    return [[torch.from_numpy(a.astype(dtype)) for a in (rng.randn(size), rng.randn(size), 0.05 * rng.randn(size),
                                                          np.abs(rng.randn(size)))] for size in SIZES]


def _mx_ftrl(rows):
    """MXNet's ftrl_update on copies of each row: the new (weight, z, n) as numpy arrays."""
    out = []
    for row in rows:
        weight, grad, z, n = (mx.nd.array(t.numpy(), dtype=t.numpy().dtype) for t in row)
        mx.nd.ftrl_update(weight, grad, z, n, out=weight, **FTRL)
        out.append([a.asnumpy() for a in (weight, z, n)])
    return out


def _compiled_ftrl(rows):
    """``compiled.update`` of FTRL on ``rows`` (in place); the positions it left."""
    hyper = [kernel_float(FTRL[key]) for key in ("rescale_grad", "clip_gradient", "lamda1", "beta")]
    return compiled.update("ftrl", rows, [kernel_float(FTRL["lr"])] * len(rows), [kernel_float(FTRL["wd"])] * len(rows),
                           lambda kind: [kind(v) for v in hyper] + [kind(0)], True)


def _assert_rows_equal(rows, expected, what):
    for t, (row, want) in enumerate(zip(rows, expected)):
        for name, have, value in zip(("weight", "z", "n"), (row[0], row[2], row[3]), want):
            worst = float(np.abs(have.numpy() - value).max())
            assert np.array_equal(have.numpy(), value), f"{what}: tensor {t} {name} differs by up to {worst:.3g}"


class TestUpdate:
    """compiled.update(): one launch per dtype for the rows the kernels can take."""

    @pytest.mark.parametrize("threads", [1, 2, 3])
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_table_equals_mxnet_on_any_thread_count(self, dtype, threads):
        """Three tensors (73k elements) cut into shares for 1, 2 or 3 threads: MXNet's ftrl_update exactly."""
        rows = _ftrl_rows(dtype, seed=1)
        expected = _mx_ftrl(rows)
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            assert _compiled_ftrl(rows) == []
        finally:
            torch.set_num_threads(before)
        _assert_rows_equal(rows, expected, f"{dtype} on {threads} threads")

    def test_rows_it_cannot_take_are_left(self):
        """A strided, a float16 and a mixed-dtype row are left (their positions returned, untouched); the rest are
        updated."""
        rows = _ftrl_rows("float32", seed=2)
        strided = [t.clone().reshape(1, -1).expand(2, -1)[:, :500].t() for t in rows[0]]
        half = [t.half() for t in rows[2]]
        mixed = [rows[1][0].double()] + rows[1][1:]
        originals = [[t.clone() for t in row] for row in (strided, half, mixed)]
        table = [strided, rows[0], half, mixed]
        assert _compiled_ftrl(table) == [0, 2, 3]
        for row, original in zip((strided, half, mixed), originals):
            assert all(torch.equal(a, b) for a, b in zip(row, original))
        assert not torch.equal(rows[0][0], _ftrl_rows("float32", seed=2)[0][0])

    @pytest.mark.parametrize("dtype, atol", [("float32", 1e-6), ("float64", 1e-14)])
    def test_optimizer_compiled_and_torch_paths_match_mxnet(self, dtype, atol):
        """Ftrl: a contiguous parameter takes the compiled pass (exact), a non-contiguous one the torch path (within
        atol) over 5 steps."""
        rng = np.random.RandomState(7)
        start = rng.randn(40, 30).astype(dtype)
        weight, z, n = (mx.nd.array(start, dtype=dtype), mx.nd.zeros((40, 30), dtype=dtype),
                        mx.nd.zeros((40, 30), dtype=dtype))
        contiguous = torch.nn.Parameter(torch.from_numpy(start.copy()))
        strided = torch.nn.Parameter(torch.from_numpy(start.T.copy()).t())
        assert contiguous.is_contiguous() and not strided.is_contiguous()
        options = {"lr": 0.1, "weight_decay": 0.01, "rescale_grad": 0.5, "clip_gradient": 0.3}
        optimizers = [Ftrl([p], **options) for p in (contiguous, strided)]
        for _ in range(5):
            grad = rng.randn(40, 30).astype(dtype)
            mx.nd.ftrl_update(weight, mx.nd.array(grad, dtype=dtype), z, n, out=weight, **FTRL)
            for param, optimizer in zip((contiguous, strided), optimizers):
                param.grad = torch.from_numpy(grad.copy())
                optimizer.step()
        expected = weight.asnumpy()
        exact = float(np.abs(contiguous.detach().numpy() - expected).max())
        near = float(np.abs(strided.detach().numpy() - expected).max())
        assert exact == 0.0, f"compiled path ({dtype}) differs from MXNet by {exact:.3g}"
        assert near <= atol, f"torch path ({dtype}) differs from MXNet by {near:.3g} > {atol}"
        assert np.abs(expected - start).max() > 0.1


def test_concurrent_threads_and_fork():
    """Two threads updating their own tables at once (each cut for 2 threads), then a forked child: all give MXNet's
    result (no lock, no numba threading layer; the child makes its own pool)."""
    expected = _mx_ftrl(_ftrl_rows("float32", seed=11))
    results = [None, None]

    def work(slot):
        rows = _ftrl_rows("float32", seed=11)
        _compiled_ftrl(rows)
        results[slot] = rows

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for slot, rows in enumerate(results):
        _assert_rows_equal(rows, expected, f"thread {slot}")
    child = multiprocessing.get_context("fork").Process(target=_child_ftrl, args=(expected,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0, f"the forked child's update failed or hung (exit code {child.exitcode})"


def _child_ftrl(expected):
    """In a forked child: update the table (cut into shares) and exit 0 if it gives ``expected`` exactly, else 3."""
    rows = _ftrl_rows("float32", seed=11)
    _compiled_ftrl(rows)
    same = all(np.array_equal(t.numpy(), e) for row, want in zip(rows, expected)
               for t, e in zip((row[0], row[2], row[3]), want))
    raise SystemExit(0 if same else 3)
