"""``mxupdate.kernels`` against MXNet 1.9.1's operators, bit for bit (sgd, nag and adam: ``tests/gluon_lr/fused``).

Each case updates three tensors (their own lr and wd; NaN and inf among the gradients) in one table launch, and the
same tensors one MXNet operator call each; every array must come out equal (NaN where MXNet has NaN).
"""
import mxnet as mx
import numpy as np
import pytest

from migrate.optim.dmlc_float import mx_float32
from mxupdate import kernels

SIZES = (1000, 2503, 7)
LRS, WDS = (0.05, 0.3, 2.0201059743896793e-05), (1e-3, 0.0, 0.02)  # the last lr: dmlc's parser rounds it up


def _arrays(dtype, states, seed, positive=()):
    """[weight, grad, *states] numpy arrays per tensor of SIZES (grad with a NaN and an inf; states in ``positive``
    are squares, so >= 0)."""
    rng = np.random.RandomState(seed)
    out = []
    for size in SIZES:
        grad = rng.randn(size)
        grad[:2] = (np.nan, np.inf) if size > 2 else grad[:2]
        row = [rng.randn(size), grad] + [np.abs(rng.randn(size)) if k in positive else 0.1 * rng.randn(size)
                                        for k in range(states)]
        out.append([a.astype(dtype) for a in row])
    return out


def _run(name, rows, lrs, wds, consts, use_clip):
    """``kernels.<name>`` on a table of ``rows`` (one segment per tensor), values as MXNet parses them."""
    dtype = rows[0][0].dtype
    addresses = np.array([[a.ctypes.data for a in row] for row in rows], dtype=np.int64)
    lengths = np.array([row[0].size for row in rows], dtype=np.int64)
    as_kernel = lambda values: np.array([mx_float32(v) for v in values], dtype=np.float32).astype(dtype)
    getattr(kernels, name)(addresses, lengths, as_kernel(lrs), as_kernel(wds), np.array(consts, dtype=dtype), use_clip)


def _mxnet(op, rows, lrs, wds, states, **kwargs):
    """MXNet's ``op`` on each tensor of ``rows`` (weight, grad, *states), in place; the new arrays."""
    out = []
    for row, lr, wd in zip(rows, lrs, wds):
        arrays = [mx.nd.array(a, dtype=a.dtype) for a in row]
        op(*arrays, out=arrays[0], lr=lr, wd=wd, **kwargs)
        out.append([a.asnumpy() for a in arrays])
    return out


def _assert_same(got, expected, what):
    for t, (have_row, want_row) in enumerate(zip(got, expected)):
        for k, (have, want) in enumerate(zip(have_row, want_row)):
            same = (have == want) | (np.isnan(have) & np.isnan(want))
            with np.errstate(invalid="ignore"):
                worst = np.nanmax(np.abs(have - want)[~same], initial=0.0)
            assert same.all(), f"{what}: tensor {t} array {k}: {(~same).sum()} differ, largest by {worst:.3g}"


def _consts(dtype, *values):
    """Values as MXNet's float parameters, in ``dtype`` (a value given as a (a, b) pair is ``f(a) - f(b)``, computed
    in ``dtype`` as the kernels do)."""
    kind = np.dtype(dtype).type
    f = lambda v: kind(mx_float32(v)) if v >= 0 else kind(v)
    return [f(v[0]) - f(v[1]) if isinstance(v, tuple) else f(v) for v in values]


DTYPES = ["float32", "float64"]
CLIPS = [None, 0.3]


@pytest.mark.parametrize("clip", CLIPS, ids=["noclip", "clip"])
@pytest.mark.parametrize("dtype", DTYPES)
class TestAgainstMXNet:
    """One launch of each kernel equals MXNet's operator (max difference 0, NaN where MXNet's is NaN)."""

    @pytest.mark.parametrize("clip_weights", [None, 0.5])
    def test_rmsprop(self, dtype, clip, clip_weights):
        """rmsprop_update."""
        rows = _arrays(dtype, 1, seed=1, positive=(0,))
        kwargs = {"gamma1": 0.95, "epsilon": 1e-8, "rescale_grad": 0.5, "clip_gradient": clip or -1.0,
                  "clip_weights": clip_weights or -1.0}
        expected = _mxnet(mx.nd.rmsprop_update, rows, LRS, WDS, 1, **kwargs)
        _run("rmsprop", rows, LRS, WDS, _consts(dtype, 0.5, clip or -1.0, 0.95, (1, 0.95), 1e-8,
                                                 clip_weights or -1.0), clip is not None)
        _assert_same(rows, expected, f"rmsprop {dtype}")

    def test_rmspropalex(self, dtype, clip):
        """rmspropalex_update (centered)."""
        rows = _arrays(dtype, 3, seed=2, positive=(0,))
        kwargs = {"gamma1": 0.95, "gamma2": 0.9, "epsilon": 1e-8, "rescale_grad": 0.5, "clip_gradient": clip or -1.0,
                  "clip_weights": 0.5}
        expected = _mxnet(mx.nd.rmspropalex_update, rows, LRS, WDS, 3, **kwargs)
        _run("rmspropalex", rows, LRS, WDS, _consts(dtype, 0.5, clip or -1.0, 0.95, 0.9, (1, 0.95), 1e-8, 0.5),
             clip is not None)
        _assert_same(rows, expected, f"rmspropalex {dtype}")

    def test_ftrl(self, dtype, clip):
        """ftrl_update."""
        rows = _arrays(dtype, 2, seed=3, positive=(1,))
        kwargs = {"lamda1": 0.01, "beta": 1.0, "rescale_grad": 0.5, "clip_gradient": clip or -1.0}
        expected = _mxnet(mx.nd.ftrl_update, rows, LRS, WDS, 2, **kwargs)
        _run("ftrl", rows, LRS, WDS, _consts(dtype, 0.5, clip or -1.0, 0.01, 1.0, 0.0), clip is not None)
        _assert_same(rows, expected, f"ftrl {dtype}")

    @pytest.mark.parametrize("wd_lh", [0.0, 0.01])
    def test_signum(self, dtype, clip, wd_lh):
        """signum_update (weight decay inside the momentum, wd_lh outside)."""
        rows = _arrays(dtype, 1, seed=4)
        kwargs = {"momentum": 0.9, "rescale_grad": 0.5, "clip_gradient": clip or -1.0, "wd_lh": wd_lh}
        expected = _mxnet(mx.nd.signum_update, rows, LRS, WDS, 1, **kwargs)
        _run("signum", rows, LRS, WDS, _consts(dtype, 0.5, clip or -1.0, 0.9, (1, 0.9), wd_lh, 1, 0),
             clip is not None)
        _assert_same(rows, expected, f"signum {dtype}")

    def test_signsgd(self, dtype, clip):
        """signsgd_update (Signum without momentum: the raw gradient's sign; clip and rescale play no part)."""
        rows = _arrays(dtype, 0, seed=5)
        expected = _mxnet(mx.nd.signsgd_update, rows, LRS, WDS, 0, rescale_grad=0.5, clip_gradient=clip or -1.0)
        _run("signsgd", rows, LRS, WDS, _consts(dtype, 1, 0), False)
        _assert_same(rows, expected, f"signsgd {dtype}")


def _finite_arrays(dtype, states, seed, positive=()):
    rows = _arrays(dtype, states, seed, positive)
    for row in rows:
        row[1][:2] = (0.25, -3.0)
    return rows


def _sum_sq(arrays):
    """``kernels.sum_sq`` of each array (MXNet's multi_sum_sq), one lane group per 4 arrays."""
    addresses = np.array([a.ctypes.data for a in arrays] + [0], dtype=np.int64)
    lengths = np.array([a.size for a in arrays] + [0], dtype=np.int64)
    filler = len(arrays)
    lanes = np.array([[i if i < len(arrays) else filler for i in range(s, s + 4)]
                      for s in range(0, len(arrays), 4)], dtype=np.int64)
    out = np.zeros(len(arrays) + 1, dtype=np.float32)
    kernels.sum_sq(addresses, lengths, lanes, out, np.empty(0, dtype=arrays[0].dtype))
    return out[:-1]


@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("clip", CLIPS, ids=["noclip", "clip"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_lamb_equals_multi_lamb_update(dtype, clip, bias_correction):
    """lamb_direction, sum_sq of the weights and of the float32 direction, the trust ratio in float, lamb_apply:
    MXNet's multi_lamb_update (step count 3 and 7, lower and upper bounds) bit for bit."""
    rows = _finite_arrays(dtype, 2, seed=6, positive=(1,))
    steps, kind = (3, 7, 3), np.dtype(dtype).type
    options = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "rescale_grad": 0.5, "lower_bound": 0.1,
               "upper_bound": 30.0, "bias_correction": bias_correction, "clip_gradient": clip or -1.0}
    arrays = [[mx.nd.array(a, dtype=a.dtype) for a in row] for row in rows]
    mx.nd.contrib.multi_lamb_update(*(list(column) for column in zip(*arrays)), step_count=list(steps),
                                    lrs=list(LRS), wds=list(WDS), out=[row[0] for row in arrays], **options)
    expected = [[a.asnumpy() for a in row] for row in arrays]
    directions = [np.empty(row[0].size, dtype=np.float32) for row in rows]
    table = np.array([[a.ctypes.data for a in row] + [d.ctypes.data] for row, d in zip(rows, directions)])
    lengths = np.array([row[0].size for row in rows], dtype=np.int64)
    corrections = np.array([[kind(1) - np.power(kind(mx_float32(0.9)), kind(t)),
                             kind(1) - np.power(kind(mx_float32(0.999)), kind(t))] for t in steps], dtype=dtype)
    consts = np.array(_consts(dtype, 0.5, clip or -1.0, 0.9, 0.999, (1, 0.9), (1, 0.999), 1e-6), dtype=dtype)
    kernels.lamb_direction(table, lengths, np.array(WDS, dtype=np.float32).astype(dtype), corrections, consts,
                           clip is not None, bias_correction, True, np.full(3, -1, dtype=np.int64), np.zeros((1, 2)),
                           np.empty(0, dtype=np.float32))
    r1 = np.sqrt(_sum_sq([row[0] for row in rows])).clip(np.float32(0.1), np.float32(30.0))
    r2 = np.sqrt(_sum_sq(directions))
    lrs = [kind(np.float32(lr)) * kind(a / b) for lr, a, b in zip(LRS, r1, r2)]
    kernels.lamb_apply(table[:, [0, 4]].copy(), lengths, np.array(lrs, dtype=dtype), np.empty(0, dtype=np.float32))
    _assert_same(rows, expected, f"lamb {dtype}")
    assert not np.array_equal(rows[0][0], _finite_arrays(dtype, 2, seed=6, positive=(1,))[0][0])


def _block_sums(rows, cut):
    """lamb_direction's (weight, direction) sums of squares of each of ``rows`` (bias correction off), the first
    tensor cut into two segments at ``cut`` (0: whole); the directions."""
    directions = [np.empty(row[0].size, dtype=np.float32) for row in rows]
    blocks_of = [-(-row[0].size // kernels.BLOCK) for row in rows]
    first = np.cumsum([0] + blocks_of[:-1])
    segments = ([(0, 0, cut), (0, cut, rows[0][0].size)] if cut else [(0, 0, rows[0][0].size)]) + \
        [(t, 0, rows[t][0].size) for t in range(1, len(rows))]
    size, dtype = rows[0][0].dtype.itemsize, rows[0][0].dtype
    table = np.array([[a.ctypes.data + start * size for a in rows[t]] + [directions[t].ctypes.data + start * 4]
                      for t, start, _ in segments], dtype=np.int64)
    lengths = np.array([stop - start for _, start, stop in segments], dtype=np.int64)
    blocks = np.array([first[t] + start // kernels.BLOCK for t, start, _ in segments], dtype=np.int64)
    sums = np.zeros((sum(blocks_of), 2))
    kernels.lamb_direction(table, lengths, np.zeros(len(segments), dtype), np.ones((len(segments), 2), dtype),
                           np.array([1, -1, 0.9, 0.999, 0.1, 0.001, 1e-6], dtype=dtype), False, False, True, blocks,
                           sums,
                           np.empty(0, dtype=np.float32))
    return [sums[first[t]:first[t] + blocks_of[t]].sum(axis=0) for t in range(len(rows))], directions


@pytest.mark.parametrize("dtype", DTYPES)
def test_lamb_block_sums(dtype):
    """lamb_direction's float64 sums of squares (blocks of BLOCK elements, 8 lanes each) are the sums of the weight's
    and the float32 direction's squares within 2e-12 relative (n * 2**-53 for the 12293 additions of the largest
    tensor, either order), and bit for bit the same whether a tensor is cut into segments (at a block boundary)."""
    big = [[np.abs(np.random.RandomState(8).randn(3 * kernels.BLOCK + 5)).astype(dtype) for _ in range(4)]]
    rows = big + _finite_arrays(dtype, 2, seed=7, positive=(1,))
    again = [[a.copy() for a in row] for row in rows]
    sums, directions = _block_sums(rows, kernels.BLOCK)
    assert all(np.array_equal(a, b) for a, b in zip(sums, _block_sums(again, 0)[0])), "the cut changed a sum"
    for t, row in enumerate(rows):
        want = (np.sum(row[0].astype(np.float64) ** 2), np.sum(directions[t].astype(np.float64) ** 2))
        assert np.allclose(sums[t], want, rtol=2e-12, atol=0), (t, (sums[t] - want) / want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_sq_equals_multi_sum_sq(dtype):
    """sum_sq over 11 tensors (4 side by side, gaps filled by the empty filler) equals MXNet's multi_sum_sq exactly,
    where numpy's pairwise sum does not."""
    rng = np.random.RandomState(6)
    arrays = [(3 * rng.randn(size)).astype(dtype) for size in (1, 30001, 7, 4096, 0, 999, 20000, 5, 64, 70000, 3)]
    expected = mx.nd.multi_sum_sq(*[mx.nd.array(a, dtype=dtype) for a in arrays], num_arrays=len(arrays)).asnumpy()
    got = _sum_sq(arrays)
    assert np.array_equal(got, expected), f"{dtype}: {got} != MXNet's {expected}"
    assert np.float32(np.sum(arrays[-2].astype(np.float64) ** 2)) != expected[-2]


@pytest.mark.parametrize("bias_correction", [True, False])
def test_lamb_fast_direction_within_float32_rounding(bias_correction):
    """lamb_direction with exact off (float32 arithmetic, the corrections folded into two constants) gives MXNet's
    float32 direction within 8 units in the last place of its terms (2**-20 of |m_hat/(sqrt(v_hat) + eps)| +
    |wd*w|; relative to the direction itself where the terms cancel): the float32 roundings of the quotient, the
    folded constants and the sum against MXNet's double quotient rounded once; the moments are the same."""
    rows = _finite_arrays("float32", 2, seed=9, positive=(1,))
    copies = [[a.copy() for a in row] for row in rows]
    directions = []
    for exact, arrays in ((True, rows), (False, copies)):
        outs = [np.empty(row[0].size, dtype=np.float32) for row in arrays]
        table = np.array([[a.ctypes.data for a in row] + [d.ctypes.data] for row, d in zip(arrays, outs)])
        kernels.lamb_direction(table, np.array([row[0].size for row in arrays], dtype=np.int64),
                               np.array(WDS, dtype=np.float32), np.array([[0.271, 0.00299]] * 3, dtype=np.float32),
                               np.array(_consts("float32", 0.5, -1.0, 0.9, 0.999, (1, 0.9), (1, 0.999), 1e-6),
                                        dtype=np.float32), False, bias_correction, exact,
                               np.full(3, -1, dtype=np.int64), np.zeros((1, 2)), np.empty(0, dtype=np.float32))
        directions.append(outs)
    for row, copy in zip(rows, copies):
        assert np.array_equal(row[2], copy[2]) and np.array_equal(row[3], copy[3])
    for row, wd, exact, fast in zip(rows, WDS, *directions):
        terms = np.abs(exact.astype(np.float64)) + np.abs(np.float32(wd) * row[0].astype(np.float64))
        relative = np.abs(fast.astype(np.float64) - exact) / terms.clip(1e-30)
        assert relative.max() <= 2.0 ** -20, relative.max()
