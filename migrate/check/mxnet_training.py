"""MXNet's side of ``check_training``: the model bound for training with its matched nodes' outputs exposed, the
optimizer the settings describe (continuing from the saved states), one step at a time.

The executor works on copies of the MXNet parameters, so the model given is left as it was. The update follows a
``gluon.Trainer``: every trainable parameter, in index order, through one ``mx.optimizer.Updater`` call.
"""
from __future__ import annotations

import inspect
import json

import numpy as np

from mxformats.optional import import_mxnet
from mxformats.settings import OPTIMIZER_ALIASES
from mxformats.states import split_states, states_bytes, unpickle_states
from migrate.check.rounding import unit_noise
from migrate.errors import InputFileError
from migrate.optim.groups import base_lr
from migrate.source.live import mxnet_executor

__all__ = ["MXNetTraining", "mxnet_optimizer", "symbol_without_dropout"]

_CARRIED = ("m_schedule", "cur_lr", "cumgrads")
"""Attributes of a saved MXNet optimizer that hold training state beside the per-parameter states (Nadam's momentum
schedule, LARS's last lr, LBSGD's gradient sums)."""


class MXNetTraining:
    """The MXNet model in training mode on one batch, with the optimizer of the settings.

    Args:
        source: the ``MxSource`` (symbol and parameters; the parameters are copied).
        inputs: numpy arrays, one per input of the symbol.
        ops: op names whose outputs the forward returns (the matched nodes).
        settings: the settings document, or None (forward, loss and gradients only).
        states: the states file (path or bytes) of ``trainer.save_states``, or None.
        float64: run in float64 (parameters, states and float inputs cast).
        perturb: when > 0, every parameter (not the running statistics) is multiplied by ``1 + perturb * noise``
            (``rounding.unit_noise``, seeded): the control run of ``check_training``. ``perturbation`` then holds, per
            name, what that added (float32 subtraction of values this close is exact).
        seed: seeds that noise.

    Examples:
        >>> side = MXNetTraining(source, [x], ["conv0_fwd"], settings)  # doctest: +SKIP
        >>> nodes, outputs = side.forward()
    """

    def __init__(self, source, inputs: list, ops: list, settings=None, states=None, float64=False, perturb=0.0,
                 seed=0):
        mx = import_mxnet("migrate.check_training (running the MXNet model)")
        self.symbol, self.dropouts = symbol_without_dropout(source.symbol)
        self.param_names = list(source.params)
        self.values = {name: _cast(value, float64) for name, value in source.params.items()}
        names = [n for n in self.symbol.list_arguments() if n in source.params] if perturb else []
        self.perturbation = _perturb(self.values, names, perturb, seed)
        self.values.update({n: mx.nd.array(x, dtype=x.dtype) for n, x in zip(source.input_names, inputs)})
        frozen = {n for n, e in (settings or {}).get("params", {}).items() if e["frozen"]}
        self.trained = [n for n in self.symbol.list_arguments() if n in source.params and n not in frozen]
        self.grads = {n: mx.nd.zeros_like(self.values[n]) for n in self.trained}
        grad_req = {n: "write" if n in self.grads else "null" for n in self.symbol.list_arguments()}
        self.executor, self.exposed = mxnet_executor(self.symbol, self.values, ops, grad_req=grad_req,
                                                     args_grad=self.grads)
        self.settings, self.optimizer, self.updater = settings, None, None
        if settings is not None:
            saved_states, saved = _saved(states)
            self.optimizer = mxnet_optimizer(settings, saved)
            self.updater = mx.optimizer.get_updater(self.optimizer)
            self.updater.states.update({i: _cast(state, float64) for i, state in saved_states.items()})
            self.updater.states_synced.update(dict.fromkeys(saved_states, False))
        self._outputs, self._gradients = [], None

    def forward(self) -> tuple[dict, list]:
        """One training-mode forward (batch statistics; the running statistics move): (op -> output, final
        outputs), as numpy arrays."""
        self._outputs = self.executor.forward(is_train=True)
        outs = [o.asnumpy() for o in self._outputs]
        return dict(zip(self.exposed, outs)), outs[len(self.exposed):]

    def backward(self, head_grads: list) -> None:
        """Backward from ``head_grads`` (numpy, one per final output); the exposed node outputs get zero."""
        import mxnet as mx
        self._gradients = None
        zeros = [mx.nd.zeros_like(o) for o in self._outputs[:len(self.exposed)]]
        self.executor.backward(zeros + [mx.nd.array(g, dtype=g.dtype) for g in head_grads])

    def gradients(self) -> dict:
        """MXNet name -> gradient of the summed loss (before ``rescale_grad``), numpy (read once per backward)."""
        if self._gradients is None:
            self._gradients = {name: grad.asnumpy() for name, grad in self.grads.items()}
        return self._gradients

    def step(self) -> dict:
        """One update of every trainable parameter the settings list, in index order; returns MXNet name -> the
        learning rate it used."""
        params = self.settings["params"]
        names = sorted((n for n in self.trained if n in params), key=lambda n: params[n]["index"])
        indices = [params[n]["index"] for n in names]
        if names:
            self.updater(indices, [self.grads[n] for n in names], [self.values[n] for n in names])
        return {n: float(self.optimizer._get_lr(i)) for n, i in zip(names, indices)}

    def arrays(self) -> dict:
        """MXNet name -> current value of every parameter and running statistic, numpy copies."""
        return {name: self.values[name].asnumpy() for name in self.param_names}

    def state(self, name: str):
        """The optimizer state of ``name`` (MXNet's structure of NDArrays), or None before its first update."""
        index = self.settings["params"][name]["index"] if name in self.settings["params"] else None
        return self.updater.states.get(index) if self.updater is not None else None


def symbol_without_dropout(symbol) -> tuple:
    """(``symbol`` with every Dropout's ``p`` set to 0, the names of the Dropout ops changed): MXNet's masks cannot be
    drawn in torch, so the check runs both models without dropout.

    Examples:
        >>> symbol, names = symbol_without_dropout(source.symbol)  # doctest: +SKIP
    """
    mx = import_mxnet("migrate.check_training (running the MXNet model)")
    document = json.loads(symbol.tojson())
    names = []
    for node in document["nodes"]:
        attrs = node.get("attrs", {})
        if node["op"] == "Dropout" and float(attrs.get("p", 0.5)) > 0:
            attrs["p"] = "0"
            node["attrs"] = attrs
            names.append(node["name"])
    return (mx.sym.load_json(json.dumps(document)) if names else symbol), names


def mxnet_optimizer(settings: dict, saved=None):
    """The MXNet optimizer the settings describe: hyperparameters, lr schedule, lr_mult/wd_mult by name and the update
    counts (from ``saved``, the optimizer pickled with the states, else the settings' ``num_update``).

    Examples:
        >>> optimizer = mxnet_optimizer(load_settings("settings.json"))  # doctest: +SKIP
    """
    mx = import_mxnet("migrate.check_training (the MXNet optimizer)")
    doc = settings["optimizer"]
    name = OPTIMIZER_ALIASES.get(doc["name"], doc["name"])
    klass = mx.optimizer.Optimizer.opt_registry[name]
    accepted = {p for k in klass.__mro__ if "__init__" in vars(k) for p in inspect.signature(k.__init__).parameters}
    kwargs = {k: v for k, v in doc["hyperparameters"].items() if k in accepted}
    kwargs.update(learning_rate=base_lr(settings), wd=float(doc["wd"]), rescale_grad=float(doc["rescale_grad"]),
                  clip_gradient=doc["clip_gradient"], multi_precision=bool(doc.get("multi_precision")),
                  lr_scheduler=_scheduler(mx, settings.get("lr_scheduler")), begin_num_update=settings["num_update"],
                  param_idx2name={e["index"]: n for n, e in settings["params"].items()})
    optimizer = mx.optimizer.create(name, **kwargs)
    optimizer.set_lr_mult({n: float(e["lr_mult"]) for n, e in settings["params"].items()})
    optimizer.set_wd_mult({n: float(e["wd_mult"]) for n, e in settings["params"].items()})
    if saved is not None:
        optimizer._index_update_count.update(getattr(saved, "_index_update_count", {}))
        optimizer.num_update = max([optimizer.num_update] + list(optimizer._index_update_count.values()))
        for attr in _CARRIED:
            if attr in vars(saved):
                setattr(optimizer, attr, getattr(saved, attr))
    return optimizer


def _cast(value, float64: bool):
    """A copy of ``value`` (an NDArray, None or nested tuples of them), float arrays in float64 when asked."""
    if isinstance(value, (tuple, list)):
        return type(value)(_cast(v, float64) for v in value)
    if value is None or not hasattr(value, "astype"):
        return value
    return value.astype("float64") if float64 and value.dtype in (np.float16, np.float32) else value.copy()


def _perturb(values: dict, names: list, scale: float, seed: int) -> dict:
    """Multiply each float array ``values[name]`` of ``names`` in place by ``1 + scale * noise`` (``unit_noise``,
    seeded, applied in the array's dtype); returns name -> what that added, numpy."""
    rng = np.random.default_rng(seed)
    added = {}
    for name in names:
        value = values[name].asnumpy()
        if not np.issubdtype(value.dtype, np.floating):
            continue
        noisy = value * (1 + scale * unit_noise(rng, value.shape)).astype(value.dtype)
        values[name][:] = noisy
        added[name] = noisy - value
    return added


def _scheduler(mx, document):
    """MXNet's lr scheduler from the settings' record, or None."""
    if not document:
        return None
    kwargs = {k: v for k, v in document.items() if k != "type"}
    return getattr(mx.lr_scheduler, document["type"])(**kwargs)


def _saved(states) -> tuple:
    """(index -> MXNet state, the pickled optimizer or None) of a states file (path or bytes), or ({}, None)."""
    if states is None:
        return {}, None
    _, data = split_states(states_bytes(states, error=InputFileError), "states", error=InputFileError)
    found, optimizer = unpickle_states(data, "states", error=InputFileError)
    return dict(found), optimizer
