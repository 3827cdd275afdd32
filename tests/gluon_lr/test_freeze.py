"""Freezing whole parameters: value, optimizer state and update count bit-identical; exact resume; norm statistics.

Optimizer state and update counts live in MXNet's Updater objects (``trainer._updaters[k].states`` or the kvstore's
updater) and ``optimizer._all_index_update_counts``: there is no public accessor, so these tests read them there.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn

from gluon_lr import LrTrainer, MaskError, ParamsTypeError, Rule, RuleMatchError, UnknownParameterError

OPTIMIZERS = {
    "sgd": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}),
    "nag": ("nag", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}),
    "adam": ("adam", {"learning_rate": 0.01, "wd": 0.01}),
    "rmsprop": ("rmsprop", {"learning_rate": 0.01, "wd": 0.01}),
    "rmsprop_centered": ("rmsprop", {"learning_rate": 0.01, "wd": 0.01, "centered": True, "gamma2": 0.9}),
    "adagrad": ("adagrad", {"learning_rate": 0.1, "wd": 0.01}),
    "lamb": ("lamb", {"learning_rate": 0.01, "wd": 0.01}),
}
ROOT = Path(__file__).resolve().parents[2]
#: Further optimizers, with the momentum that gives them a state where they take one (test_masks runs them too).
EXTRA_OPTIMIZERS = dict({name: (name, {"learning_rate": 0.01, "wd": 0.01})
                         for name in ("nadam", "adadelta", "ftrl", "signum", "ftml", "dcasgd")},
                        **{name: (name, {"learning_rate": 0.01, "wd": 0.01, "momentum": 0.9})
                           for name in ("lars", "lbsgd", "ccsgd")})
#: Optimizers checked for point 1 (frozen stays frozen) only: sgld draws noise (no unmasked reference can match),
#: test ascends the gradient (its weights diverge), adamax runs without the first bias and with a non-zero head bias
#: (MXNet's Adamax has no epsilon, so an exactly-zero gradient, of a bias in front of BatchNorm or of a zero head
#: bias as the BatchNorm outputs sum to 0, gives 0/0 = NaN). With OPTIMIZERS, EXTRA_OPTIMIZERS and
#: test_freeze_groupadagrad (MXNet's refuses 1-D parameters and weight decay): every optimizer MXNet 1.9.1 registers.
FREEZE_ONLY_OPTIMIZERS = {name: (name, {"learning_rate": 0.01, "wd": 0.01}) for name in ("sgld", "test", "adamax")}
#: (number of contexts, kvstore, update_on_kvstore)
CONFIGS = {"1ctx": (1, None, None), "2ctx": (2, "device", False), "2ctx_kv": (2, "device", True)}


def contexts(n):
    """``n`` CPU contexts standing in for GPUs."""
    return [mx.cpu(i) for i in range(n)]


def build_net(ctx, seed=0, first_bias=True):
    """Dense(6) -> BatchNorm -> Dense(3) on 4 inputs, hybridized, seeded."""
    mx.random.seed(seed)
    net = nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(nn.Dense(6, in_units=4, use_bias=first_bias), nn.BatchNorm(in_channels=6), nn.Dense(3, in_units=6))
    net.initialize(mx.init.Uniform(0.5), ctx=ctx)
    net.hybridize()
    return net


def batches(n, seed=1, rows=4):
    """``n`` fixed input batches of shape (rows, 4)."""
    rng = np.random.RandomState(seed)
    return [rng.uniform(-1, 1, size=(rows, 4)).astype(np.float32) for _ in range(n)]


def train_step(net, trainer, data, ctx):
    """One forward (train mode) / backward / step with the batch split over ``ctx``."""
    parts = np.array_split(data, len(ctx))
    with autograd.record(train_mode=True):
        losses = [(net(nd.array(part, ctx=c)) ** 2).sum() for part, c in zip(parts, ctx)]
    for loss in losses:
        loss.backward()
    trainer.step(len(data))


def make_trainer(params, opt, config):
    """An LrTrainer for one optimizer name and one context configuration."""
    name, kwargs = {**OPTIMIZERS, **EXTRA_OPTIMIZERS, **FREEZE_ONLY_OPTIMIZERS}[opt]
    _, kvstore, on_kv = CONFIGS[config]
    return LrTrainer(params, name, dict(kwargs), kvstore=kvstore, update_on_kvstore=on_kv)


def state_arrays(trainer, index):
    """Every optimizer state array of parameter ``index``, on every updater (or the kvstore's)."""
    from mxformats.optimizer_state import state_arrays as arrays_of
    updaters = [trainer._kvstore._updater] if trainer._update_on_kvstore else trainer._updaters
    return [arr for updater in updaters for arr in arrays_of(updater.states.get(index))]


def update_counts(trainer, index):
    """The per-device update counts of parameter ``index`` (Adam's bias correction uses them)."""
    optimizer = trainer._kvstore._updater.optimizer if trainer._update_on_kvstore else trainer._optimizer
    return {dev: counts.get(index) for dev, counts in optimizer._all_index_update_counts.items()}


def snapshot(trainer, names):
    """Copies (numpy) of the weights on every context and the optimizer state arrays of ``names``."""
    index = {p.name: i for i, p in enumerate(trainer._params)}
    shot = {}
    for name in names:
        param = trainer._params[index[name]]
        states = [s.asnumpy() for s in state_arrays(trainer, index[name])]
        shot[name] = ([d.asnumpy() for d in param.list_data()], states, update_counts(trainer, index[name]))
    return shot


def assert_same(before, after, what):
    """Bit-exact equality of two snapshots, naming the array and the largest difference on failure."""
    for name in before:
        for kind, old, new in (("weight", before[name][0], after[name][0]), ("state", before[name][1], after[name][1])):
            assert len(old) == len(new), f"{what}: {name} {kind}: {len(old)} arrays before, {len(new)} after"
            for k, (a, b) in enumerate(zip(old, new)):
                assert np.array_equal(a, b), (f"{what}: {name} {kind}[{k}] changed, max |diff| "
                                              f"{np.abs(a - b).max():.3g}")
        assert before[name][2] == after[name][2], f"{what}: {name} update count {before[name][2]} -> {after[name][2]}"


class TestFreeze:
    """trainer.freeze: a frozen parameter, its state and its count do not change, for every optimizer."""

    @pytest.mark.parametrize("config", list(CONFIGS))
    @pytest.mark.parametrize("opt", list(OPTIMIZERS) + list(EXTRA_OPTIMIZERS) + list(FREEZE_ONLY_OPTIMIZERS))
    def test_frozen_parameters_bit_identical(self, opt, config):
        """Weights (every context), state arrays and update counts of a frozen layer stay bit-identical."""
        ctx = contexts(CONFIGS[config][0])
        bias = opt != "adamax"  # MXNet's Adamax has no epsilon: a gradient of exactly 0 gives 0/0 = NaN
        net, data = build_net(ctx, first_bias=bias), batches(6)
        if not bias:  # no bias before BatchNorm (its gradient is 0); the head's bias not 0 (sum of BN outputs is 0)
            net[2].bias.set_data(nd.full((3,), 0.1))
        trainer = make_trainer(net, opt, config)
        for x in data[:2]:
            train_step(net, trainer, x, ctx)
        frozen = trainer.freeze(net[0])
        assert frozen == ["net_dense0_bias", "net_dense0_weight"][not bias:]
        before, head = snapshot(trainer, frozen), net[2].weight.data(ctx[-1]).asnumpy()
        for x in data[2:]:
            train_step(net, trainer, x, ctx)
        assert_same(before, snapshot(trainer, frozen), f"{opt}/{config}")
        trained = net[2].weight.data(ctx[-1]).asnumpy()
        moved = np.abs(trained - head).max()
        diverged = opt == "test" and not np.isfinite(trained).all()  # MXNet's `test` ascends the gradient
        assert moved > 1e-5 or diverged, f"{opt}/{config}: the unfrozen head did not train (max |dW| {moved:.3g})"

    @pytest.mark.parametrize("config", list(CONFIGS))
    def test_freeze_groupadagrad(self, config):
        """GroupAdaGrad (2-D weights only, no weight decay, as MXNet requires): the frozen weight, its row history
        and its count stay bit-identical while the other layer trains."""
        ctx = contexts(CONFIGS[config][0])
        mx.random.seed(0)
        net = nn.HybridSequential(prefix="net_")
        with net.name_scope():
            net.add(nn.Dense(6, in_units=4, use_bias=False), nn.Dense(3, in_units=6, use_bias=False))
        net.initialize(mx.init.Uniform(0.5), ctx=ctx)
        net.hybridize()
        _, kvstore, on_kv = CONFIGS[config]
        trainer = LrTrainer(net, "groupadagrad", {"learning_rate": 0.1}, kvstore=kvstore, update_on_kvstore=on_kv)
        data = batches(6)
        for x in data[:2]:
            train_step(net, trainer, x, ctx)
        assert trainer.freeze(net[0]) == ["net_dense0_weight"]
        before, head = snapshot(trainer, ["net_dense0_weight"]), net[1].weight.data(ctx[-1]).asnumpy()
        for x in data[2:]:
            train_step(net, trainer, x, ctx)
        assert_same(before, snapshot(trainer, ["net_dense0_weight"]), f"groupadagrad/{config}")
        assert np.abs(net[1].weight.data(ctx[-1]).asnumpy() - head).max() > 1e-5

    @pytest.mark.parametrize("static", [False, True], ids=["hybridized", "static_alloc"])
    @pytest.mark.parametrize("config", list(CONFIGS))
    def test_frozen_parameter_has_no_gradient_and_resumes_with_correct_gradient(self, config, static):
        """Frozen: no gradient array; unfrozen in the hybridized net: the gradient equals a never-frozen twin's."""
        ctx = contexts(CONFIGS[config][0])
        net, twin, x = build_net(ctx), build_net(ctx), batches(1)[0]
        net.hybridize(static_alloc=static, static_shape=static)
        trainer = make_trainer(net, "sgd", config)
        trainer.freeze("net_dense0_*")
        train_step(net, trainer, x, ctx)
        with pytest.raises(RuntimeError, match="grad_req='null'"):
            net[0].weight.grad(ctx[0])
        trainer.unfreeze("net_dense0_*")
        net_params, twin_params = net.collect_params(), twin.collect_params()
        for name in net_params:  # the twin takes the same weights, then both compute one gradient
            for dst, src in zip(twin_params[name].list_data(), net_params[name].list_data()):
                src.copyto(dst)
        for model in (net, twin):
            with autograd.record():
                loss = (model(nd.array(x, ctx=ctx[0])) ** 2).sum()
            loss.backward()
        got, want = net[0].weight.grad(ctx[0]).asnumpy(), twin[0].weight.grad(ctx[0]).asnumpy()
        assert np.abs(want).max() > 0 and np.array_equal(got, want), f"max |diff| {np.abs(got - want).max():.3g}"

    def test_rules_freeze_in_order(self):
        """Rule(..., freeze=True) freezes at construction; a later Rule(..., freeze=False) wins where both select."""
        net = build_net(contexts(1))
        rules = [Rule("net_dense*", freeze=True), Rule("net_dense1_*", freeze=False, lr_mult=2.0)]
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, kvstore=None, rules=rules)
        assert trainer.frozen == {"net_dense0_weight", "net_dense0_bias"}
        assert net[0].weight.grad_req == "null" and net[2].weight.grad_req == "write"
        assert trainer.lr_mult["net_dense1_weight"] == 2.0 and trainer.explain().to_dict()["net_dense0_bias"]["frozen"]

    def test_lr_mult_zero_and_zero_gradient_do_not_freeze_in_mxnet(self):
        """The pitfall on stock gluon.Trainer: lr_mult=0 under momentum and a zero gradient under Adam still move."""
        for opt, kwargs, how in (("sgd", {"learning_rate": 0.1, "momentum": 0.9}, "lr_mult"),
                                 ("adam", {"learning_rate": 0.01}, "zero_grad")):
            ctx = contexts(1)
            net, data = build_net(ctx), batches(3)
            trainer = gluon.Trainer(net.collect_params(), opt, kwargs)
            for x in data[:2]:
                train_step(net, trainer, x, ctx)
            weight = net[0].weight
            before = weight.data().asnumpy()
            with autograd.record():
                loss = (net(nd.array(data[2])) ** 2).sum()
            loss.backward()
            if how == "lr_mult":
                weight.lr_mult = 0.0
            else:
                weight.grad()[:] = 0
            trainer.step(4)
            moved = np.abs(weight.data().asnumpy() - before).max()
            assert moved > 1e-4, f"{opt} {how}: expected MXNet to keep moving the weight, max |dW| {moved:.3g}"


class TestUnfreezeResume:
    """Unfreeze resumes exactly: as if the frozen steps had not happened for that parameter."""

    @staticmethod
    def _branches(ctx, seed):
        """Two independent Dense layers ``p`` and ``q``: p's gradient does not depend on q."""
        mx.random.seed(seed)
        p, q = nn.Dense(3, in_units=4, prefix="p_"), nn.Dense(3, in_units=4, prefix="q_")
        for layer in (p, q):
            layer.initialize(mx.init.Uniform(0.5), ctx=ctx)
        return p, q

    @staticmethod
    def _step(layers, trainer, x, ctx):
        """One step on the sum of the layers' losses."""
        parts = np.array_split(x, len(ctx))
        with autograd.record():
            losses = [sum(((layer(nd.array(part, ctx=c)) - 0.3) ** 2).sum() for layer in layers)
                      for part, c in zip(parts, ctx)]
        for loss in losses:
            loss.backward()
        trainer.step(len(x))

    @pytest.mark.parametrize("config", list(CONFIGS))
    @pytest.mark.parametrize("opt", list(OPTIMIZERS))
    def test_resume_equals_reference_that_never_saw_the_frozen_steps(self, opt, config):
        """p frozen for 3 steps then unfrozen: weights, state and counts equal a run that skipped those batches."""
        ctx, data = contexts(CONFIGS[config][0]), batches(7, rows=4)
        p, q = self._branches(ctx, seed=3)
        trainer = make_trainer([p.collect_params(), q.collect_params()], opt, config)
        ref, _ = self._branches(ctx, seed=3)
        ref_trainer = make_trainer(ref.collect_params(), opt, config)
        for x in data[:2]:
            self._step([p, q], trainer, x, ctx)
            self._step([ref], ref_trainer, x, ctx)
        trainer.freeze(p)
        for x in data[2:5]:
            self._step([p, q], trainer, x, ctx)
        trainer.unfreeze(p)
        for x in data[5:]:
            self._step([p, q], trainer, x, ctx)
            self._step([ref], ref_trainer, x, ctx)
        got = snapshot(trainer, ["p_weight", "p_bias"])
        want = snapshot(ref_trainer, ["p_weight", "p_bias"])
        assert_same(want, got, f"{opt}/{config} resume")


    @pytest.mark.parametrize("config", list(CONFIGS))
    @pytest.mark.parametrize("aggregate", [True, False], ids=["aggregated", "one_by_one"])
    def test_lr_schedule_follows_the_global_step_after_unfreeze(self, aggregate, config):
        """FactorScheduler halving every step: after unfreeze p gets the same rate as q (MXNet alone lags p)."""
        ctx = contexts(CONFIGS[config][0])
        p, q = (gluon.Parameter(name, shape=(1,), init=mx.init.One()) for name in ("a_p", "b_q"))
        for param in (p, q):
            param.initialize(ctx=ctx)
        optimizer = mx.optimizer.SGD(learning_rate=1.0, lr_scheduler=mx.lr_scheduler.FactorScheduler(1, 0.5))
        optimizer.aggregate_num = 4 if aggregate else 0
        _, kvstore, on_kv = CONFIGS[config]
        trainer = LrTrainer([p, q], optimizer, kvstore=kvstore, update_on_kvstore=on_kv)
        for step in range(6):
            if step in (2, 4):
                (trainer.freeze if step == 2 else trainer.unfreeze)("a_p")
            before = [param.data(ctx[0]).asscalar() for param in (p, q)]
            with autograd.record():
                losses = [p.data(c) + q.data(c) for c in ctx]
            for loss in losses:
                loss.backward()
            trainer.step(len(ctx))  # gradient 1 per parameter: the change is the learning rate
            lr_p, lr_q = (b - param.data(ctx[0]).asscalar() for b, param in zip(before, (p, q)))
            assert lr_q == 0.5 ** step, f"step {step}: q's rate {lr_q}"
            assert lr_p == (0.0 if step in (2, 3) else 0.5 ** step), f"step {step}: p's rate {lr_p}, q's {lr_q}"
            assert trainer.optimizer.num_update == step + 1, f"step {step}: num_update {trainer.optimizer.num_update}"


class TestNormStatistics:
    """The running statistics of a frozen norm layer stay fixed, also in train mode and in a hybridized parent."""

    @pytest.mark.parametrize("config", ["1ctx", "2ctx", "2ctx_kv"])
    def test_held_while_frozen_released_after(self, config):
        """Frozen BatchNorm: running mean/var bit-identical over 3 train-mode steps; unfrozen: they move again."""
        ctx = contexts(CONFIGS[config][0])
        outer = nn.HybridSequential(prefix="outer_")  # BN two levels down in a hybridized parent
        net = build_net(ctx)
        outer.add(net)
        outer.hybridize()
        trainer = make_trainer(outer, "adam", config)
        data = batches(6)
        train_step(outer, trainer, data[0], ctx)
        trainer.freeze(net[1])
        stats = [net[1].running_mean, net[1].running_var]
        before = [[d.asnumpy() for d in s.list_data()] for s in stats]
        for x in data[1:4]:
            train_step(outer, trainer, x, ctx)
            for s, old in zip(stats, before):
                for k, (a, d) in enumerate(zip(old, s.list_data())):
                    assert np.array_equal(a, d.asnumpy()), f"{s.name}[ctx {k}] moved by {np.abs(a - d.asnumpy()).max()}"
        trainer.unfreeze(net[1])
        train_step(outer, trainer, data[4], ctx)
        moved = np.abs(stats[0].data(ctx[0]).asnumpy() - before[0][0]).max()
        assert moved > 1e-6, f"after unfreeze the running mean should move again, max |d| {moved:.3g}"

    def test_frozen_before_deferred_initialisation(self):
        """Frozen before the first forward (shapes unknown): the statistics keep their initial 0 / 1 values."""
        mx.random.seed(0)
        net = nn.HybridSequential(prefix="lazy_")
        with net.name_scope():
            net.add(nn.Dense(6), nn.BatchNorm(), nn.Dense(3))
        net.initialize(mx.init.Xavier())
        net.hybridize()
        trainer = make_trainer(net, "sgd", "1ctx")
        trainer.freeze(net[1])
        for x in batches(2):
            train_step(net, trainer, x, contexts(1))
        assert np.array_equal(net[1].running_mean.data().asnumpy(), np.zeros(6, np.float32))
        assert np.array_equal(net[1].running_var.data().asnumpy(), np.ones(6, np.float32))

    def test_hold_norm_stats_false_lets_them_run(self):
        """freeze(..., hold_norm_stats=False): gamma/beta frozen, running statistics still follow the batches."""
        ctx = contexts(1)
        net, data = build_net(ctx), batches(2)
        trainer = make_trainer(net, "sgd", "1ctx")
        trainer.freeze(net[1], hold_norm_stats=False)
        gamma, mean = net[1].gamma.data().asnumpy(), net[1].running_mean.data().asnumpy()
        for x in data:
            train_step(net, trainer, x, ctx)
        assert np.array_equal(gamma, net[1].gamma.data().asnumpy()), "gamma is frozen and must not move"
        assert np.abs(net[1].running_mean.data().asnumpy() - mean).max() > 1e-6, "running mean should move"

    def test_partly_frozen_layer_is_not_held(self):
        """Only gamma frozen: the layer still trains (beta), so its statistics run."""
        ctx = contexts(1)
        net, data = build_net(ctx), batches(2)
        trainer = make_trainer(net, "sgd", "1ctx")
        trainer.freeze("net_batchnorm0_gamma")
        mean = net[1].running_mean.data().asnumpy()
        for x in data:
            train_step(net, trainer, x, ctx)
        assert np.abs(net[1].running_mean.data().asnumpy() - mean).max() > 1e-6


#: The fresh process of TestSaveLoad: load parameters and states, step, unfreeze, step; report as JSON.
_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np, mxnet as mx
    from tests.gluon_lr.test_freeze import build_net, make_trainer, train_step
    folder = sys.argv[1]
    net = build_net([mx.cpu()], seed=11, first_bias=False)
    net.load_parameters(folder + "/net.params")
    trainer = make_trainer(net, "adam", "1ctx")
    trainer.load_states(folder + "/trainer.states")
    params = net.collect_params()
    loaded = {"frozen": sorted(trainer.frozen), "masked": dict(trainer.masked_elements),
              "grad_req": params["net_dense0_weight"].grad_req}
    watch = ["net_dense0_weight", "net_batchnorm0_gamma", "net_batchnorm0_running_mean",
             "net_batchnorm0_running_var", "net_dense1_weight"]
    before = {n: params[n].data().asnumpy() for n in watch}
    train_step(net, trainer, np.load(folder + "/x.npy"), [mx.cpu()])
    after = {n: params[n].data().asnumpy() for n in watch}
    trainer.unfreeze("net_dense0_weight")
    train_step(net, trainer, np.load(folder + "/x2.npy"), [mx.cpu()])
    np.savez(folder + "/child.npz", **{n: p.data().asnumpy() for n, p in params.items()})
    mask = np.load(folder + "/mask.npy") == 1
    print(json.dumps(dict(loaded, unchanged={n: bool(np.array_equal(before[n], after[n])) for n in watch},
                          masked_unchanged=bool(np.array_equal(before[watch[-1]][mask], after[watch[-1]][mask])))))
    """)


def _run_child(folder) -> dict:
    """Run ``_CHILD`` in a fresh Python process on the files in ``folder``; return its JSON report."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(folder)], capture_output=True, text=True, env=env,
                         timeout=120, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


class TestSaveLoad:
    """Freezing and masks survive save_states/load_states into a FRESH process (by name)."""

    def test_fresh_process_round_trip(self, tmp_path):
        """A new process loads the states: same freezing, nothing frozen moves, and after unfreeze it continues
        bit for bit as the original process does."""
        ctx = contexts(1)
        # No bias in front of BatchNorm: its gradient is pure rounding noise (analytically 0), which Adam blows up
        # to lr-sized steps, so it differs between any two runs whose float history differs at all.
        net, data = build_net(ctx, first_bias=False), batches(3)
        trainer = make_trainer(net, "adam", "1ctx")
        train_step(net, trainer, data[0], ctx)
        trainer.freeze(net[1])
        trainer.freeze("net_dense0_weight")
        mask = (np.random.RandomState(5).uniform(size=(3, 6)) > 0.5).astype(np.float32)
        trainer.freeze("net_dense1_weight", mask=mask)
        train_step(net, trainer, data[1], ctx)
        net.save_parameters(str(tmp_path / "net.params"))
        trainer.save_states(str(tmp_path / "trainer.states"))
        np.save(tmp_path / "x.npy", data[2])
        np.save(tmp_path / "x2.npy", batches(1, seed=8)[0])
        np.save(tmp_path / "mask.npy", mask)
        result = _run_child(tmp_path)
        assert result["frozen"] == ["net_batchnorm0_beta", "net_batchnorm0_gamma", "net_dense0_weight"]
        assert result["masked"] == {"net_dense1_weight": int(mask.sum())}
        assert result["grad_req"] == "null"
        assert result["masked_unchanged"]
        assert result["unchanged"] == {"net_dense0_weight": True, "net_batchnorm0_gamma": True,
                                       "net_batchnorm0_running_mean": True, "net_batchnorm0_running_var": True,
                                       "net_dense1_weight": False}
        train_step(net, trainer, data[2], ctx)  # the original process takes the same two steps
        trainer.unfreeze("net_dense0_weight")
        train_step(net, trainer, np.load(tmp_path / "x2.npy"), ctx)
        child = np.load(tmp_path / "child.npz")
        diffs = {name: float(np.abs(child[name] - param.data().asnumpy()).max())
                 for name, param in net.collect_params().items()}
        assert not any(diffs.values()), f"the fresh process differs (max |diff| per parameter): {diffs}"


class TestReporting:
    """Freezing shows in explain() and in the exported settings file."""

    def test_explain_and_settings(self, tmp_path):
        """explain() rows and settings params carry frozen and the masked element count."""
        net = build_net(contexts(1))
        trainer = make_trainer(net, "sgd", "1ctx")
        trainer.freeze(net[0])
        trainer.freeze("net_dense1_weight", mask=np.eye(3, 6))
        rows = trainer.explain().to_dict()
        assert rows["net_dense0_weight"]["frozen"] and not rows["net_dense1_weight"]["frozen"]
        assert rows["net_dense1_weight"]["masked"] == 3 and rows["net_dense0_weight"]["masked"] == 0
        lines = {line.split()[0]: line.split() for line in str(trainer.explain()).splitlines()[2:]}
        assert lines["net_dense0_weight"][-3:] == ["yes", "-", "-"], lines["net_dense0_weight"]
        assert lines["net_dense1_weight"][-3:] == ["-", "3", "-"], lines["net_dense1_weight"]
        params = trainer.export_settings(str(tmp_path / "s.json"))["params"]
        assert params["net_dense0_weight"]["frozen"] is True and params["net_dense1_bias"]["frozen"] is False
        assert params["net_dense1_weight"]["masked_elements"] == 3


def _foreign_param():
    """A Parameter of another network."""
    other = nn.Dense(2, in_units=2, prefix="other_")
    other.initialize()
    return other.weight


ERRORS = [
    ("Rule.freeze not a bool", lambda t: Rule("net_*", freeze="yes"), ParamsTypeError,
     r"freeze must be True, False or None, got 'yes'"),
    ("select of a wrong type", lambda t: t.freeze(3.5), ParamsTypeError, r"select must be a parameter name"),
    ("selector matching nothing", lambda t: t.freeze("nothing_*"), RuleMatchError, r"selects no parameter.*nearest"),
    ("foreign Parameter", lambda t: t.unfreeze(_foreign_param()), UnknownParameterError, r"'other_weight' is not one"),
    ("mask of wrong shape", lambda t: t.freeze("net_dense0_weight", mask=np.zeros((2, 2))), MaskError,
     r"shape \(6, 4\), got \(2, 2\)"),
    ("mask not 0/1", lambda t: t.freeze("net_dense0_weight", mask=np.full((6, 4), 2.0)), MaskError, r"only 0 and 1"),
    ("mask not an array", lambda t: t.freeze("net_dense0_weight", mask="all"), MaskError, r"numpy array or NDArray"),
    ("mask for several parameters", lambda t: t.freeze("net_dense0_*", mask=np.zeros((6, 4))), MaskError,
     r"exactly one parameter.*selects 2"),
    ("mask on a wholly frozen parameter", lambda t: (t.freeze("net_dense0_weight"),
                                                    t.freeze("net_dense0_weight", mask=np.zeros((6, 4)))),
     MaskError, r"frozen whole.*unfreeze"),
]


class TestErrors:
    """Bad input to freeze/unfreeze raises the project's own errors, naming the object and the fix."""

    @pytest.mark.parametrize("description,call,error,pattern", ERRORS, ids=[e[0] for e in ERRORS])
    def test_error(self, description, call, error, pattern):
        """Each bad input raises its error class with a helpful message."""
        trainer = make_trainer(build_net(contexts(1)), "sgd", "1ctx")
        with pytest.raises(error, match=pattern):
            call(trainer)

    def test_mask_with_dist_kvstore_updating_on_servers(self):
        """Masks cannot apply where dist kvstore servers update: a clear error before any step."""
        net = build_net(contexts(1))
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, kvstore="dist_sync")
        with pytest.raises(MaskError, match="dist kvstore servers"):
            trainer.freeze("net_dense0_weight", mask=np.zeros((6, 4)))
