"""Tests of migrate's compiled CPU kernels (numba) against MXNet 1.9.1's operators, bit for bit."""
import multiprocessing
import threading

import mxnet as mx
import numpy as np
import pytest
import torch

from migrate.optim import _kernels
from migrate.optim.adagrad_family import Ftrl

FTRL = {"lr": 0.1, "wd": 0.01, "lamda1": 0.01, "beta": 1.0, "rescale_grad": 0.5}
# One tensor under the parallel threshold, one over it (the parallel launch).
SIZES = [1000, _kernels.PARALLEL_MIN + 4321]


def _ftrl_arrays(size, dtype, seed):
    """Seeded (weight, grad, z, n) numpy arrays for one FTRL update."""
    rng = np.random.RandomState(seed)
    weight, grad = rng.randn(size).astype(dtype), rng.randn(size).astype(dtype)
    return weight, grad, (0.05 * rng.randn(size)).astype(dtype), np.abs(rng.randn(size)).astype(dtype)


def _mx_ftrl(arrays, clip):
    """MXNet's ftrl_update on copies of ``arrays``: the new (weight, z, n) as numpy arrays."""
    weight, grad, z, n = (mx.nd.array(a, dtype=a.dtype) for a in arrays)
    extra = {"clip_gradient": clip} if clip >= 0 else {}
    mx.nd.ftrl_update(weight, grad, z, n, out=weight, **FTRL, **extra)
    return [a.asnumpy() for a in (weight, z, n)]


def _assert_same(got, expected, what):
    """``got`` equals ``expected`` bit for bit; the message names ``what`` and the largest difference."""
    for name, a, b in zip(("weight", "z", "n"), got, expected):
        worst = float(np.abs(a - b).max())
        assert np.array_equal(a, b), f"{what}: {name} differs from MXNet by up to {worst:.3g} (expected exactly 0)"


class TestFtrlUpdate:
    @pytest.mark.parametrize("size", SIZES)
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    @pytest.mark.parametrize("clip", [-1.0, 0.3])
    def test_equals_mxnet_ftrl_update(self, size, dtype, clip):
        """One compiled pass gives MXNet's ftrl_update weight, z and n exactly (atol 0), clipped or not."""
        arrays = _ftrl_arrays(size, dtype, seed=size)
        expected = _mx_ftrl(arrays, clip)
        weight, grad, z, n = (a.copy() for a in arrays)
        _kernels.ftrl_update(weight, grad, z, n, **FTRL, clip_gradient=clip)
        _assert_same((weight, z, n), expected, f"ftrl {dtype} size {size} clip {clip}")
        assert np.abs(weight - arrays[0]).max() > 0.1, "the update must move the weights"

    @pytest.mark.parametrize("dtype, atol", [("float32", 1e-6), ("float64", 1e-14)])
    def test_optimizer_compiled_and_torch_paths_match_mxnet(self, dtype, atol):
        """Ftrl: contiguous params take the compiled pass (exact), a non-contiguous one the torch path (within atol)."""
        rng = np.random.RandomState(7)
        start = rng.randn(40, 30).astype(dtype)
        weight, z, n = mx.nd.array(start, dtype=dtype), mx.nd.zeros((40, 30), dtype=dtype), None
        n = mx.nd.zeros((40, 30), dtype=dtype)
        compiled = torch.nn.Parameter(torch.from_numpy(start.copy()))
        strided = torch.nn.Parameter(torch.from_numpy(start.T.copy()).t())
        assert compiled.is_contiguous() and not strided.is_contiguous()
        options = {"lr": 0.1, "weight_decay": 0.01, "rescale_grad": 0.5, "clip_gradient": 0.3}
        optimizers = [Ftrl([p], **options) for p in (compiled, strided)]
        for _ in range(5):
            grad = rng.randn(40, 30).astype(dtype)
            mx.nd.ftrl_update(weight, mx.nd.array(grad, dtype=dtype), z, n, out=weight, **FTRL, clip_gradient=0.3)
            for param, optimizer in zip((compiled, strided), optimizers):
                param.grad = torch.from_numpy(grad.copy())
                optimizer.step()
        expected = weight.asnumpy()
        exact = float(np.abs(compiled.detach().numpy() - expected).max())
        near = float(np.abs(strided.detach().numpy() - expected).max())
        assert exact == 0.0, f"compiled path ({dtype}) differs from MXNet by {exact:.3g}"
        assert near <= atol, f"torch path ({dtype}) differs from MXNet by {near:.3g} > {atol}"
        assert np.abs(expected - start).max() > 0.1

    def test_concurrent_threads_and_fork(self):
        """Two threads launching the parallel kernel at once, then a forked child, all give MXNet's result."""
        arrays = _ftrl_arrays(SIZES[1], "float32", seed=11)
        expected = _mx_ftrl(arrays, 0.3)
        results = [None, None]

        def work(slot):
            weight, grad, z, n = (a.copy() for a in arrays)
            _kernels.ftrl_update(weight, grad, z, n, **FTRL, clip_gradient=0.3)
            results[slot] = (weight, z, n)

        threads = [threading.Thread(target=work, args=(slot,)) for slot in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        for slot, got in enumerate(results):
            _assert_same(got, expected, f"thread {slot}")
        child = multiprocessing.get_context("fork").Process(target=_child_ftrl, args=(arrays, expected))
        child.start()
        child.join(timeout=60)
        assert child.exitcode == 0, f"the forked child's kernel failed or hung (exit code {child.exitcode})"


def _child_ftrl(arrays, expected):
    """In a forked child: run the parallel kernel and exit 0 if it gives ``expected`` exactly, else 3."""
    weight, grad, z, n = (a.copy() for a in arrays)
    _kernels.ftrl_update(weight, grad, z, n, **FTRL, clip_gradient=0.3)
    raise SystemExit(0 if all(np.array_equal(a, b) for a, b in zip((weight, z, n), expected)) else 3)


class TestSumSq:
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_equals_mxnet_multi_sum_sq(self, dtype):
        """The float accumulator replays MXNet's multi_sum_sq exactly, where torch's sum does not."""
        rng = np.random.RandomState(2)
        arrays = [(3 * rng.randn(size)).astype(dtype) for size in (7, 1000, 30001)]
        expected = mx.nd.multi_sum_sq(*[mx.nd.array(a, dtype=dtype) for a in arrays], num_arrays=3).asnumpy()
        got = np.array([_kernels.sum_sq(a) for a in arrays])
        assert np.array_equal(got, expected), f"{dtype}: {got} != MXNet's {expected}"
        torch_sum = np.float32(torch.from_numpy(arrays[-1]).square().sum().item())
        assert torch_sum != expected[-1], "torch's pairwise sum should differ from the sequential float sum"

    def test_float32_values_in_float64(self):
        """square_in_float: float32 values held in float64 sum as MXNet sums its float32 buffer."""
        values = (3 * np.random.RandomState(4).randn(30001)).astype("float32")
        expected = mx.nd.multi_sum_sq(mx.nd.array(values), num_arrays=1).asnumpy()[0]
        assert _kernels.sum_sq(values.astype("float64"), square_in_float=True) == expected

    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_many_tensors_interleaved(self, dtype):
        """sum_sqs over 11 tensors (4 interleaved per thread, gaps filled) equals MXNet's multi_sum_sq exactly."""
        rng = np.random.RandomState(6)
        arrays = [(3 * rng.randn(size)).astype(dtype) for size in (1, 30001, 7, 4096, 0, 999, 20000, 5, 64, 70000, 3)]
        expected = mx.nd.multi_sum_sq(*[mx.nd.array(a, dtype=dtype) for a in arrays], num_arrays=len(arrays))
        got = _kernels.sum_sqs(arrays)
        assert np.array_equal(got, expected.asnumpy()), f"{dtype}: {got} != MXNet's {expected.asnumpy()}"
