"""Test helper: a small seeded MLP trained by ``gluon_lr.LrTrainer``, its settings and states, and its torch twin."""
import functools
import os
import tempfile

import mxnet as mx
import numpy as np
import torch
from mxnet import autograd, gluon

import gluon_lr

SIZES = (5, 7, 6, 3)
BATCH = 8
# lr_mult, wd_mult, frozen of each MXNet parameter: a decayed group, a no-wd bias, a frozen layer, a fast head.
GROUPS = {
    "mlp_fc0_weight": (0.5, 1.0, False), "mlp_fc0_bias": (0.5, 0.0, False),
    "mlp_fc1_weight": (1.0, 1.0, True), "mlp_fc1_bias": (1.0, 1.0, True),
    "mlp_fc2_weight": (2.0, 2.0, False), "mlp_fc2_bias": (2.0, 0.0, False),
}
MAPPING = {f"mlp_fc{i}_{kind}": f"{2 * i}.{kind}" for i in range(3) for kind in ("weight", "bias")}


def mx_net(dtype):
    """The Gluon MLP, seeded, with GROUPS applied."""
    mx.random.seed(1)
    net = gluon.nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        for i, units in enumerate(SIZES[1:]):
            act = "tanh" if i < len(SIZES) - 2 else None
            net.add(gluon.nn.Dense(units, in_units=SIZES[i], activation=act, prefix=f"fc{i}_"))
    net.initialize(mx.init.Uniform(0.5))
    net.cast(dtype)
    for name, param in net.collect_params().items():
        lr_mult, wd_mult, frozen = GROUPS[name]
        param.lr_mult, param.wd_mult = lr_mult, wd_mult
        param.grad_req = "null" if frozen else "write"
    return net


def weights_of(net):
    """MXNet name -> numpy copy of every parameter of ``net``."""
    return {name: param.data().asnumpy().copy() for name, param in net.collect_params().items()}


def torch_net(net):
    """The torch twin of ``net`` holding the same weights."""
    return torch_model(weights_of(net))


def torch_model(weights):
    """The torch twin of the MLP holding ``weights`` (MXNet name -> numpy array), in their dtype."""
    layers = []
    for i in range(len(SIZES) - 1):
        layers.append(torch.nn.Linear(SIZES[i], SIZES[i + 1]))
        if i < len(SIZES) - 2:
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers)
    model.to(torch.float64 if weights["mlp_fc0_weight"].dtype == np.float64 else torch.float32)
    with torch.no_grad():
        for mx_name, key in MAPPING.items():
            model.get_parameter(key).copy_(torch.from_numpy(weights[mx_name]))
    return model


def batches(steps, dtype, seed=3):
    """``steps`` seeded (x, y) batches as numpy arrays."""
    rng = np.random.RandomState(seed)
    return [(rng.randn(BATCH, SIZES[0]).astype(dtype), rng.randn(BATCH, SIZES[-1]).astype(dtype))
            for _ in range(steps)]


def mx_train(net, trainer, data):
    """Train ``net`` on ``data`` with a summed squared loss and ``trainer.step(BATCH)``."""
    for x, y in data:
        with autograd.record():
            loss = ((net(mx.nd.array(x, dtype=x.dtype)) - mx.nd.array(y, dtype=y.dtype)) ** 2).sum()
        loss.backward()
        trainer.step(BATCH)


def torch_train(model, optimizer, scheduler, data):
    """Train ``model`` on ``data`` with the same loss as ``mx_train``."""
    for x, y in data:
        optimizer.zero_grad()
        loss = ((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def exported_settings(trainer):
    """The settings document ``trainer`` (an LrTrainer) exports, read back with ``gluon_lr.load_settings``."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "settings.json")
        trainer.export_settings(path)
        return gluon_lr.load_settings(path)


def settings_of(net, opt_name, opt_kwargs, sched_kwargs):
    """The settings an LrTrainer over ``net`` exports before training (rescale_grad is still 1.0 then)."""
    return exported_settings(mx_trainer(net, opt_name, opt_kwargs, sched_kwargs))


def mx_scheduler(sched_kwargs):
    """The MXNet lr scheduler described by ``sched_kwargs`` (settings format) or None."""
    if not sched_kwargs:
        return None
    kwargs = dict(sched_kwargs)
    return getattr(mx.lr_scheduler, kwargs.pop("type"))(**kwargs)


def mx_trainer(net, opt_name, opt_kwargs, sched_kwargs):
    """An ``LrTrainer`` for ``net`` (multipliers from the Parameters, frozen ones with grad_req='null').

    A float64 net with an optimizer of FLOAT32_STATES gets that optimizer with float64 states.
    """
    kwargs = dict(opt_kwargs, lr_scheduler=mx_scheduler(sched_kwargs))
    dtype = next(iter(net.collect_params().values())).dtype
    if np.dtype(dtype) == np.float64 and opt_name in FLOAT32_STATES:
        return gluon_lr.LrTrainer(net.collect_params(), float64_states_optimizer(opt_name, kwargs), kvstore=None)
    return gluon_lr.LrTrainer(net.collect_params(), opt_name, kwargs, kvstore=None)


class _Float64States:
    """Mixin: states in the weight's dtype. MXNet 1.9.1's create_state of RMSProp, AdaGrad, AdaDelta and Ftrl makes
    float32 states whatever the weight's dtype, and their kernels (templated on one dtype) then refuse float64
    weights; given float64 states they run in float64. The classes keep MXNet's names, so settings are unchanged."""

    def create_state(self, index, weight):
        return _cast_states(super().create_state(index, weight), weight.dtype)


class RMSProp(_Float64States, mx.optimizer.RMSProp):
    """MXNet's RMSProp with float64 states for float64 weights."""


class AdaGrad(_Float64States, mx.optimizer.AdaGrad):
    """MXNet's AdaGrad with float64 states for float64 weights."""


class AdaDelta(_Float64States, mx.optimizer.AdaDelta):
    """MXNet's AdaDelta with float64 states for float64 weights."""


class Ftrl(_Float64States, mx.optimizer.Ftrl):
    """MXNet's Ftrl with float64 states for float64 weights."""


FLOAT32_STATES = {"rmsprop": RMSProp, "adagrad": AdaGrad, "adadelta": AdaDelta, "ftrl": Ftrl}


def float64_states_optimizer(opt_name, opt_kwargs):
    """MXNet's optimizer ``opt_name`` (one of FLOAT32_STATES) whose states take the weight's dtype."""
    return FLOAT32_STATES[opt_name](**opt_kwargs)


def _cast_states(states, dtype):
    """``states`` (an NDArray, None or nested tuples of them) cast to ``dtype``."""
    if isinstance(states, (tuple, list)):
        return type(states)(_cast_states(state, dtype) for state in states)
    return None if states is None else states.astype(dtype)


SCHEDULE = {"type": "FactorScheduler", "step": 30, "factor": 0.5, "stop_factor_lr": 1e-8, "warmup_steps": 0,
            "warmup_begin_lr": 0.0, "warmup_mode": "linear"}
# (case id, MXNet optimizer name, optimizer kwargs); every case also gets wd and clip_gradient.
CASES = [
    ("sgd", "sgd", {"learning_rate": 0.05, "momentum": 0.9}),
    ("nag", "nag", {"learning_rate": 0.05, "momentum": 0.9}),
    ("adam", "adam", {"learning_rate": 0.01}),
    ("rmsprop", "rmsprop", {"learning_rate": 0.01}),
    ("rmsprop-centered", "rmsprop", {"learning_rate": 0.01, "centered": True}),
    ("adagrad", "adagrad", {"learning_rate": 0.05}),
    ("adadelta", "adadelta", {"learning_rate": 1.0}),
    ("adamax", "adamax", {"learning_rate": 0.01}),
    ("nadam", "nadam", {"learning_rate": 0.01}),
    ("lamb", "lamb", {"learning_rate": 0.01}),
    ("signum", "signum", {"learning_rate": 0.005, "wd_lh": 0.01}),
    ("ftrl", "ftrl", {"learning_rate": 0.1}),
    ("ftml", "ftml", {"learning_rate": 0.01}),
    ("lars", "lars", {"learning_rate": 0.5, "momentum": 0.9, "eta": 0.1, "eps": 1e-8}),  # see NOTES-18 (eps=0)
]
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}
# Cases whose bound differs from TOLERANCE (none today).
CASE_TOLERANCE = {}


def tolerance(case, dtype):
    """The largest weight difference allowed between MXNet and torch for ``case`` in ``dtype``."""
    return CASE_TOLERANCE.get((case, dtype), TOLERANCE[dtype])


def case_kwargs(opt_kwargs):
    """The optimizer kwargs of a case with weight decay and clipping added, and its lr schedule."""
    kwargs = dict(opt_kwargs, wd=0.01, clip_gradient=0.5)
    return kwargs, dict(SCHEDULE, base_lr=kwargs["learning_rate"])


def largest_difference(expected, model):
    """(MXNet name, largest absolute difference) between ``expected`` (MXNet name -> array) and ``model``."""
    worst = ("", 0.0)
    for mx_name, key in MAPPING.items():
        diff = float(np.abs(expected[mx_name] - model.get_parameter(key).detach().numpy()).max())
        worst = max(worst, (mx_name, diff), key=lambda item: item[1])
    return worst


@functools.lru_cache(maxsize=None)
def mx_reference(case, dtype, steps=100):
    """One MXNet run of CASES[case], shared by the tests: weights at 0, steps/2 and steps, states at steps/2.

    Returns a dict: settings (exported after steps/2), data, initial, middle, final (MXNet name -> array),
    states and stock_states (the bytes of LrTrainer.save_states and of gluon.Trainer.save_states at steps/2).
    """
    name, opt_kwargs = {c: (n, k) for c, n, k in CASES}[case]
    kwargs, schedule = case_kwargs(opt_kwargs)
    net = mx_net(dtype)
    data = batches(steps, dtype)
    trainer = mx_trainer(net, name, kwargs, schedule)
    initial = weights_of(net)
    mx_train(net, trainer, data[:steps // 2])
    middle = weights_of(net)
    settings = exported_settings(trainer)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trainer.states")
        trainer.save_states(path)
        with open(path, "rb") as handle:
            states = handle.read()
        gluon.Trainer.save_states(trainer, path)
        with open(path, "rb") as handle:
            stock_states = handle.read()
    mx_train(net, trainer, data[steps // 2:])
    return {"settings": settings, "data": data, "initial": initial, "middle": middle, "final": weights_of(net),
            "states": states, "stock_states": stock_states}


class GroupAdaGrad(_Float64States, mx.optimizer.contrib.GroupAdaGrad):
    """MXNet's GroupAdaGrad with float64 states for float64 weights (its create_state makes float32 zeros)."""


FLOAT32_STATES["groupadagrad"] = GroupAdaGrad
