"""Tests of migrate.convert_stock_optimizer_state: MXNet states handed to stock torch.optim optimizers.

10 MXNet steps, hand-over to the stock optimizer with converted states, 10 torch steps, against 20 MXNet steps
(float64, no clipping, constant lr so no scheduler: what remains is the listed differences of each stock optimizer).
"""
import functools
import os
import pickle
import re
import tempfile

import numpy as np
import pytest
import torch
from mxnet import gluon

import migrate
from migrate.errors import StateConversionError
from tests.migrate import _mx_reference as R

STEPS = 10
# (case, MXNet optimizer, kwargs, largest weight difference allowed with converted states). Measured on this MLP
# (float64, wd 0.01 with wd_mult 0/1/2, lr_mult 0.5/1/2, a frozen layer); the bound is ~3x the measured figure.
CASES = [
    ("sgd", "sgd", {"learning_rate": 0.05, "momentum": 0.9}, 2e-7),  # float32 lr/wd/momentum in MXNet
    ("nag-no-wd", "nag", {"learning_rate": 0.05, "momentum": 0.9, "wd": 0.0}, 2e-7),
    ("nag", "nag", {"learning_rate": 0.05, "momentum": 0.9}, 6e-3),  # MXNet's momentum takes wd * the new weight
    ("adam", "adam", {"learning_rate": 0.01}, 6e-7),  # where epsilon goes
    ("rmsprop", "rmsprop", {"learning_rate": 0.01}, 2e-7),  # epsilon inside the sqrt in MXNet
    ("rmsprop-centered", "rmsprop", {"learning_rate": 0.01, "centered": True}, 2e-7),
    ("adagrad", "adagrad", {"learning_rate": 0.05, "wd": 0.0}, 1e-12),
    ("adadelta", "adadelta", {"learning_rate": 1.0, "wd": 0.0}, 1e-12),
    ("adamax", "adamax", {"learning_rate": 0.01}, 1e-12),
]


@functools.lru_cache(maxsize=None)
def _mx_run(case):
    """MXNet weights at STEPS and 2*STEPS, the settings and gluon.Trainer states at STEPS, the data."""
    name, kwargs = {c[0]: (c[1], c[2]) for c in CASES}[case]
    kwargs = dict({"wd": 0.01}, **kwargs)
    net = R.mx_net("float64")
    trainer = R.mx_trainer(net, name, kwargs, None)
    data = R.batches(2 * STEPS, "float64")
    R.mx_train(net, trainer, data[:STEPS])
    middle, settings = R.weights_of(net), R.exported_settings(trainer)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trainer.states")
        gluon.Trainer.save_states(trainer, path)
        with open(path, "rb") as handle:
            states = handle.read()
    R.mx_train(net, trainer, data[STEPS:])
    return {"middle": middle, "final": R.weights_of(net), "settings": settings, "states": states, "data": data}


def _torch_run(case, convert):
    """(largest difference to MXNet after 10 more torch steps, model, optimizer, conversion or None)."""
    run = _mx_run(case)
    model = R.torch_model(run["middle"])
    optimizer, _ = migrate.stock_torch_optimizer(model, run["settings"], R.MAPPING)
    conversion = None
    if convert:
        conversion = migrate.convert_stock_optimizer_state(run["states"], run["settings"], R.MAPPING, optimizer)
    for x, y in run["data"][STEPS:]:
        optimizer.zero_grad()
        loss = ((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum() / R.BATCH  # MXNet's rescale_grad
        loss.backward()
        optimizer.step()
    return R.largest_difference(run["final"], model)[1], model, optimizer, conversion


@pytest.mark.parametrize("case, tolerance", [(c[0], c[3]) for c in CASES], ids=[c[0] for c in CASES])
def test_stock_optimizer_resumes_from_converted_state(case, tolerance):
    """With converted states the stock optimizer tracks MXNet within the case's bound; without, it does not."""
    converted, _, _, conversion = _torch_run(case, convert=True)
    fresh, _, _, _ = _torch_run(case, convert=False)
    print(f"{case}: converted {converted:.3g}, fresh {fresh:.3g}, filled {conversion.filled}")
    assert conversion.filled == 4 if case in ("sgd", "nag") else conversion.filled >= 4
    assert converted <= tolerance, f"{case}: converted state differs by {converted:.3g} > {tolerance}"
    assert fresh > 100 * max(converted, 1e-12), f"{case}: starting from empty state should differ ({fresh:.3g})"


def test_state_tensors_are_the_converted_mxnet_arrays():
    """Adam's mean/var arrive unchanged with step 10; SGD's buffer is -momentum/lr (lr * lr_mult); AdaGrad's sum is
    history + eps."""
    states = {case: pickle.loads(_mx_run(case)["states"])[0] for case in ("adam", "sgd", "adagrad")}
    for case, check in (("adam", _adam_equal), ("sgd", _sgd_equal), ("adagrad", _adagrad_equal)):
        run = _mx_run(case)
        model = R.torch_model(run["middle"])
        optimizer, _ = migrate.stock_torch_optimizer(model, run["settings"], R.MAPPING)
        migrate.convert_stock_optimizer_state(run["states"], run["settings"], R.MAPPING, optimizer)
        for mx_name in ("mlp_fc0_weight", "mlp_fc2_bias"):
            index, key = run["settings"]["params"][mx_name]["index"], R.MAPPING[mx_name]
            mx_state = [a.asnumpy() for a in (states[case][index] if isinstance(states[case][index], tuple)
                                               else (states[case][index],))]
            check(optimizer.state[model.get_parameter(key)], mx_state, R.GROUPS[mx_name][0])


def _adam_equal(state, mx_state, lr_mult):
    assert float(state["step"]) == STEPS
    np.testing.assert_array_equal(state["exp_avg"].numpy(), mx_state[0])
    np.testing.assert_array_equal(state["exp_avg_sq"].numpy(), mx_state[1])


def _sgd_equal(state, mx_state, lr_mult):
    np.testing.assert_array_equal(state["momentum_buffer"].numpy(), mx_state[0] / -(0.05 * lr_mult))


def _adagrad_equal(state, mx_state, lr_mult):
    assert float(state["step"]) == STEPS
    np.testing.assert_array_equal(state["sum"].numpy(), mx_state[0] + 1e-7)


@pytest.mark.parametrize("case, pattern", [("ftrl", "FTRL z .*not converted"), ("signum", "Signum momentum.*not "
                                                                                 "converted"),
                                           ("nadam", "m_schedule.*not carried"), ("nag", "NAG adds wd"),
                                           ("ftml", "FTML state .*not converted")])
def test_what_does_not_cross_is_listed(case, pattern):
    """States with no stock counterpart are listed in the differences, never dropped silently."""
    ref = R.mx_reference(case, "float32")
    model = R.torch_model(ref["middle"])
    optimizer, _ = migrate.stock_torch_optimizer(model, ref["settings"], R.MAPPING)
    filled, differences = migrate.convert_stock_optimizer_state(ref["states"], ref["settings"], R.MAPPING, optimizer)
    assert any(re.search(pattern, line) for line in differences), differences
    assert filled == (0 if case in ("signum", "ftml") else 4)


def test_exact_optimizer_is_refused():
    """An exact optimizer (or another stock class) passed here: the error names the stock class to build."""
    ref = R.mx_reference("adam", "float32")
    model = R.torch_model(ref["middle"])
    exact = migrate.torch_optimizer(model, ref["settings"], R.MAPPING)
    pattern = "migrate.optim.adam_family.Adam .*expected torch.optim.Adam from migrate.stock_torch_optimizer"
    with pytest.raises(StateConversionError, match=pattern):
        migrate.convert_stock_optimizer_state(ref["states"], ref["settings"], R.MAPPING, exact)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(StateConversionError, match="torch.optim.sgd.SGD cannot take MXNet 'adam' states"):
        migrate.convert_stock_optimizer_state(ref["states"], ref["settings"], R.MAPPING, sgd)
