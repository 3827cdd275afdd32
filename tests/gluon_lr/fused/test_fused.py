"""The fast update path (``LrTrainer(fused=True)``) gives the stock trainer's results, and falls back where it must.

Every test trains the same seeded network twice, with the stock ``gluon.Trainer`` (or ``LrTrainer(fused=False)``,
which runs the stock loop) and with the fast path, for 20 steps, and compares every parameter on every context.
Tolerance: 0 (bit-identical) everywhere. On CPU, sgd (with or without momentum), nag and adam run the compiled kernels
(``mxupdate.kernels``), which reproduce MXNet's operators operation by operation (``TestCompiledKernels`` checks
each against its operator on random data, NaN and inf included); without numba (``test_without_numba``) the numpy
and MXNet implementations run, each timed on steps 1-4 (numpy on 1 and 3, MXNet on 2 and 4), so a 20-step comparison
checks both; rmsprop, adagrad and float16 master copies run MXNet's operators on each tensor.
"""
import math

import numpy as np
import pytest
import mxnet as mx
from mxnet import autograd, gluon, nd

from gluon_lr import LrTrainer, ParamsTypeError, Rule

STEPS = 20
FAST = [  # (optimizer, hyperparameters, tolerance)
    ("sgd", {"learning_rate": 0.1}, 0.0),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}, 0.0),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3, "clip_gradient": 0.05}, 0.0),
    ("nag", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}, 0.0),
    ("adam", {"learning_rate": 0.01, "wd": 1e-3}, 0.0),
    ("adam", {"learning_rate": 0.01, "wd": 1e-3, "clip_gradient": 0.05}, 0.0),
    ("rmsprop", {"learning_rate": 0.01, "wd": 1e-3}, 0.0),
    ("rmsprop", {"learning_rate": 0.01, "centered": True, "clip_weights": 2.0}, 0.0),
    ("adagrad", {"learning_rate": 0.1, "wd": 1e-3, "clip_gradient": 0.5}, 0.0),
]
FALLBACK = [("adadelta", {}), ("adamax", {"learning_rate": 0.01}), ("nadam", {"learning_rate": 0.01}),
            ("signum", {"learning_rate": 0.01, "momentum": 0.9}), ("lamb", {"learning_rate": 0.01})]


def make_net(ctxs, dtype="float32", norm=True, seed=0, static=False):
    """Dense-BatchNorm-Dense with seeded weights, multipliers on the Parameters, hybridized."""
    net = gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(gluon.nn.Dense(16, in_units=10, activation="relu", prefix="d0_"))
        if norm:
            net.add(gluon.nn.BatchNorm(in_channels=16, prefix="bn_"))
        net.add(gluon.nn.Dense(5, in_units=16, prefix="d1_"))
    net.initialize(mx.init.Zero(), ctx=ctxs)
    rs = np.random.RandomState(seed)
    for param in net.collect_params().values():
        param.set_data(nd.array(rs.normal(scale=0.3, size=param.shape)))
    if dtype != "float32":
        net.cast(dtype)
    params = net.collect_params()
    params["net_d0_weight"].lr_mult = 0.5
    params["net_d1_weight"].lr_mult = 2.0
    for name in ("net_d0_bias", "net_d1_bias"):
        params[name].wd_mult = 0.0
    net.hybridize(static_alloc=static, static_shape=static)
    return net


def batches(dtype="float32", steps=STEPS):
    """Seeded (x, y) batches of 8."""
    rs = np.random.RandomState(1)
    return [(rs.normal(size=(8, 10)).astype(dtype), rs.normal(size=(8, 5)).astype(dtype)) for _ in range(steps)]


def train_step(net, trainer, x, y, ctxs, ignore_stale_grad=False):
    """Forward, backward and trainer.step(8) on one batch split across ``ctxs``."""
    xs = gluon.utils.split_and_load(nd.array(x, dtype=x.dtype), ctxs)
    ys = gluon.utils.split_and_load(nd.array(y, dtype=y.dtype), ctxs)
    with autograd.record():
        losses = [((net(a) - b) ** 2).mean() for a, b in zip(xs, ys)]
    autograd.backward(losses)
    trainer.step(8, ignore_stale_grad=ignore_stale_grad)


def elementwise_step(params, trainer, step: int, ctxs):
    """float16 (MXNet has no float16 Dense on CPU): loss = sum(w * c + 0.1 w^2), c seeded per step; step(8)."""
    rs = np.random.RandomState(100 + step)
    coefficients = {name: rs.normal(size=p.shape) for name, p in params.items()}
    with autograd.record():
        losses = [sum(((p.data(ctx) * nd.array(coefficients[name], ctx=ctx, dtype=p.dtype)
                        + 0.1 * p.data(ctx) ** 2).sum()) for name, p in params.items()) for ctx in ctxs]
    autograd.backward(losses)
    trainer.step(8)


def train(make_trainer, ctxs=(mx.cpu(0),), dtype="float32", norm=True, at_step=None, static=False):
    """Train a fresh net for STEPS steps; ``at_step(step, trainer, params)`` runs before each step."""
    ctxs = list(ctxs)
    net = make_net(ctxs, dtype, norm, static=static)
    trainer = make_trainer(net.collect_params())
    for step, (x, y) in enumerate(batches(dtype)):
        if at_step is not None:
            at_step(step, trainer, net.collect_params())
        if dtype == "float16":
            elementwise_step(net.collect_params(), trainer, step, ctxs)
        else:
            train_step(net, trainer, x, y, ctxs)
    weights = {(name, str(ctx)): p.data(ctx).asnumpy().astype(np.float64)
               for name, p in net.collect_params().items() for ctx in ctxs}
    return weights, trainer


def assert_close(expected: dict, got: dict, atol: float) -> None:
    """Every array within ``atol``; the failure names the parameter and the largest difference."""
    assert expected.keys() == got.keys()
    worst = max(((float(np.abs(expected[k] - got[k]).max()), k) for k in expected), key=lambda t: t[0])
    assert worst[0] <= atol, f"{worst[1]} differs by {worst[0]:.3g} > atol {atol:g}"


def moved(before: dict, after: dict) -> set:
    """Names (without context) whose weights changed."""
    return {k[0] for k in before if not np.array_equal(before[k], after[k])}


class TestOptimizers:
    """Each accelerated optimizer equals the stock trainer; the others fall back and equal it too."""

    @pytest.mark.parametrize("name, hyper, atol", FAST, ids=[f"{n}-{'-'.join(h)}" for n, h, _ in FAST])
    def test_fast_equals_stock(self, name, hyper, atol):
        """20 steps with lr/wd multipliers: same weights as gluon.Trainer, on the fast path."""
        stock, _ = train(lambda p: gluon.Trainer(p, name, dict(hyper)))
        fast, trainer = train(lambda p: LrTrainer(p, name, dict(hyper)))
        assert_close(stock, fast, atol)
        assert set(trainer.fused_params) == {"net_d0_weight", "net_d0_bias", "net_bn_gamma", "net_bn_beta",
                                             "net_d1_weight", "net_d1_bias"}
        initial = make_net([mx.cpu(0)]).collect_params()
        assert moved({(n, "cpu(0)"): p.data().asnumpy() for n, p in initial.items()}, fast) >= set(trainer.fused_params)

    @pytest.mark.parametrize("name, hyper", FALLBACK, ids=[n for n, _ in FALLBACK])
    def test_fallback_equals_stock(self, name, hyper):
        """Optimizers without a fast kernel run the stock loop: bit-identical, nothing on the fast path."""
        stock, _ = train(lambda p: gluon.Trainer(p, name, dict(hyper)))
        fast, trainer = train(lambda p: LrTrainer(p, name, dict(hyper)))
        assert_close(stock, fast, 0.0)
        assert trainer.fused_params == ()


class TestConfigurations:
    """Multipliers, contexts, precision, kvstore modes, schedules, grad_req and stale gradients."""

    @pytest.mark.parametrize("name, hyper", [("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-2}),
                                             ("sgd", {"learning_rate": 0.1, "wd": 1e-2}),
                                             ("nag", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-2}),
                                             ("adam", {"learning_rate": 0.01, "wd": 1e-2})],
                             ids=["sgd_momentum", "sgd", "nag", "adam"])
    def test_multipliers_change_mid_run(self, name, hyper):
        """lr_mult/wd_mult changed at step 7 and 13 take effect exactly as on the stock trainer."""
        changes = {7: ({"net_d0_weight": 3.0, "net_bn_gamma": 0.0}, {"net_d1_weight": 0.0}),
                   13: ({"net_d1_bias": 0.25}, {"net_d0_bias": 2.0})}

        def stock_change(step, trainer, params):
            lr, wd = changes.get(step, ({}, {}))
            for name, value in lr.items():
                params[name].lr_mult = value
            for name, value in wd.items():
                params[name].wd_mult = value

        def fast_change(step, trainer, params):
            lr, wd = changes.get(step, ({}, {}))
            if lr:
                trainer.set_lr_mult(lr)
            if wd:
                trainer.set_wd_mult(wd)

        stock, _ = train(lambda p: gluon.Trainer(p, name, dict(hyper)), at_step=stock_change)
        fast, trainer = train(lambda p: LrTrainer(p, name, dict(hyper)), at_step=fast_change)
        assert_close(stock, fast, 0.0)
        assert len(trainer.fused_params) == 6

    @pytest.mark.parametrize("name, hyper", [("adam", {"learning_rate": 0.01, "wd": 1e-3}),
                                             ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3})],
                             ids=["adam", "sgd_momentum"])
    @pytest.mark.parametrize("kvstore", ["device", "local", None])
    def test_several_contexts(self, kvstore, name, hyper):
        """Two contexts (cpu(0), cpu(1)) with gradient reduction on the kvstore, weights updated on the workers."""
        ctxs = [mx.cpu(0), mx.cpu(1)]
        on_kv = False if kvstore else None
        stock, _ = train(lambda p: gluon.Trainer(p, name, dict(hyper), kvstore=kvstore, update_on_kvstore=on_kv),
                         ctxs)
        fast, trainer = train(lambda p: LrTrainer(p, name, dict(hyper), kvstore=kvstore, update_on_kvstore=on_kv),
                              ctxs)
        assert_close(stock, fast, 0.0)
        assert len(trainer.fused_params) == 6

    @pytest.mark.parametrize("name, hyper", [("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
                                             ("sgd", {"learning_rate": 0.1}),
                                             ("nag", {"learning_rate": 0.1, "momentum": 0.9}),
                                             ("adam", {"learning_rate": 0.01, "wd": 1e-3}),
                                             ("rmsprop", {"learning_rate": 0.01})])
    def test_float16_multi_precision(self, name, hyper):
        """float16 weights with float32 master copies: same float16 weights as the stock trainer."""
        hyper = dict(hyper, multi_precision=True)
        stock, _ = train(lambda p: gluon.Trainer(p, name, dict(hyper)), dtype="float16", norm=False)
        fast, trainer = train(lambda p: LrTrainer(p, name, dict(hyper)), dtype="float16", norm=False)
        assert_close(stock, fast, 0.0)
        assert len(trainer.fused_params) == 4

    def test_update_on_kvstore_falls_back(self):
        """update_on_kvstore=True: the kvstore updates, the fast path stays out, results equal the stock ones."""
        hyper = {"learning_rate": 0.1, "momentum": 0.9}
        stock, _ = train(lambda p: gluon.Trainer(p, "sgd", dict(hyper), kvstore="device", update_on_kvstore=True),
                         [mx.cpu(0), mx.cpu(1)])
        fast, trainer = train(lambda p: LrTrainer(p, "sgd", dict(hyper), kvstore="device", update_on_kvstore=True),
                              [mx.cpu(0), mx.cpu(1)])
        assert_close(stock, fast, 0.0)
        assert trainer.fused_params == ()

    def test_static_alloc_graph(self):
        """A graph hybridized with static_alloc/static_shape trains alike (the fast path replaces no array it binds)."""
        hyper = {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}
        stock, _ = train(lambda p: gluon.Trainer(p, "sgd", dict(hyper)), static=True)
        fast, trainer = train(lambda p: LrTrainer(p, "sgd", dict(hyper)), static=True)
        assert_close(stock, fast, 0.0)
        assert len(trainer.fused_params) == 6

    def test_static_alloc_with_deferred_init(self, recwarn):
        """Deferred init + static_alloc, the graph bound before the first step: stock results, on the fast path,
        no warning (nothing is repacked, so the arrays the graph bound stay the ones updated)."""
        def run(cls):
            mx.random.seed(3)
            net = gluon.nn.HybridSequential(prefix="net_")
            with net.name_scope():
                net.add(gluon.nn.Dense(16, activation="relu", prefix="d0_"), gluon.nn.Dense(5, prefix="d1_"))
            net.initialize(mx.init.Uniform(0.3))
            net.hybridize(static_alloc=True, static_shape=True)
            trainer = cls(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
            for x, y in batches()[:6]:
                train_step(net, trainer, x, y, [mx.cpu(0)])
            return {(n, ""): p.data().asnumpy() for n, p in net.collect_params().items()}, trainer

        stock, _ = run(gluon.Trainer)
        fast, trainer = run(LrTrainer)
        assert_close(stock, fast, 0.0)
        assert len(trainer.fused_params) == 4
        assert [str(w.message) for w in recwarn if "LrTrainer" in str(w.message)] == []

    def test_lr_scheduler(self):
        """A FactorScheduler halves lr every 5 updates on both trainers alike."""
        def make(cls):
            return lambda p: cls(p, "sgd", {"learning_rate": 0.1, "momentum": 0.9,
                                            "lr_scheduler": mx.lr_scheduler.FactorScheduler(5, 0.5)})
        stock, _ = train(make(gluon.Trainer))
        fast, trainer = train(make(LrTrainer))
        assert_close(stock, fast, 0.0)
        assert len(trainer.fused_params) == 6

    def test_grad_req_null(self):
        """A parameter with grad_req='null' keeps its weights; the others equal the stock trainer's."""
        def freeze(step, trainer, params):
            if step == 0:
                params["net_d0_bias"].grad_req = "null"
        hyper = {"learning_rate": 0.1, "momentum": 0.9}
        stock, _ = train(lambda p: gluon.Trainer(p, "sgd", dict(hyper)), at_step=freeze)
        fast, trainer = train(lambda p: LrTrainer(p, "sgd", dict(hyper)), at_step=freeze)
        assert_close(stock, fast, 0.0)
        initial = make_net([mx.cpu(0)]).collect_params()["net_d0_bias"].data().asnumpy()
        assert np.array_equal(fast[("net_d0_bias", "cpu(0)")], initial)
        assert "net_d0_bias" not in trainer.fused_params and len(trainer.fused_params) == 5

    def test_stale_gradient(self):
        """An unused parameter: UserWarning without ignore_stale_grad (as stock); skipped and unchanged with it."""
        for cls in (gluon.Trainer, LrTrainer):
            net, extra = make_net([mx.cpu(0)]), gluon.nn.Dense(3, in_units=2, prefix="extra_")
            extra.initialize(mx.init.One())
            params = list(net.collect_params().values()) + list(extra.collect_params().values())
            trainer = cls(params, "adam", {"learning_rate": 0.01})
            x, y = batches()[0]
            with pytest.raises(UserWarning, match="extra_weight.*has not been updated by backward"):
                train_step(net, trainer, x, y, [mx.cpu(0)])
            for x, y in batches()[:3]:
                train_step(net, trainer, x, y, [mx.cpu(0)], ignore_stale_grad=True)
            assert extra.weight.data().asnumpy().tolist() == [[1.0, 1.0]] * 3


class TestStatesAndViews:
    """save/load of states, and the arrays other code holds stay the live ones."""

    @staticmethod
    def _save_rewind_load(tmp_path, fused: bool):
        """Train 10 steps, save states and weights, train 5, rewind both, train 10 more: final weights."""
        net = make_net([mx.cpu(0)])
        trainer = LrTrainer(net.collect_params(), "adam", {"learning_rate": 0.01, "wd": 1e-3}, fused=fused)
        data = batches(steps=25)
        for x, y in data[:10]:
            train_step(net, trainer, x, y, [mx.cpu(0)])
        trainer.save_states(str(tmp_path / f"t{fused}.states"))
        net.save_parameters(str(tmp_path / f"t{fused}.params"))
        for x, y in data[10:15]:
            train_step(net, trainer, x, y, [mx.cpu(0)])
        trainer.load_states(str(tmp_path / f"t{fused}.states"))
        net.load_parameters(str(tmp_path / f"t{fused}.params"))
        for x, y in data[15:]:
            train_step(net, trainer, x, y, [mx.cpu(0)])
        return {(n, "cpu(0)"): p.data().asnumpy() for n, p in net.collect_params().items()}, trainer

    def test_save_rewind_load(self, tmp_path):
        """Rewinding with load_states in the same trainer gives the stock loop's weights, still on the fast path."""
        plain, _ = self._save_rewind_load(tmp_path, fused=False)
        fast, trainer = self._save_rewind_load(tmp_path, fused=True)
        assert_close(plain, fast, 0.0)
        assert len(trainer.fused_params) == 6

    def test_states_file_crosses_paths(self, tmp_path):
        """A states file saved on the fast path loads into a stock-loop trainer (and back) with equal results."""
        data = batches(steps=20)
        finals = []
        for first, second in ((True, False), (False, True), (False, False)):
            net = make_net([mx.cpu(0)])
            trainer = LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, fused=first)
            for x, y in data[:10]:
                train_step(net, trainer, x, y, [mx.cpu(0)])
            path = str(tmp_path / f"{first}{second}.states")
            trainer.save_states(path)
            other = LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, fused=second)
            other.load_states(path)
            for x, y in data[10:]:
                train_step(net, other, x, y, [mx.cpu(0)])
            finals.append({(n, ""): p.data().asnumpy() for n, p in net.collect_params().items()})
        assert_close(finals[2], finals[0], 0.0)
        assert_close(finals[2], finals[1], 0.0)

    def test_references_stay_live(self):
        """data()/grad() and the updater's state arrays taken after the first step are the ones later steps update.

        The freezing code restores state through ``updater.states[index]``, so this checks that private contract.
        """
        net = make_net([mx.cpu(0)])
        trainer = LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
        data = batches()
        train_step(net, trainer, *data[0], [mx.cpu(0)])
        param = net.collect_params()["net_d1_weight"]
        weight, grad = param.data(), param.grad()
        index = list(net.collect_params().values()).index(param)
        momentum = trainer._updaters[0].states[index]
        before = momentum.asnumpy()
        for x, y in data[1:4]:
            train_step(net, trainer, x, y, [mx.cpu(0)])
        assert weight is param.data() and grad is param.grad() and momentum is trainer._updaters[0].states[index]
        assert not np.array_equal(momentum.asnumpy(), before)
        momentum[:] = 0  # what freezing's restore does: write into the held array
        weight[:] = 1.0
        assert float(param.data().asnumpy().min()) == 1.0
        assert float(np.abs(trainer._updaters[0].states[index].asnumpy()).max()) == 0.0


class TestErrors:
    """Bad values of the fused argument."""

    @pytest.mark.parametrize("description, value, error, pattern", [
        ("a string", "yes", ParamsTypeError, r"fused=\.\.\.\) must be True or False, got str 'yes'"),
        ("a number", 1, ParamsTypeError, r"must be True or False, got int 1; pass fused=False"),
        ("None", None, ParamsTypeError, r"got NoneType None"),
    ])
    def test_fused_must_be_bool(self, description, value, error, pattern):
        """fused must be a bool."""
        net = make_net([mx.cpu(0)])
        with pytest.raises(error, match=pattern):
            LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, fused=value)


#: Freeze/unfreeze schedule over 8 steps, applied before the step's forward: p_dense0_weight first keeps its gradient
#: buffer (its bias trains; see gluon_lr/freeze.py), then goes to grad_req 'null' with its bias.
SCHEDULE = {1: ("freeze", ["p_conv0_weight", "p_dense0_weight"]), 3: ("freeze", ["p_dense0_bias"]),
            4: ("unfreeze", ["p_conv0_weight"]), 6: ("unfreeze", ["p_dense0_weight", "p_dense0_bias"])}
SCHEDULE_STEPS = 8


class TestGradReqChanges:
    """freeze/unfreeze (grad_req changes) mid-run: the fast path equals the stock loop bit for bit, graphs included."""

    @staticmethod
    def _run(fused, hybrid, opt, n_ctx, rules=(), schedule=None):
        """Train the partial-freeze conv net 8 steps under ``schedule``; per step the gradients and weights (numpy)."""
        from tests.gluon_lr.test_freeze_partial import OPTIMIZERS, backward, batches as conv_batches, build_net
        ctx = [mx.cpu(i) for i in range(n_ctx)]
        net = build_net(ctx)
        if hybrid != "imperative":
            net.hybridize(static_alloc=hybrid == "static_alloc", static_shape=hybrid == "static_alloc")
        name, hyper = OPTIMIZERS[opt]
        trainer = LrTrainer(net, name, dict(hyper), kvstore="device" if n_ctx > 1 else None,
                            update_on_kvstore=False if n_ctx > 1 else None, rules=list(rules), fused=fused)
        params, trace = net.collect_params(), []
        for step, x in enumerate(conv_batches(SCHEDULE_STEPS)):
            action, names = (schedule or SCHEDULE).get(step, (None, None))
            if action:
                getattr(trainer, action)(names)
            backward(net, x, ctx)
            grads = {(n, k): g.asnumpy() for n, p in params.items() if p.grad_req != "null"
                     for k, g in enumerate(p.list_grad())}
            trainer.step(len(x))
            weights = {(n, k): d.asnumpy() for n, p in params.items() for k, d in enumerate(p.list_data())}
            trace.append((grads, weights, set(trainer.fused_params)))
        return trace

    @staticmethod
    def _assert_same_trace(stock, fast):
        """Gradients read through param.grad() and weights after every step: bit-identical, named on failure."""
        for step, ((stock_grads, stock_weights, _), (grads, weights, _)) in enumerate(zip(stock, fast)):
            for kind, want, got in (("grad", stock_grads, grads), ("weight", stock_weights, weights)):
                assert want.keys() == got.keys(), f"step {step}: {kind}s of {sorted(want)} vs {sorted(got)}"
                for key in want:
                    diff = float(np.abs(want[key] - got[key]).max())
                    assert diff == 0.0, f"step {step}: {kind} of {key[0]} on context {key[1]}: max |diff| {diff:.3g}"

    @pytest.mark.parametrize("hybrid, opt, n_ctx", [("imperative", "adam", 1), ("hybridized", "sgd_momentum", 1),
                                                    ("static_alloc", "sgd_momentum", 1), ("static_alloc", "adam", 1),
                                                    ("static_alloc", "adam", 2)])
    def test_freeze_unfreeze_mid_run_equals_stock_loop(self, hybrid, opt, n_ctx):
        """Freeze, re-freeze and unfreeze between steps: same gradients and weights as fused=False at every step."""
        stock = self._run(False, hybrid, opt, n_ctx)
        fast = self._run(True, hybrid, opt, n_ctx)
        self._assert_same_trace(stock, fast)
        everything = {"p_conv0_weight", "p_conv0_bias", "p_dense0_weight", "p_dense0_bias", "p_dense1_weight",
                      "p_dense1_bias"}
        assert fast[4][2] == everything - {"p_dense0_weight", "p_dense0_bias"}, "unfrozen conv0 weight not fused"
        assert fast[-1][2] == everything, "after the last unfreeze every parameter is on the fast path again"

    def test_frozen_by_rule_then_unfrozen_joins_fast_path(self):
        """Frozen from the start by a Rule, unfrozen at step 3: on the fast path from then, bit-identical results."""
        rules = [Rule("p_conv0_*", freeze=True)]
        schedule = {3: ("unfreeze", ["p_conv0_weight", "p_conv0_bias"])}
        stock = self._run(False, "static_alloc", "adam", 1, rules, schedule)
        fast = self._run(True, "static_alloc", "adam", 1, rules, schedule)
        self._assert_same_trace(stock, fast)
        assert "p_conv0_bias" not in fast[2][2]
        assert {"p_conv0_weight", "p_conv0_bias"} <= fast[3][2]

    def test_grad_req_set_directly_stays_on_fast_path(self):
        """grad_req toggled on the Parameter itself (not trainer.freeze) under static_shape: stock results, and every
        parameter stays on the fast path (each step reads the arrays the Parameter holds then)."""
        def run(cls):
            from tests.gluon_lr.test_freeze_partial import backward, batches as conv_batches, build_net
            net = build_net([mx.cpu()])
            net.hybridize(static_alloc=True, static_shape=True)
            trainer = cls(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore=None)
            bias, trace = net.collect_params()["p_conv0_bias"], []
            for step, x in enumerate(conv_batches(6)):
                bias.grad_req = {2: "null", 3: "write"}.get(step, bias.grad_req)
                backward(net, x, [mx.cpu()])
                grads = {(n, 0): p.grad().asnumpy() for n, p in net.collect_params().items() if p.grad_req != "null"}
                trainer.step(len(x))
                trace.append((grads, {(n, 0): p.data().asnumpy() for n, p in net.collect_params().items()}, None))
            return trace, trainer

        stock, _ = run(gluon.Trainer)
        fast, trainer = run(LrTrainer)
        self._assert_same_trace(stock, fast)
        assert len(trainer.fused_params) == 6


class TestMXNetStaticShape:
    """Why the fast path replaces no Parameter array (``gluon_lr._fused.FusedUpdate``): a static_shape graph keeps
    writing the gradient arrays it bound until its gradient requests change."""

    @staticmethod
    def _written_after_replacing_bias_grad(static_shape, change_requests):
        """Replace a bias's gradient array after one backward; which array does the next backward write?"""
        mx.random.seed(0)
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Conv2D(3, 3, in_channels=2), gluon.nn.Dense(2, in_units=27))
        net.initialize(mx.init.Uniform(0.5))
        net.hybridize(static_alloc=True, static_shape=static_shape)
        x = nd.ones((2, 2, 5, 5))
        for step in range(2):
            if step:
                bias = net[0].bias
                old, new = bias._grad[0], nd.zeros_like(bias._grad[0])
                old[:] = 0
                bias._grad[0] = new
                autograd.mark_variables([bias._data[0]], [new], ["write"])
                if change_requests:
                    net[0].weight.grad_req = "null"
            with autograd.record():
                (net(x) ** 2).sum().backward()
        return {"new": bool(np.abs(new.asnumpy()).max() > 0), "old": bool(np.abs(old.asnumpy()).max() > 0)}

    @pytest.mark.parametrize("static_shape, change_requests, written", [
        (False, False, "new"), (True, False, "old"), (True, True, "new")])
    def test_static_shape_graph_rebinds_gradients_only_when_requests_change(self, static_shape, change_requests,
                                                                             written):
        """static_shape keeps writing the gradient array it bound, until a grad_req in the graph changes.

        A trainer that replaced gradient arrays (an earlier design packed them into flat buffers) had to follow this
        rule exactly; the fast path now reads the arrays the Parameters hold at each step.
        """
        got = self._written_after_replacing_bias_grad(static_shape, change_requests)
        assert got == {"new": written == "new", "old": written == "old"}, f"backward wrote {got}"


# ------------------------------------------------------------------------------------------- compiled kernels
#: Adam's bias-corrected lr at lr_mult 0.1, step 3: dmlc's parser gives one ulp above np.float32's rounding.
DMLC_ROUNDS_UP = 2.0201059743896793e-05

def _mx_float(value, dtype):
    """A hyperparameter as MXNet's operators hand it to a kernel: a float32 parameter, cast to the data's dtype."""
    from gluon_lr._fused.base import param_float32
    return np.dtype(dtype).type(param_float32(value))


def _lr_float(name, value, dtype):
    """lr or wd as the kernel's operator gets it: ``multi_sgd_*`` (sgd, sgd_mom) reads its ``lrs``/``wds`` tuples
    correctly rounded to float32; the per-tensor operators parse a scalar ``float`` with dmlc's parser."""
    return np.dtype(dtype).type(np.float32(value)) if name in ("sgd", "sgd_mom") else _mx_float(value, dtype)


def _kernel_case(name, dtype, clip):
    """(arrays before, kwargs of the MXNet operator, consts for the compiled kernel) for one kernel test."""
    f = lambda v: _mx_float(v, dtype)  # noqa: E731
    one, mu = f(1), f(0.9)
    consts = {"sgd": [f(0)], "sgd_single": [one], "sgd_mom": [mu], "nag_mom": [mu, mu + one],
              "adam": [f(0.9), f(0.999), one - f(0.9), one - f(0.999), f(1e-8)]}[name]
    slots = {"sgd": 0, "sgd_single": 0, "sgd_mom": 1, "nag_mom": 1, "adam": 2}[name]
    rs = np.random.RandomState(7)
    n = 10007
    grad = rs.normal(scale=4.0, size=n)
    grad[[3, 4, 5]] = [np.nan, np.inf, -np.inf]
    arrays = [rs.normal(size=n), grad] + [np.abs(rs.normal(scale=0.1, size=n)) for _ in range(slots)]
    kwargs = {"rescale_grad": 0.125, **({"clip_gradient": clip} if clip else {})}
    if name in ("sgd_mom", "nag_mom"):
        kwargs["momentum"] = 0.9
    if name == "adam":
        kwargs.update(beta1=0.9, beta2=0.999, epsilon=1e-8)
    head = [f(0.125), f(clip if clip else -1)]
    return [a.astype(dtype) for a in arrays], kwargs, np.array(head + consts, dtype=dtype)


def _mxnet_reference(name, arrays, kwargs, segments, dtype):
    """The MXNet operator applied to each segment (start, stop, lr, wd) of NDArray copies; numpy results."""
    nds = [nd.array(a, dtype=dtype) for a in arrays]
    for start, stop, lr, wd in segments:
        part = [a[start:stop] for a in nds]
        if name in ("sgd", "sgd_mom"):  # what stock SGD calls
            op = nd.multi_sgd_update if name == "sgd" else nd.multi_sgd_mom_update
            op(*part, out=[part[0]], lrs=[lr], wds=[wd], num_weights=1, **kwargs)
        else:
            op = {"sgd_single": nd.sgd_update, "nag_mom": nd.nag_mom_update, "adam": nd.adam_update}[name]
            op(*part, out=part[0], lr=lr, wd=wd, **kwargs)
    return [a.asnumpy() for a in nds]


class TestCompiledKernels:
    """Each compiled kernel (``mxupdate.kernels``) equals its MXNet 1.9.1 operator bit for bit."""

    @pytest.mark.parametrize("clip", [None, 0.3], ids=["noclip", "clip"])
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    @pytest.mark.parametrize("name", ["sgd", "sgd_single", "sgd_mom", "nag_mom", "adam"])
    def test_kernel_equals_operator(self, name, dtype, clip):
        """Three table rows (addresses of a segment in each array) with their own lr/wd (one wd 0, one lr that
        dmlc's parser rounds one ulp away from np.float32), a gap left alone, NaN/inf gradients: max diff 0.0."""
        from mxupdate import kernels as _kernels
        arrays, kwargs, consts = _kernel_case(name, dtype, clip)
        segments = [(0, 4000, 0.05, 1e-3), (4000, 7001, 0.3, 0.0), (7500, 10007, DMLC_ROUNDS_UP, DMLC_ROUNDS_UP)]
        expected = _mxnet_reference(name, arrays, kwargs, segments, dtype)
        got = [a.copy() for a in arrays]
        itemsize = np.dtype(dtype).itemsize
        addresses = np.array([[a.ctypes.data + s[0] * itemsize for a in got] for s in segments], dtype=np.int64)
        lengths = np.array([s[1] - s[0] for s in segments], dtype=np.int64)
        lrs = np.array([_lr_float(name, s[2], dtype) for s in segments], dtype=dtype)
        wds = np.array([_lr_float(name, s[3], dtype) for s in segments], dtype=dtype)
        getattr(_kernels, name)(addresses, lengths, lrs, wds, consts, clip is not None)
        for label, want, have in zip(["weight", "grad", "state0", "state1"], expected, got):
            same = (want == have) | (np.isnan(want) & np.isnan(have))
            with np.errstate(invalid="ignore"):  # inf - inf where both hold the same infinity
                worst = np.nanmax(np.abs(want - have)[~same], initial=0.0)
            assert same.all(), f"{name} {dtype} {label}: {(~same).sum()} elements differ, largest by {worst:.3g}"
        assert np.array_equal(got[0][7001:7500], arrays[0][7001:7500])
        assert not np.array_equal(got[0][:4000], arrays[0][:4000])


FLOAT64 = [("sgd", {"learning_rate": 0.1, "wd": 1e-3}),
           ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3, "clip_gradient": 0.05}),
           ("sgd", {"learning_rate": DMLC_ROUNDS_UP, "momentum": 0.9, "wd": DMLC_ROUNDS_UP}),  # lrs/wds tuples
           ("nag", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
           ("nag", {"learning_rate": 0.1, "wd": 1e-3}),
           ("adam", {"learning_rate": 0.01, "wd": 1e-3, "clip_gradient": 0.05})]


def wide_net(seed=0):
    """Dense(320) on 256 inputs then Dense(5): 84k parameters, enough for the compiled path to split the work."""
    net = gluon.nn.HybridSequential(prefix="wide_")
    with net.name_scope():
        net.add(gluon.nn.Dense(320, in_units=256, activation="relu", prefix="d0_"))
        net.add(gluon.nn.Dense(5, in_units=320, prefix="d1_"))
    net.initialize(mx.init.Uniform(0.1))
    rs = np.random.RandomState(seed)
    for param in net.collect_params().values():
        param.set_data(nd.array(rs.normal(scale=0.05, size=param.shape)))
    params = net.collect_params()
    params["wide_d0_bias"].lr_mult, params["wide_d1_weight"].lr_mult = 3.0, 0.5
    params["wide_d0_bias"].wd_mult = 0.0
    return net


class TestCompiledPath:
    """The trainer on the compiled kernels: float64, work split across threads, fork, and numba missing."""

    @pytest.mark.parametrize("name, hyper", FLOAT64, ids=[f"{n}-{'-'.join(h)}" for n, h in FLOAT64])
    def test_float64_equals_stock(self, name, hyper):
        """float64 parameters take the fast path (compiled kernels in float64) and equal the stock trainer exactly."""
        stock, _ = train(lambda p: gluon.Trainer(p, name, dict(hyper)), dtype="float64", norm=False)
        fast, trainer = train(lambda p: LrTrainer(p, name, dict(hyper)), dtype="float64", norm=False)
        assert_close(stock, fast, 0.0)
        assert set(trainer.fused_params) == {"net_d0_weight", "net_d0_bias", "net_d1_weight", "net_d1_bias"}

    @pytest.mark.parametrize("threads", ["2", "3"])
    @pytest.mark.parametrize("name, hyper", [("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
                                             ("adam", {"learning_rate": 0.01, "wd": 1e-3})])
    def test_split_across_threads(self, monkeypatch, name, hyper, threads):
        """84k parameters in runs of unequal lr/wd, cut into 2 or 3 shares (OMP_NUM_THREADS): stock weights exactly."""
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        finals = []
        for cls in (gluon.Trainer, LrTrainer):
            net = wide_net()
            trainer = cls(net.collect_params(), name, dict(hyper))
            for step in range(5):
                x = nd.array(np.random.RandomState(step).normal(size=(8, 256)))
                with autograd.record():
                    loss = ((net(x) - 1.0) ** 2).mean()
                loss.backward()
                trainer.step(8)
            finals.append({(n, ""): p.data().asnumpy() for n, p in net.collect_params().items()})
        assert_close(finals[0], finals[1], 0.0)
        assert len(trainer.fused_params) == 4
        assert moved({(n, ""): p.data().asnumpy() for n, p in wide_net().collect_params().items()}, finals[1]) == {
            "wide_d0_weight", "wide_d0_bias", "wide_d1_weight", "wide_d1_bias"}

    def test_forked_child_steps(self):
        """A child forked after a split step (thread pool live in the parent) steps on its own, as the parent does."""
        import multiprocessing
        net = wide_net()
        trainer = LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})

        def step(seed):
            x = nd.array(np.random.RandomState(seed).normal(size=(4, 256)))
            with autograd.record():
                loss = (net(x) ** 2).mean()
            loss.backward()
            trainer.step(4)

        def child(queue):
            step(1)
            queue.put(net.collect_params()["wide_d0_weight"].data().asnumpy())

        step(0)
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        process = context.Process(target=child, args=(queue,))
        process.start()
        try:
            in_child = queue.get(timeout=60)
        finally:
            process.join(10)
            if process.is_alive():
                process.kill()
        step(1)
        in_parent = net.collect_params()["wide_d0_weight"].data().asnumpy()
        assert process.exitcode == 0 and np.array_equal(in_child, in_parent)

    @pytest.mark.parametrize("name, hyper", [("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
                                             ("sgd", {"learning_rate": 0.1, "wd": 1e-3}),
                                             ("nag", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
                                             ("nag", {"learning_rate": 0.1, "wd": 1e-3}),
                                             ("adam", {"learning_rate": 0.01, "wd": 1e-3, "clip_gradient": 0.05})])
    def test_without_numba(self, monkeypatch, name, hyper):
        """numba not importable: a warning says so, the numpy/MXNet kernels run (each timed, the faster kept): stock."""
        import sys
        monkeypatch.setitem(sys.modules, "numba", None)
        monkeypatch.delitem(sys.modules, "mxupdate.kernels", raising=False)
        stock, _ = train(lambda p: gluon.Trainer(p, name, dict(hyper)))
        with pytest.warns(UserWarning, match="compiled update kernels need numba"):
            fast, trainer = train(lambda p: LrTrainer(p, name, dict(hyper)))
        assert_close(stock, fast, 0.0)
        assert len(trainer.fused_params) == 6

    def test_import_leaves_numba_alone(self):
        """``import gluon_lr`` does not import numba: the compiled kernels load at the first CPU update."""
        import os
        import subprocess
        import sys
        import gluon_lr
        root = os.path.dirname(os.path.dirname(os.path.abspath(gluon_lr.__file__)))
        code = ("import sys, gluon_lr; "
                "print(sorted(m for m in ('numba', 'mxupdate.kernels') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env=dict(os.environ, PYTHONPATH=root))
        assert out.stdout.strip() == "[]", out.stdout + out.stderr


FUSED_OPTIMIZERS = [("sgd", {"learning_rate": 0.1}), ("sgd", {"learning_rate": 0.1, "momentum": 0.9}),
                    ("nag", {"learning_rate": 0.1, "momentum": 0.9}), ("adam", {"learning_rate": 1e-3}),
                    ("rmsprop", {"learning_rate": 1e-3}), ("rmsprop", {"learning_rate": 1e-3, "centered": True}),
                    ("adagrad", {"learning_rate": 0.01})]


class TestDeepNetBitIdentical:
    """A model-zoo resnet18_v1, half its parameters at lr_mult 0.1, weight decay, six steps: every fused optimizer
    gives the stock Trainer's weights and BatchNorm statistics bit for bit (the case that found Adam's lr parse)."""

    @staticmethod
    def _run(fused, name, hyper, steps=6):
        mx.random.seed(0)
        net = gluon.model_zoo.vision.resnet18_v1(classes=10)
        net.initialize(mx.init.Xavier())
        x, y = nd.random.normal(shape=(4, 3, 32, 32)), nd.array([1, 2, 3, 4])
        trainer = LrTrainer(net, name, dict(hyper, wd=1e-4), rules=[Rule("re:.*stage[12]_.*", lr_mult=0.1)],
                            fused=fused)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        history = []
        for _ in range(steps):
            with autograd.record():
                loss = loss_fn(net(x), y).sum()
            loss.backward()
            trainer.step(4)
            history.append([(k, p.data().asnumpy().copy()) for k, p in net.collect_params().items()])
        return history, trainer

    @pytest.mark.parametrize("name, hyper", FUSED_OPTIMIZERS, ids=[f"{n}-{len(h)}" for n, h in FUSED_OPTIMIZERS])
    def test_six_steps(self, name, hyper):
        """Weights and running statistics equal the stock Trainer's exactly after every step."""
        fast, trainer = self._run(True, name, hyper)
        stock, _ = self._run(False, name, hyper)
        assert len(trainer.fused_params) > 0
        for step, (got, want) in enumerate(zip(fast, stock), 1):  # two nets: same order, other name prefixes
            worst = max((float(np.abs(g - w).max()), k) for (k, g), (_, w) in zip(got, want))
            assert worst[0] == 0.0, f"{name}: step {step}, {worst[1]} differs by {worst[0]}"


def test_float_parameters_parsed_as_mxnet_parses_them():
    """MXNet parses an operator's float parameter from its decimal string, one unit in the last place away from
    numpy's rounding for Adam's lr at step 3 with lr_mult 0.1; the fast path hands kernels MXNet's value."""
    from gluon_lr._fused.base import param_float32
    lr = 1e-3 * 0.1 * math.sqrt(1 - 0.999 ** 3) / (1 - 0.9 ** 3)
    echo = -nd.sgd_update(nd.zeros(1), nd.ones(1), lr=lr, wd=0.0, rescale_grad=1.0).asnumpy()[0]
    assert param_float32(lr) == echo == np.nextafter(np.float32(lr), np.float32(1))
    assert param_float32(0.0) == 0.0 and param_float32(-1.0) == -1.0
