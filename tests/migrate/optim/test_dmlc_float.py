"""``migrate.optim.dmlc_float.mx_float32`` (dmlc's float parser, replayed without MXNet) against MXNet 1.9.1 itself.

The reference is ``gluon_lr._fused.base.param_float32``, which asks an MXNet operator to echo the value it parsed.
``bench/bench_dmlc_float.py`` runs the same comparison on 100,000 values (it takes ~30 s: one operator call each).
"""
import sys

import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet import autograd, gluon

import gluon_lr
import migrate
from gluon_lr._fused.base import param_float32
from migrate.optim import OPTIMIZERS, base
from migrate.optim.dmlc_float import mx_float32, mx_float64
from tests.migrate import _mx_reference as R

EXAMPLE = 2.0201059743896793e-05  # Adam's bias-corrected lr at lr_mult 0.1, step 3: one ulp above np.float32's


def _values(count, seed=0):
    """Random values spread over 1e-12..1e6 (log-uniform), both signs, plus short decimals and integers."""
    rng = np.random.RandomState(seed)
    values = list(10.0 ** rng.uniform(-12, 6, count))
    values += [-v for v in values[:count // 10]]
    values += [round(v, 4) for v in 10.0 ** rng.uniform(-3, 6, count // 10)]
    values += [float(v) for v in rng.randint(1, 10 ** 6, count // 20)]
    values += [EXAMPLE, 0.1, 0.9, 0.999, 1e-8, 1e-12, 1e6, 123456.789, 0.5, 1.0, 3e-05, 0.0]
    return values


def _bits(value):
    return np.float32(value).view(np.int32)


def test_agrees_with_mxnet_on_every_value():
    """mx_float32 == MXNet's parsed value, bit for bit, on ~7,000 values; np.float32 differs on >5% of them."""
    values = _values(5000)
    wrong = [(v, mx_float32(v), param_float32(v)) for v in values if _bits(mx_float32(v)) != _bits(param_float32(v))]
    assert not wrong, f"{len(wrong)} of {len(values)} differ from MXNet, e.g. {wrong[:3]}"
    rounded = sum(_bits(np.float32(v)) != _bits(param_float32(v)) for v in values)
    assert rounded > 0.05 * len(values), f"np.float32 differs from MXNet on only {rounded}: the test proves little"


def test_float64_agrees_with_mxnet_scalar_operators():
    """mx_float64 == the double an NDArray's arithmetic with a python number takes (``ones * value`` in float64,
    MXNet's ``_mul_scalar``), bit for bit, on ~1,700 values; python's own float differs on >5% of them."""
    values = _values(1200, seed=1)
    one = mx.nd.ones(1, dtype="float64")
    taken = [float((one * value).asnumpy()[0]) for value in values]
    wrong = [(v, mx_float64(v), t) for v, t in zip(values, taken) if mx_float64(v) != t]
    assert not wrong, f"{len(wrong)} of {len(values)} differ from MXNet, e.g. {wrong[:3]}"
    rounded = sum(v != t for v, t in zip(values, taken))
    assert rounded > 0.05 * len(values), f"python's float differs from MXNet on only {rounded}: the test proves little"


def test_example_is_one_ulp_above_numpy():
    assert mx_float32(EXAMPLE) == np.nextafter(np.float32(EXAMPLE), np.float32(1)) == param_float32(EXAMPLE)


@pytest.mark.parametrize("value", [1e39, -1e39, 3.5e38])
def test_out_of_range_raises_as_mxnet_does(value):
    """Beyond float32's range dmlc's stof raises out_of_range (MXNet refuses the operator call)."""
    with pytest.raises(OverflowError, match="out_of_range"):
        mx_float32(value)
    with pytest.raises(mx.base.MXNetError):
        mx.nd.sgd_update(mx.nd.zeros(1), mx.nd.ones(1), lr=value, wd=0.0).asnumpy()


def _tricky(start, count=1):
    """The first ``count`` values from ``start`` upward (step 1e-4 relative) that dmlc parses off np.float32."""
    out, value = [], start
    while len(out) < count:
        if _bits(mx_float32(value)) != _bits(np.float32(value)):
            out.append(value)
        value *= 1.0001
    return out


@pytest.mark.parametrize("name, hyper", [
    ("ftrl", {"lamda1": 0.01, "beta": 1.0}),
    ("signum", {"momentum": 0.9, "wd_lh": 0.0}),
])
def test_exact_optimizer_bit_equal_at_an_lr_dmlc_rounds_off(name, hyper, monkeypatch):
    """float32 FTRL and Signum (bit-exact kernels) at an lr and wd that dmlc parses one ulp off np.float32: migrate's
    weights equal MXNet's bit for bit; with np.float32 rounding (what ``kernel_float`` once did) they do not."""
    lr, wd = _tricky(0.01), _tricky(0.001)[0]
    lr = lr[0]
    shapes = {"a": (6, 5), "b": (4,)}
    mx.random.seed(4)
    params = []
    for key, shape in shapes.items():
        param = gluon.Parameter(key, shape=shape, init=mx.init.Uniform(0.5))
        param.initialize(ctx=mx.cpu())
        params.append(param)
    trainer = gluon_lr.LrTrainer(params, name, dict(hyper, learning_rate=lr, wd=wd), kvstore=None, fused=False)
    initial = {p.name: p.data().asnumpy() for p in params}
    rng = np.random.RandomState(6)
    grads = [{k: rng.randn(*s).astype(np.float32) for k, s in shapes.items()} for _ in range(5)]
    for step in grads:
        with autograd.record():
            loss = mx.nd.add_n(*[(p.data() * mx.nd.array(step[p.name])).sum() for p in params])
        loss.backward()
        trainer.step(1)
    settings = R.exported_settings(trainer)

    def run():
        model = torch.nn.Module()
        for key, value in initial.items():
            setattr(model, key, torch.nn.Parameter(torch.from_numpy(value.copy())))
        optimizer = migrate.torch_optimizer(model, settings, {k: k for k in shapes})
        for step in grads:
            for key, param in model.named_parameters():
                param.grad = torch.from_numpy(step[key])
            optimizer.step()
        return {key: param.detach().numpy() for key, param in model.named_parameters()}

    ours = run()
    for p in params:
        assert np.array_equal(ours[p.name], p.data().asnumpy()), f"{name}: {p.name} is not bit-equal to MXNet"
    for module in (base, sys.modules[OPTIMIZERS[name].__module__]):
        monkeypatch.setattr(module, "kernel_float", lambda value: float(np.float32(value)))
    rounded = run()
    assert any(not np.array_equal(rounded[p.name], p.data().asnumpy()) for p in params), \
        f"{name}: np.float32 rounding is bit-equal too: the lr {lr!r} proves nothing"
