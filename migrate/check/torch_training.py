"""torch's side of ``check_training``: a copy of the torch model holding the MXNet weights, in training mode, with
migrate's exact optimizer (the MXNet states converted) or one the user builds, one step at a time.
"""
from __future__ import annotations

import collections
import copy

import numpy as np
import torch
import torch.nn.functional as F

from migrate import arguments
from migrate.check.rounding import unit_noise
from migrate.errors import ArgumentError
from migrate.mapping.weights import load_mxnet_weights
from migrate.module_outputs import captured_module_outputs, torch_inputs
from migrate.optim.state_conversion import convert_optimizer_state
from migrate.optim.translate import torch_lr_scheduler, torch_optimizer

__all__ = ["TorchTraining", "DropoutOff"]


class TorchTraining:
    """The torch model (a copy holding the MXNet weights) in training mode, with its optimizer.

    Args:
        torch_model: the user's model; left untouched.
        params: the MXNet parameter values (name -> array).
        mapping: the ``NameMapping``.
        settings: the settings document, or None (no optimizer: forward, loss and gradients only).
        states: MXNet's states file for migrate's exact optimizer, or None.
        optimizer: None (migrate's exact optimizer from the settings) or a callable ``optimizer(model)`` that
            returns a ``torch.optim.Optimizer`` over the model it is given (the copy).
        float64: train the copy in float64.
        perturb: when > 0, every parameter of the copy (not the buffers) is multiplied by ``1 + perturb * noise``
            (``rounding.unit_noise``, seeded): the control run of ``check_training``. ``perturbation`` then holds, per
            key, what that added, numpy.
        seed: seeds that noise.
        assume_order: states of a stock Trainer that name no parameters taken in the settings' order
            (``convert_optimizer_state``'s ``assume_order``).

    Examples:
        >>> side = TorchTraining(model, source.params, mapping, settings)  # doctest: +SKIP
    """

    def __init__(self, torch_model, params, mapping, settings=None, states=None, optimizer=None, float64=False,
                 perturb=0.0, seed=0, assume_order=False):
        self.model = copy.deepcopy(torch_model)
        load_mxnet_weights(self.model, params, mapping)
        if float64:
            self.model.double()
        self.perturbation = _perturb(self.model, perturb, seed) if perturb else {}
        self.model.train()
        self.dropouts, self._dropout_off = _without_dropout(self.model), DropoutOff()
        self.named = dict(self.model.named_parameters())
        self.optimizer, self.scheduler, self.exact = None, None, optimizer is None
        if settings is not None and optimizer is None:
            self.optimizer = torch_optimizer(self.model, settings, mapping)
            if states is not None:
                convert_optimizer_state(states, settings, mapping, self.optimizer, assume_order=assume_order)
            self.scheduler = torch_lr_scheduler(self.optimizer, settings)
        elif optimizer is not None:
            self.optimizer = _user_optimizer(optimizer, self.model)
        self._groups = {id(p): g for g in (self.optimizer.param_groups if self.optimizer else ()) for p in g["params"]}

    def forward(self, inputs: list, modules=()) -> tuple[dict, list]:
        """A training-mode forward with gradients: (module path -> output of ``modules``, numpy; final outputs,
        tensors)."""
        self.model.zero_grad(set_to_none=True)
        with captured_module_outputs(self.model, modules) as found, self._dropout_off:
            final = self.model(*torch_inputs(inputs))
        final = list(final) if isinstance(final, (tuple, list)) else [final]
        return {k: v.numpy() for k, v in found.items() if isinstance(v, torch.Tensor)}, final

    def dropout_calls(self) -> list:
        """The dropout functions made the identity in the forwards so far, with their counts ("F.dropout x 3")."""
        return [f"{name} x {count}" for name, count in sorted(self._dropout_off.calls.items())]

    def group(self, key: str) -> dict | None:
        """The optimizer's param group of parameter ``key``, or None (no optimizer, or not in it)."""
        param = self.named.get(key)
        return None if param is None else self._groups.get(id(param))

    def rescale(self, key: str) -> float:
        """The factor the optimizer applies to the gradient of ``key`` before its update (migrate's exact optimizers
        take MXNet's ``rescale_grad``; a stock one applies none)."""
        group = self.group(key)
        return float(group.get("rescale_grad", 1.0)) if group is not None else 1.0

    def gradients(self) -> dict:
        """torch key -> gradient (as ``backward`` left it), numpy, for each parameter that has one."""
        return {k: p.grad.detach().numpy().copy() for k, p in self.named.items() if p.grad is not None}

    def step(self) -> dict:
        """One optimizer step (and scheduler step); returns torch key -> the lr its group had for the step."""
        lrs = {k: float(self.group(k)["lr"]) for k in self.named if self.group(k) is not None}
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return lrs

    def arrays(self) -> dict:
        """torch ``state_dict`` key -> value, numpy copies."""
        return {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()}

    def state(self, key: str) -> dict:
        """The optimizer state of parameter ``key``: name -> numpy array (tensors only)."""
        param = self.named.get(key)
        held = self.optimizer.state.get(param, {}) if param is not None and self.optimizer is not None else {}
        return {k: v.detach().numpy() for k, v in held.items() if torch.is_tensor(v) and v.dim() > 0}


def _perturb(model, scale: float, seed: int) -> dict:
    """Multiply every float parameter of ``model`` in place by ``1 + scale * noise`` (``unit_noise``, seeded, applied
    in the parameter's dtype and on its device); returns key -> what that added, numpy."""
    rng = np.random.default_rng(seed)
    added = {}
    with torch.no_grad():
        for key, param in sorted(model.named_parameters()):
            if param.is_floating_point():
                noise = torch.from_numpy(unit_noise(rng, tuple(param.shape)))
                before = param.detach().clone()
                param.mul_((1 + scale * noise).to(device=param.device, dtype=param.dtype))
                added[key] = (param.detach() - before).cpu().numpy()
    return added


def _user_optimizer(factory, model):
    """``factory(model)``, checked to be a torch optimizer."""
    if not callable(factory) or isinstance(factory, torch.optim.Optimizer):
        raise ArgumentError(f"check_training(optimizer) must be None (migrate's exact optimizer) or a callable "
                            f"optimizer(model) -> torch.optim.Optimizer over the model it is given (a copy), got "
                            f"{type(factory).__name__}")
    return arguments.torch_optimizer(factory(model), "check_training(optimizer)(model)")


_DROPOUTS = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout,
             torch.nn.FeatureAlphaDropout)
_DROPOUT_FUNCTIONS = {  # function -> (its name in notes, its training default); each takes (input, p, training)
    F.dropout: ("F.dropout", True), F.dropout1d: ("F.dropout1d", True), F.dropout2d: ("F.dropout2d", True),
    F.dropout3d: ("F.dropout3d", True), F.alpha_dropout: ("F.alpha_dropout", False),
    F.feature_alpha_dropout: ("F.feature_alpha_dropout", False), torch.dropout: ("torch.dropout", True),
    torch.alpha_dropout: ("torch.alpha_dropout", True), torch.feature_dropout: ("torch.feature_dropout", True),
    torch.feature_alpha_dropout: ("torch.feature_alpha_dropout", True),
}


class DropoutOff(torch.overrides.TorchFunctionMode):
    """While active, every dropout function of torch is the identity (returns its input), however the model calls it:
    a Dropout module, ``F.dropout`` in a ``forward``, ``torch.dropout``. ``calls`` counts those that would have
    dropped (training, p > 0) by name.

    Examples:
        >>> with DropoutOff() as off:
        ...     y = torch.nn.functional.dropout(x, 0.5)  # y is x
        >>> dict(off.calls)  # doctest: +SKIP
        {'F.dropout': 1}
    """

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _DROPOUT_FUNCTIONS:
            return func(*args, **kwargs)
        name, training = _DROPOUT_FUNCTIONS[func]
        given = dict(zip(("input", "p", "training"), args), **kwargs)
        if given.get("training", given.get("train", training)) and given.get("p", 0.5) > 0:
            self.calls[name] += 1
        return given["input"]


def _without_dropout(model) -> list:
    """Switch every Dropout module of ``model`` to eval mode (dropout off, the rest of the model training); return
    their paths."""
    changed = []
    for path, module in model.named_modules():
        if isinstance(module, _DROPOUTS) and module.training:
            module.eval()
            changed.append(path)
    return changed
