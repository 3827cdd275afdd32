"""The fast path keeps a context's routing and tables from step to step (``gluon_lr._fused.plan.Plan``) and asks MXNet
for gradient freshness and array addresses in compiled loops (``gluon_lr._fused._array_calls``): neither may change
a result.

A plan is reused while the arrays and states it was made from are the ones the Parameters and the Updater hold; what
can change without a new object (lr, multipliers, scheduler, optimizer hyperparameters, array contents) is read at
every step. Each test here changes one such thing between steps, on the fast path and on the stock loop
(``LrTrainer(fused=False)``) alike, and compares every parameter after 20 steps: tolerance 0.
"""
import ctypes

import numpy as np
import pytest
import mxnet as mx
from mxnet import autograd, gluon, nd

import gluon_lr._fused.update as fused_update
from gluon_lr import LrTrainer
from gluon_lr._fused.base import data_pointers

from .test_fused import assert_close, batches, make_net, train, train_step

SGD = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3})
ADAM = ("adam", {"learning_rate": 0.01, "wd": 1e-3})


def _set_lr_mult(step, trainer, params):
    if step in (3, 9):
        params["net_d0_weight"].lr_mult = {3: 3.0, 9: 0.0}[step]


def _set_wd_mult(step, trainer, params):
    if step == 4:
        params["net_d1_weight"].wd_mult = 5.0


def _set_learning_rate(step, trainer, params):
    if step in (3, 8):
        trainer.set_learning_rate({3: 0.03, 8: 0.2}[step])


def _warm_up_every_step(step, trainer, params):
    trainer.set_learning_rate(0.01 * (step + 1) / 20)


def _attach_scheduler(step, trainer, params):
    if step == 5:
        scheduler = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5)
        scheduler.base_lr = trainer.optimizer.lr
        trainer.optimizer.lr_scheduler = scheduler


def _change_hyperparameters(step, trainer, params):
    if step == 6:
        for name, value in {"momentum": 0.5, "beta1": 0.8, "clip_gradient": 0.05}.items():
            if hasattr(trainer.optimizer, name):
                setattr(trainer.optimizer, name, value)


def _grad_req_off_and_on(step, trainer, params):
    if step in (3, 7):
        params["net_d1_bias"].grad_req = {3: "null", 7: "write"}[step]


def _set_data(step, trainer, params):
    if step == 5:
        param = params["net_d0_weight"]
        param.set_data(param.data() * 0.5)


def _force_reinit(step, trainer, params):
    if step == 5:
        mx.random.seed(11)
        params["net_d1_weight"].initialize(mx.init.Uniform(0.2), force_reinit=True)


def _replace_state(step, trainer, params):
    if step == 6:  # a new state object for one parameter (zeros), as code that resets a state would install
        updater = trainer._updaters[0]
        index = list(params.keys()).index("net_d1_weight")
        state = updater.states[index]
        updater.states[index] = (tuple(nd.zeros_like(s) for s in state) if isinstance(state, tuple)
                                 else nd.zeros_like(state))


CHANGES = [("lr_mult set on a Parameter", _set_lr_mult), ("wd_mult set on a Parameter", _set_wd_mult),
           ("set_learning_rate", _set_learning_rate), ("lr set at every step", _warm_up_every_step),
           ("lr scheduler attached mid-run", _attach_scheduler),
           ("momentum/beta1/clip_gradient changed", _change_hyperparameters),
           ("grad_req null then write", _grad_req_off_and_on), ("set_data", _set_data),
           ("initialize(force_reinit=True)", _force_reinit), ("Updater state replaced", _replace_state)]


class TestPlanFollowsChanges:
    """What changes between steps reaches the update exactly as on the stock loop."""

    @pytest.mark.parametrize("name, hyper", [SGD, ADAM], ids=["sgd_momentum", "adam"])
    @pytest.mark.parametrize("description, change", CHANGES, ids=[c[0] for c in CHANGES])
    def test_change_between_steps(self, description, change, name, hyper):
        """The change made before a step on both trainers: the stock loop's weights bit for bit."""
        stock, _ = train(lambda p: LrTrainer(p, name, dict(hyper), fused=False), at_step=change)
        fast, trainer = train(lambda p: LrTrainer(p, name, dict(hyper)), at_step=change)
        assert_close(stock, fast, 0.0)
        assert len(trainer.fused_params) == 6

    @pytest.mark.parametrize("name, hyper", [SGD, ADAM], ids=["sgd_momentum", "adam"])
    def test_load_states_mid_run(self, tmp_path, name, hyper):
        """States saved at step 4 and loaded at step 9 (new state objects, a new optimizer): the stock loop's
        weights."""
        def rewind(fused):
            def change(step, trainer, params):
                if step == 4:
                    trainer.save_states(str(tmp_path / f"{fused}.states"))
                if step == 9:
                    trainer.load_states(str(tmp_path / f"{fused}.states"))
            return change
        stock, _ = train(lambda p: LrTrainer(p, name, dict(hyper), fused=False), at_step=rewind(False))
        fast, trainer = train(lambda p: LrTrainer(p, name, dict(hyper)), at_step=rewind(True))
        assert_close(stock, fast, 0.0)
        assert len(trainer.fused_params) == 6


class TestPlanReuse:
    """A plan is made again only when an array or state it was made from is replaced."""

    def test_plans_made(self, monkeypatch, tmp_path):
        """One plan for 5 steps with multipliers and lr changed between them; one more after load_states, one
        more after a grad_req change."""
        made = []

        class CountedPlan(fused_update.Plan):
            def __init__(self, *args, **kwargs):
                made.append(args[2])
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(fused_update, "Plan", CountedPlan)
        net = make_net([mx.cpu(0)])
        trainer = LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
        params, data = net.collect_params(), batches(steps=8)
        for step, (x, y) in enumerate(data):
            if step == 2:
                params["net_d0_weight"].lr_mult = 0.5
                trainer.set_learning_rate(0.05)
            if step == 5:
                trainer.save_states(str(tmp_path / "t.states"))
                trainer.load_states(str(tmp_path / "t.states"))
            if step == 7:
                params["net_d1_bias"].grad_req = "null"
            train_step(net, trainer, x, y, [mx.cpu(0)])
        assert [len(todo) for todo in made] == [6, 6, 5]


class TestArrayCalls:
    """The compiled loops make MXNet's own calls: the same answers as the ctypes calls one array at a time."""

    @staticmethod
    def _arrays(count: int = 12) -> list:
        arrays = [nd.array(np.arange(5 + i, dtype=np.float32)) for i in range(count)]
        for array in arrays:
            array.attach_grad()
        with autograd.record():
            total = sum((a * 2).sum() for a in arrays[::3])
        total.backward()
        return arrays

    def test_grad_states_and_clear(self):
        """Freshness read as ``_fresh_grad`` reads it; clearing leaves every ``_fresh_grad`` False."""
        from gluon_lr._fused import _array_calls
        arrays = self._arrays()
        handles = np.array([a.handle.value for a in arrays], dtype=np.int64)
        expected = [int(a._fresh_grad) for a in arrays]
        assert _array_calls.grad_states(handles).tolist() == expected and sum(expected) == 4
        _array_calls.clear_grad_states(handles[:6])
        assert [bool(a._fresh_grad) for a in arrays] == [False] * 6 + [bool(e) for e in expected[6:]]

    def test_data_pointers(self):
        """Each address equals the ctypes call's answer."""
        from gluon_lr._fused import _array_calls
        arrays = self._arrays()
        out = np.zeros(len(arrays), dtype=np.int64)
        _array_calls.data_pointers(np.array([a.handle.value for a in arrays], dtype=np.int64), out)
        assert out.tolist() == data_pointers(arrays)

    @pytest.mark.skipif(not mx.runtime.Features().is_enabled("MKLDNN"), reason="MKLDNN reorders weights in place")
    def test_data_pointers_after_reorder(self):
        """After an inference forward (the weight in MKLDNN's padded layout), the address holds the row-major
        values, as with the ctypes call."""
        from gluon_lr._fused import _array_calls
        conv = gluon.nn.Conv2D(5, 3, in_channels=16)
        conv.initialize(mx.init.Xavier())
        values = conv.weight.data().asnumpy().ravel()
        conv(nd.ones((1, 16, 6, 6))).wait_to_read()
        nd.waitall()
        weight, out = conv.weight.data(), np.zeros(1, dtype=np.int64)
        _array_calls.data_pointers(np.array([weight.handle.value], dtype=np.int64), out)
        raw = np.ctypeslib.as_array((ctypes.c_float * weight.size).from_address(int(out[0]))).copy()
        assert np.array_equal(raw, values)

    def test_failure_raises_mxnets_error(self):
        """An array with no gradient state: MXNet's own error, as the ctypes call raises it."""
        from gluon_lr._fused import _array_calls
        plain = nd.ones(3)
        with pytest.raises(mx.base.MXNetError, match="does not have gradient state"):
            _array_calls.clear_grad_states(np.array([plain.handle.value], dtype=np.int64))
