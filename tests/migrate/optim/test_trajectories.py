"""Tests of migrate.torch_optimizer and migrate.torch_lr_scheduler against real MXNet 1.9.1 runs."""
import json
import pickle

import numpy as np
import pytest
import torch

import migrate
from migrate.errors import MappingError, SettingsError, UnsupportedOptimizerError
from tests.migrate import _mx_reference as R

TRAJECTORY = [pytest.param(case, dtype, id=f"{case}-{dtype}") for case, name, _ in R.CASES
              for dtype in ("float32", "float64")]


def _run_both(name, opt_kwargs, dtype, schedule, steps):
    """Train the MLP ``steps`` steps in MXNet and, migrated, in torch; return (MXNet weights, torch model)."""
    net = R.mx_net(dtype)
    model = R.torch_net(net)
    data = R.batches(steps, dtype)
    trainer = R.mx_trainer(net, name, opt_kwargs, schedule)
    R.mx_train(net, trainer, data)
    settings = R.exported_settings(trainer)
    optimizer = migrate.torch_optimizer(model, settings, R.MAPPING)
    R.torch_train(model, optimizer, migrate.torch_lr_scheduler(optimizer, settings, num_update=0), data)
    return R.weights_of(net), model


class TestTorchOptimizer:
    @pytest.mark.parametrize("case, dtype", TRAJECTORY)
    def test_trajectory_matches_mxnet(self, case, dtype):
        """100 steps with lr_mult/wd_mult groups, a frozen layer, clipping, rescale_grad and a schedule agree."""
        ref = R.mx_reference(case, dtype)
        model = R.torch_model(ref["initial"])
        optimizer = migrate.torch_optimizer(model, ref["settings"], R.MAPPING)
        scheduler = migrate.torch_lr_scheduler(optimizer, ref["settings"], num_update=0)
        R.torch_train(model, optimizer, scheduler, ref["data"])
        worst_name, worst = R.largest_difference(ref["final"], model)
        atol = R.tolerance(case, dtype)
        assert worst <= atol, f"{case} {dtype}: {worst_name} differs by {worst:.3g} > {atol}"
        moved = float(np.abs(ref["final"]["mlp_fc2_weight"] - ref["initial"]["mlp_fc2_weight"]).max())
        assert moved > 1e-3, f"{case}: the trained head moved only {moved:.3g}"
        frozen = ref["initial"]["mlp_fc1_weight"] - model.get_parameter("2.weight").detach().numpy()
        assert np.all(frozen == 0) and not model.get_parameter("2.weight").requires_grad

    @pytest.mark.parametrize("case", ["rmsprop", "rmsprop-centered", "adagrad", "adadelta", "ftrl"])
    def test_mxnet_reference_runs_in_float64(self, case):
        """Given float64 states, MXNet's rmsprop/adagrad/adadelta/ftrl kernels keep states and weights float64."""
        ref = R.mx_reference(case, "float64")
        states, optimizer = pickle.loads(ref["stock_states"])
        assert type(optimizer).__name__.lower() == ref["settings"]["optimizer"]["name"]
        arrays = [a for s in states.values() for a in (s if isinstance(s, (tuple, list)) else (s,)) if a is not None]
        assert arrays and {a.dtype for a in arrays} == {np.float64}, f"{case}: {[a.dtype for a in arrays]}"
        assert {w.dtype for w in ref["final"].values()} == {np.dtype(np.float64)}

    @pytest.mark.parametrize("case", ["adam", "nadam"])
    def test_step_with_closure(self, case):
        """step(closure) runs the closure with gradients on, returns its loss, and updates exactly as step() does."""
        ref = R.mx_reference(case, "float64")
        plain, closed = R.torch_model(ref["initial"]), R.torch_model(ref["initial"])
        optimizers = [migrate.torch_optimizer(m, ref["settings"], R.MAPPING) for m in (plain, closed)]
        R.torch_train(plain, optimizers[0], None, ref["data"][:3])
        for x, y in ref["data"][:3]:
            def closure():
                optimizers[1].zero_grad()
                loss = ((closed(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum()
                loss.backward()
                return loss

            loss = optimizers[1].step(closure)
            assert loss.grad_fn is not None and loss.item() > 0
        for key, param in plain.named_parameters():
            diff = float((param - closed.get_parameter(key)).detach().abs().max())
            assert diff == 0.0, f"{case}: {key} differs by {diff:.3g} between step() and step(closure)"
        head = torch.from_numpy(ref["initial"]["mlp_fc2_weight"])
        moved = float((plain.get_parameter("4.weight").detach() - head).abs().max())
        assert moved > 1e-3, f"{case}: the head moved only {moved:.3g}"

    @pytest.mark.parametrize("name", ["sgd", "nag", "signum"])
    def test_without_momentum_matches_mxnet(self, name):
        """The momentum-free kernels (multi_sgd_update, sgd_update, signsgd_update) agree in float64."""
        kwargs, schedule = R.case_kwargs({"learning_rate": 0.01, "momentum": 0.0})
        expected, model = _run_both(name, kwargs, "float64", schedule, steps=40)
        worst_name, worst = R.largest_difference(expected, model)
        assert worst <= 1e-12, f"{name}: {worst_name} differs by {worst:.3g}"

    def test_settings_file_path(self, tmp_path):
        """A settings file path works like the dict: same groups, lr and hyperparameters."""
        net = R.mx_net("float32")
        trainer = R.mx_trainer(net, "adam", {"learning_rate": 0.01, "beta1": 0.8, "wd": 0.01}, None)
        path = tmp_path / "settings.json"
        trainer.export_settings(str(path))
        optimizer = migrate.torch_optimizer(R.torch_net(net), str(path), R.MAPPING)
        groups = {name: g for g in optimizer.param_groups for name in g["mx_names"]}
        assert (groups["mlp_fc2_weight"]["lr"], groups["mlp_fc2_weight"]["weight_decay"]) == (0.02, 0.02)
        assert groups["mlp_fc0_bias"]["beta1"] == 0.8 and groups["mlp_fc0_bias"]["weight_decay"] == 0.0

    def test_stock_reports_differences(self):
        """stock_torch_optimizer gives stock torch SGD (foreach) and names the momentum, clipping, rescale differences."""
        ref = R.mx_reference("sgd", "float32")
        model = R.torch_model(ref["initial"])
        optimizer, differences = migrate.stock_torch_optimizer(model, ref["settings"], R.MAPPING)
        assert type(optimizer) is torch.optim.SGD and optimizer.defaults["foreach"] is True
        text = " ".join(differences)
        for needle in ("lr inside the momentum", "clip_grad_value_", "rescale_grad=0.125"):
            assert needle in text, f"{needle!r} missing from {differences}"

    @pytest.mark.parametrize("case, name, opt_kwargs", R.CASES, ids=[c[0] for c in R.CASES])
    def test_exact_false_builds_stock_for_every_optimizer(self, case, name, opt_kwargs):
        """Every optimizer has a closest stock torch.optim optimizer and a non-empty list of differences."""
        net = R.mx_net("float32")
        settings = R.settings_of(net, name, opt_kwargs, None)
        optimizer, differences = migrate.stock_torch_optimizer(R.torch_net(net), settings, R.MAPPING)
        assert type(optimizer).__module__.startswith("torch.optim") and differences


class TestTorchLrScheduler:
    @pytest.mark.parametrize("schedule", [
        {"type": "FactorScheduler", "step": 7, "factor": 0.7, "warmup_steps": 5, "warmup_begin_lr": 0.001},
        {"type": "MultiFactorScheduler", "step": [10, 25, 33], "factor": 0.3},
        {"type": "PolyScheduler", "max_update": 30, "pwr": 2, "final_lr": 0.001, "warmup_steps": 4,
         "warmup_mode": "constant", "warmup_begin_lr": 0.002},
        {"type": "CosineScheduler", "max_update": 35, "final_lr": 0.0005},
    ], ids=["factor-warmup", "multifactor", "poly-warmup", "cosine"])
    def test_schedules_match_mxnet(self, schedule):
        """Each MXNet scheduler, translated, drives SGD with momentum to MXNet's weights (float64, 40 steps)."""
        kwargs = {"learning_rate": 0.05, "momentum": 0.9, "wd": 0.01}
        expected, model = _run_both("sgd", kwargs, "float64", dict(schedule, base_lr=0.05), steps=40)
        worst_name, worst = R.largest_difference(expected, model)
        assert worst <= 1e-12, f"{schedule['type']}: {worst_name} differs by {worst:.3g}"

    def test_lr_follows_schedule_and_multipliers(self):
        """Group lr is schedule(num_update) * lr_mult: after 31 steps of Factor(30, 0.5) the head has 0.05*0.5*2."""
        net = R.mx_net("float64")
        kwargs, schedule = R.case_kwargs({"learning_rate": 0.05, "momentum": 0.9})
        settings = R.settings_of(net, "sgd", kwargs, schedule)
        optimizer = migrate.torch_optimizer(R.torch_net(net), settings, R.MAPPING)
        scheduler = migrate.torch_lr_scheduler(optimizer, settings)
        for _ in range(30):
            optimizer.step()
            scheduler.step()
        lrs = {name: g["lr"] for g in optimizer.param_groups for name in g["mx_names"]}
        assert lrs["mlp_fc2_weight"] == lrs["mlp_fc2_bias"] == pytest.approx(0.05 * 0.5 * 2.0, abs=1e-15)
        assert lrs["mlp_fc0_weight"] == lrs["mlp_fc0_bias"] == pytest.approx(0.05 * 0.5 * 0.5, abs=1e-15)


def _settings(**changes):
    net = R.mx_net("float32")
    settings = json.loads(json.dumps(R.settings_of(net, "sgd", {"learning_rate": 0.1, "momentum": 0.9}, None)))
    for path, value in changes.items():
        target, keys = settings, path.split("__")
        for key in keys[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return settings


_DELETE = object()
ERRORS = [
    ("unknown optimizer", dict(optimizer__name="homemadesgd"), R.MAPPING, UnsupportedOptimizerError,
     r"'homemadesgd' has no torch translation.*supported"),
    ("unknown hyperparameter", dict(optimizer__hyperparameters={"momentum": 0.9, "gamma9": 1}), R.MAPPING,
     UnsupportedOptimizerError, r"\['gamma9'\]"),
    ("settings without optimizer", dict(optimizer=_DELETE), R.MAPPING, SettingsError, r"optimizer must be an object"),
    ("param entry without lr_mult", dict(params__mlp_fc0_weight={"index": 0, "shape": [8, 4], "dtype": "float32",
                                                                  "wd_mult": 1.0, "frozen": False,
                                                                  "masked_elements": 0}),
     R.MAPPING, SettingsError, r"params\['mlp_fc0_weight'\]\.lr_mult must be a number, got nothing"),
    ("settings not a dict", None, R.MAPPING, SettingsError, "must be a dict or a path"),
    ("mapping to a missing torch param", {}, dict(R.MAPPING, mlp_fc2_bias="9.bias"), MappingError,
     r"mlp_fc2_bias -> 9.bias"),
    ("mapping from an unknown MXNet name", {}, dict(R.MAPPING, mlp_fc9_bias="4.bias"), MappingError,
     r"not in the settings: \['mlp_fc9_bias'\]"),
]


@pytest.mark.parametrize("description, changes, mapping, error, pattern", ERRORS, ids=[e[0] for e in ERRORS])
def test_torch_optimizer_errors(description, changes, mapping, error, pattern):
    """Bad inputs raise migrate's own errors with a message naming the culprit."""
    settings = 42 if changes is None else _settings(**changes)
    with pytest.raises(error, match=pattern):
        migrate.torch_optimizer(R.torch_net(R.mx_net("float32")), settings, mapping)


def test_bad_scheduler_type_raises():
    """A scheduler type MXNet does not have raises SettingsError naming it and the known ones, where it enters."""
    settings = _settings(lr_scheduler={"type": "StepLR", "step_size": 3})
    with pytest.raises(SettingsError, match=r"CosineScheduler.*'StepLR'"):
        migrate.torch_optimizer(R.torch_net(R.mx_net("float32")), settings, R.MAPPING)


# Larger than migrate's cache-blocking piece (2**18 elements) and not a multiple of it, plus a small tensor.
LARGE_SHAPES = [(600, 500), (7,)]
LARGE_CASES = [(name, hyper, scaling) for name, hyper in [
    ("adam", {}), ("lamb", {}), ("nag", {"momentum": 0.9}), ("ftrl", {"lamda1": 0.01, "beta": 1.0}),
    ("adagrad", {}), ("adadelta", {}), ("signum", {"momentum": 0.9, "wd_lh": 0.01})]
    for scaling in ({"rescale_grad": 1.0}, {"rescale_grad": 0.5, "clip_gradient": 0.3})]


class TestLargeTensors:
    @pytest.mark.parametrize("name, hyper, scaling", LARGE_CASES,
                             ids=[f"{c[0]}-{'clip' if len(c[2]) > 1 else 'plain'}" for c in LARGE_CASES])
    def test_large_tensor_matches_mxnet_updater(self, name, hyper, scaling):
        """A 300k-element tensor (in pieces or a fused kernel) follows MXNet's updater, update counts unequal."""
        import mxnet as mx
        from migrate.optim import OPTIMIZERS

        rng = np.random.RandomState(5)
        initial = [rng.randn(*shape).astype("float32") for shape in LARGE_SHAPES]
        updater = mx.optimizer.get_updater(mx.optimizer.create(name, learning_rate=0.01, wd=0.01, **hyper, **scaling))
        mx_weights = [mx.nd.array(w) for w in initial]
        params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in initial]
        optimizer = OPTIMIZERS[name]([{"params": params}], lr=0.01, weight_decay=0.01,
                                     clip_gradient=scaling.get("clip_gradient"),
                                     rescale_grad=scaling["rescale_grad"], **hyper)
        for step in range(6):  # the small tensor has no gradient at step 0, so the update counts differ
            grads = [rng.randn(*shape).astype("float32") for shape in LARGE_SHAPES]
            used = [0] if step == 0 else list(range(len(grads)))
            updater(used, [mx.nd.array(grads[i]) for i in used], [mx_weights[i] for i in used])
            for index, (param, grad) in enumerate(zip(params, grads)):
                param.grad = torch.from_numpy(grad) if index in used else None
            optimizer.step()
        for index, (expected, param) in enumerate(zip(mx_weights, params)):
            worst = float(np.abs(expected.asnumpy() - param.detach().numpy()).max())
            moved = float(np.abs(initial[index] - param.detach().numpy()).max())
            assert worst <= 1e-5, f"{name} tensor {index} {LARGE_SHAPES[index]}: differs by {worst:.3g} > 1e-5"
            assert moved > 1e-3, f"{name} tensor {index}: moved only {moved:.3g}"


def test_exact_false_is_the_stock_optimizer_with_a_warning():
    """torch_optimizer(exact=False), kept for older callers, returns the stock optimizer and warns what differs."""
    ref = R.mx_reference("sgd", "float32")
    with pytest.warns(UserWarning, match="stock_torch_optimizer.*lr inside the momentum"):
        optimizer = migrate.torch_optimizer(R.torch_model(ref["initial"]), ref["settings"], R.MAPPING, exact=False)
    assert type(optimizer) is torch.optim.SGD


def test_scheduler_leaves_stock_adadelta_at_lr_1():
    """MXNet's AdaDelta uses no learning rate: over a stock Adadelta the scheduler keeps every lr at 1.0, also for
    groups with lr_mult != 1 (it set them to schedule * lr_mult before, 0.05 off MXNet after 10 steps)."""
    net = R.mx_net("float32")
    settings = R.settings_of(net, "adadelta", {"learning_rate": 0.5}, None)
    optimizer, _ = migrate.stock_torch_optimizer(R.torch_net(net), settings, R.MAPPING)
    assert any(g["lr_mult"] != 1.0 for g in optimizer.param_groups)
    scheduler = migrate.torch_lr_scheduler(optimizer, settings)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    assert sorted({g["lr"] for g in optimizer.param_groups if not g.get("frozen")}) == [1.0]
