"""``mxupdate.kernels`` against MXNet 1.9.1's operators, bit for bit (sgd, nag and adam: ``tests/gluon_lr/fused``).

Each case updates three tensors (their own lr and wd; NaN and inf among the gradients) in one table launch, and the
same tensors one MXNet operator call each; every array must come out equal (NaN where MXNet has NaN).
"""
import mxnet as mx
import numpy as np
import pytest

from migrate.optim.dmlc_float import mx_float32, mx_float64
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


def _run(name, rows, lrs, wds, consts, use_clip, extras=None, parse=mx_float32):
    """``kernels.<name>`` on a table of ``rows`` (one segment per tensor), lrs and wds as ``parse`` gives them
    (``mx_float32``: MXNet's C++ kernels' float parameters; ``_python``: the doubles MXNet's python optimizers hand
    to NDArray operations; ``float``: values already in the data's dtype); ``extras``: the per-row scalars of the
    kernels that take them (in the data's dtype)."""
    dtype = rows[0][0].dtype
    addresses = np.array([[a.ctypes.data for a in row] for row in rows], dtype=np.int64)
    lengths = np.array([row[0].size for row in rows], dtype=np.int64)
    as_kernel = lambda values: np.array([np.dtype(dtype).type(parse(v)) for v in values], dtype=dtype)
    table = [addresses, lengths, as_kernel(lrs), as_kernel(wds)]
    if extras is not None:
        table.append(np.array(extras, dtype=dtype).reshape(len(rows), -1))
    getattr(kernels, name)(*table, np.array(consts, dtype=dtype), use_clip)


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
COUNTS = (3, 1, 12)  # update counts of the tensors of SIZES (python optimizers)


def _mx_optimizer(name, rows, lrs, wds, **kwargs):
    """MXNet's python optimizer ``name`` (``mx.optimizer.create``) updating each tensor of ``rows`` (weight, grad,
    *states) at its update count of COUNTS; the new [weight, *states] per tensor (MXNet's AdaDelta scales the
    gradient in place: gradients are left out)."""
    out = []
    for index, (row, lr, wd, count) in enumerate(zip(rows, lrs, wds, COUNTS)):
        optimizer = mx.optimizer.create(name, learning_rate=lr, wd=wd, **kwargs)
        optimizer._index_update_count[index] = count - 1  # the reference harness sets MXNet's count: the next is count
        arrays = [mx.nd.array(a, dtype=a.dtype) for a in row]
        optimizer.update(index, arrays[0], arrays[1], tuple(arrays[2:]) if len(arrays) > 3 else arrays[2])
        out.append([a.asnumpy() for a in arrays[:1] + arrays[2:]])
    return out


def _python(value):
    """``value`` as an NDArray's arithmetic with a python number takes it (dmlc's double parser), in float64."""
    return mx_float64(value)


def _without_grads(rows):
    return [row[:1] + row[2:] for row in rows]


def _python_clip(dtype, clip):
    """(lower, upper) of MXNet's ``clip(grad, -clip, clip)`` operator (float parameters, dmlc's parser)."""
    kind = np.dtype(dtype).type
    return (-kind(mx_float32(clip)), kind(mx_float32(clip))) if clip is not None else (kind(0), kind(0))


@pytest.mark.parametrize("clip", CLIPS, ids=["noclip", "clip"])
@pytest.mark.parametrize("dtype", DTYPES)
class TestAgainstMXNetPython:
    """Each kernel of an optimizer MXNet writes in python (or of ftml_update) equals MXNet's update, one NDArray
    operation after another, bit for bit (NaN where MXNet's is NaN); the python doubles rounded to the data's dtype
    as MXNet's scalar operators take them."""

    def test_adagrad(self, dtype, clip):
        """AdaGrad.update (dense)."""
        kind = lambda value: np.dtype(dtype).type(mx_float64(value))
        rows = _arrays(dtype, 1, seed=11, positive=(0,))
        expected = _mx_optimizer("adagrad", rows, LRS, WDS, rescale_grad=0.5, clip_gradient=clip, eps=1e-7)
        _run("adagrad", rows, LRS, WDS, [kind(0.5), *_python_clip(dtype, clip), kind(1e-7)], clip is not None,
             parse=_python)
        _assert_same(_without_grads(rows), expected, f"adagrad {dtype}")

    def test_adadelta(self, dtype, clip):
        """AdaDelta.update (lr unused)."""
        kind = lambda value: np.dtype(dtype).type(mx_float64(value))
        rows = _arrays(dtype, 2, seed=12, positive=(0, 1))
        expected = _mx_optimizer("adadelta", rows, LRS, WDS, rescale_grad=0.5, clip_gradient=clip, rho=0.9,
                                 epsilon=1e-5)
        _run("adadelta", rows, LRS, WDS, [kind(0.5), *_python_clip(dtype, clip), kind(0.9), kind(1.0 - 0.9),
                                          kind(1e-5)], clip is not None, parse=_python)
        _assert_same(_without_grads(rows), expected, f"adadelta {dtype}")

    def test_adamax(self, dtype, clip):
        """Adamax.update (the lr divided by 1 - b1^t in python), a NaN in the infinity norm's state."""
        kind = lambda value: np.dtype(dtype).type(mx_float64(value))
        rows = _arrays(dtype, 2, seed=13, positive=(1,))
        rows[0][3][5] = np.nan
        expected = _mx_optimizer("adamax", rows, LRS, WDS, rescale_grad=0.5, clip_gradient=clip, beta1=0.9,
                                 beta2=0.999)
        lrs = [lr / (1.0 - 0.9 ** t) for lr, t in zip(LRS, COUNTS)]
        _run("adamax", rows, lrs, WDS, [kind(0.5), *_python_clip(dtype, clip), kind(0.9), kind(1.0 - 0.9),
                                        kind(0.999)], clip is not None, parse=_python)
        _assert_same(_without_grads(rows), expected, f"adamax {dtype}")

    def test_nadam(self, dtype, clip):
        """Nadam.update from a momentum schedule of 0.8 (each tensor its own optimizer)."""
        kind = lambda value: np.dtype(dtype).type(mx_float64(value))
        rows = _arrays(dtype, 2, seed=14, positive=(1,))
        expected = []
        for index in range(len(rows)):  # one optimizer per tensor, each from m_schedule 0.8
            optimizer = mx.optimizer.create("nadam", learning_rate=LRS[index], wd=WDS[index], rescale_grad=0.5,
                                            clip_gradient=clip, beta1=0.9, beta2=0.999, epsilon=1e-8,
                                            schedule_decay=0.004)
            optimizer.m_schedule = 0.8
            optimizer._index_update_count[index] = COUNTS[index] - 1
            arrays = [mx.nd.array(a, dtype=a.dtype) for a in rows[index]]
            optimizer.update(index, arrays[0], arrays[1], tuple(arrays[2:]))
            expected.append([a.asnumpy() for a in arrays[:1] + arrays[2:]])
        extras = []
        for t in COUNTS:
            momentum_t, momentum_t_1 = (0.9 * (1.0 - 0.5 * 0.96 ** (u * 0.004)) for u in (t, t + 1))
            schedule = 0.8 * momentum_t
            extras.append([mx_float64(v) for v in (1.0 - schedule, 1.0 - schedule * momentum_t_1, 1.0 - 0.999 ** t,
                                                    1.0 - momentum_t, momentum_t_1)])
        _run("nadam", rows, LRS, WDS, [kind(0.5), *_python_clip(dtype, clip), kind(0.9), kind(1.0 - 0.9),
                                       kind(0.999), kind(1.0 - 0.999), kind(1e-8)], clip is not None, extras=extras,
             parse=_python)
        _assert_same(_without_grads(rows), expected, f"nadam {dtype}")

    def test_ftml(self, dtype, clip):
        """ftml_update (a C++ kernel: float parameters but a double epsilon; (1 - b1^t)/lr and 1 - b2^t computed
        once in the data's dtype)."""
        kind = np.dtype(dtype).type
        rows = _arrays(dtype, 3, seed=15, positive=(0, 1))
        options = {"beta1": 0.6, "beta2": 0.999, "epsilon": 1e-8, "t": 3, "rescale_grad": 0.5,
                   "clip_grad": clip or -1.0}
        expected = _mxnet(mx.nd.ftml_update, rows, LRS, WDS, 3, **options)
        f = lambda v: kind(mx_float32(v))
        scales = [(kind(1) - f(0.6) ** kind(3)) / f(lr) for lr in LRS]
        consts = _consts(dtype, 0.5, clip or -1.0, 0.6, 0.999, 1e-8, (1, 0.6), (1, 0.999))
        consts[4] = kind(mx_float64(1e-8))  # FTMLParam's epsilon is a double
        _run("ftml", rows, scales, [f(wd) for wd in WDS], consts, clip is not None,
             extras=[[kind(1) - f(0.999) ** kind(3)]] * len(rows), parse=float)
        _assert_same(rows, expected, f"ftml {dtype}")


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


#: LAMB's tensors: 4 at a time (two groups, the second with the empty filler), several blocks of 4096 elements, sizes
#: that end inside a block
LAMB_SIZES = (9000, 1000, 2503, 7, 4097)
LAMB_STEPS = (3, 7, 3, 1, 12)


def _lamb_rows(dtype, seed):
    """[weight, grad, mean, var] per tensor of LAMB_SIZES (var >= 0; finite gradients)."""
    rng = np.random.RandomState(seed)
    return [[a.astype(dtype) for a in (rng.randn(n), rng.randn(n), 0.1 * rng.randn(n), np.abs(rng.randn(n)))]
            for n in LAMB_SIZES]


def _lamb(rows, options, apply):
    """``kernels.lamb`` on ``rows`` (lrs, wds cycled from LRS, WDS, correctly rounded to float32 as MXNet's tuple
    parameters are; LAMB_STEPS); (float32 directions, float32 sums)."""
    dtype, kind = rows[0][0].dtype, rows[0][0].dtype.type
    directions = [np.empty(row[0].size, dtype=np.float32) for row in rows]
    table = np.array([[a.ctypes.data for a in row] + [d.ctypes.data] for row, d in zip(rows, directions)] + [[0] * 5])
    lengths = np.array([row[0].size for row in rows] + [0], dtype=np.int64)
    lanes = np.array([[0, 4, 2, 1], [3, 5, 5, 5]], dtype=np.int64)
    per_row = [np.array(list((values * 2)[:len(rows)]) + [0], dtype=np.float32).astype(dtype)  # tuples: rounded
               for values in (WDS, LRS)]
    corrections = np.array([[kind(1) - np.power(kind(mx_float32(0.9)), kind(t)),
                             kind(1) - np.power(kind(mx_float32(0.999)), kind(t))] for t in LAMB_STEPS] + [[1, 1]])
    consts = _consts(dtype, options["rescale_grad"], options["clip_gradient"], 0.9, 0.999, (1, 0.9), (1, 0.999), 1e-6,
                     options["lower_bound"], options["upper_bound"])
    sums = np.zeros((len(rows) + 1, 2), dtype=np.float32)
    kernels.lamb(table, lengths, lanes, *per_row, corrections.astype(dtype), np.array(consts, dtype=dtype),
                 options["clip_gradient"] >= 0, options["bias_correction"], apply, sums, np.empty(0, dtype=np.float32))
    return directions, sums[:-1]


@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("clip", CLIPS, ids=["noclip", "clip"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_lamb_equals_multi_lamb_update(dtype, clip, bias_correction):
    """kernels.lamb (5 tensors, 4 at a time, several blocks; update counts 1 to 12, a lower and an upper bound):
    MXNet's multi_lamb_update bit for bit (weights, means, variances), and its float sums of squares those of
    multi_sum_sq (weights before the update, float32 directions)."""
    rows = _lamb_rows(dtype, seed=6)
    options = {"rescale_grad": 0.5, "lower_bound": 0.1, "upper_bound": 30.0, "bias_correction": bias_correction,
               "clip_gradient": clip or -1.0}
    arrays = [[mx.nd.array(a, dtype=a.dtype) for a in row] for row in rows]
    before = mx.nd.multi_sum_sq(*[row[0] for row in arrays], num_arrays=len(rows)).asnumpy()
    mx.nd.contrib.multi_lamb_update(*(list(column) for column in zip(*arrays)), step_count=list(LAMB_STEPS),
                                    lrs=list((LRS * 2)[:len(rows)]), wds=list((WDS * 2)[:len(rows)]),
                                    out=[row[0] for row in arrays], beta1=0.9, beta2=0.999, epsilon=1e-6, **options)
    expected = [[a.asnumpy() for a in row] for row in arrays]
    directions, sums = _lamb(rows, options, apply=True)
    _assert_same(rows, expected, f"lamb {dtype}")
    assert np.array_equal(sums[:, 0], before), (sums[:, 0], before)
    want = mx.nd.multi_sum_sq(*[mx.nd.array(d) for d in directions], num_arrays=len(rows)).asnumpy()
    assert np.array_equal(sums[:, 1], want), (sums[:, 1], want)
    assert not np.array_equal(rows[0][0], _lamb_rows(dtype, seed=6)[0][0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_lamb_step_one_then_lamb_apply(dtype):
    """kernels.lamb without its second step leaves the weights, gives the sums; lamb_apply with the ratios computed
    from them (as MXNet's step 2 does) completes MXNet's multi_lamb_update bit for bit."""
    rows = _lamb_rows(dtype, seed=7)
    options = {"rescale_grad": 1.0, "lower_bound": -1.0, "upper_bound": -1.0, "bias_correction": True,
               "clip_gradient": -1.0}
    arrays = [[mx.nd.array(a, dtype=a.dtype) for a in row] for row in rows]
    mx.nd.contrib.multi_lamb_update(*(list(column) for column in zip(*arrays)), step_count=list(LAMB_STEPS),
                                    lrs=list((LRS * 2)[:len(rows)]), wds=list((WDS * 2)[:len(rows)]),
                                    out=[row[0] for row in arrays], beta1=0.9, beta2=0.999, epsilon=1e-6, **options)
    start = [row[0].copy() for row in rows]
    directions, sums = _lamb(rows, options, apply=False)
    assert all(np.array_equal(row[0], w) for row, w in zip(rows, start)), "step 1 moved a weight"
    kind = np.dtype(dtype).type
    ratios = np.sqrt(sums[:, 0]) / np.sqrt(sums[:, 1])  # float: no bound, no zero norm here
    lrs = [kind(np.float32(lr)) * kind(r) for lr, r in zip((LRS * 2)[:len(rows)], ratios)]
    table = np.array([[row[0].ctypes.data, d.ctypes.data] for row, d in zip(rows, directions)])
    kernels.lamb_apply(table, np.array([row[0].size for row in rows]), np.array(lrs, dtype=dtype),
                       np.empty(0, dtype=np.float32))
    _assert_same(rows, [[a.asnumpy() for a in row] for row in arrays], f"lamb step 1 + lamb_apply {dtype}")


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
