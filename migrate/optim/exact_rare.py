"""torch optimizers for MXNet 1.9.1's rarely used optimizers (``lbsgd``, ``sgld``, ``dcasgd``, ``groupadagrad``),
exact as in ``exact.py``.

These four are written in python in MXNet (``mxnet/optimizer/optimizer.py`` and ``contrib.py``): their arithmetic
is NDArray arithmetic with python-double scalars (cast to the weight's dtype), which torch's ops with python
scalars reproduce. LBSGD calls MXNet's ``sgd_update``/``sgd_mom_update`` kernels (float32 hyperparameters).
Registered into ``migrate.optim.exact.OPTIMIZERS`` by that module.
"""
import math

import torch

from migrate.errors import UnsupportedOptimizerError
from migrate.optim.exact import SGD, _MXNetOptimizer, _f32


def _python_scaled(grad, group):
    """``clip(grad * rescale_grad)`` as MXNet's python optimizers write it (clipped whenever clip_gradient is set).

    A new tensor. MXNet's ``clip(x, -c, c)`` with ``c < 0`` gives ``c`` where ``x > c``, else ``-c``; kept here.
    """
    out = grad * group["rescale_grad"]
    clip = group["clip_gradient"]
    if clip is None:
        return out
    if clip >= 0:
        return out.clamp_(-clip, clip)
    return torch.where(out > clip, torch.full_like(out, clip), torch.full_like(out, -clip))


class LBSGD(_MXNetOptimizer):
    """MXNet ``lbsgd``, large-batch SGD: gradients summed over ``batch_scale`` calls, then one SGD step whose lr is
    scaled by a warmup multiplier (or the layer's LARS ratio).

    Per parameter, every call adds its gradient to a running sum; on every ``batch_scale``-th call (counted from
    ``begin_epoch * updates_per_epoch``) the sum divided by ``batch_scale`` takes one ``sgd_update`` /
    ``sgd_mom_update`` step (lr inside the momentum, float32 hyperparameters, rescale and clip inside the kernel)
    with ``lr * mult``; the other calls leave the weight as it is. ``mult`` by ``warmup_strategy``, with
    ``n`` the count of calls, ``N = warmup_epochs * updates_per_epoch`` and ``B = batch_scale``: ``B`` once
    ``n >= N``; else ``1 + (B-1)*n/N`` (linear), ``1 + (B-1)*n^2/N^2`` (power2), ``1 + (B-1)*sqrt(n/N)`` (sqrt);
    ``lars``: ``sqrt(|w|^2 / (|g|^2 + wd*|w|^2 + 1e-18))`` bounded to [0.01, 100] (squared norms summed by numpy
    as MXNet does, gradient before rescale_grad); any other strategy 1.

    MXNet's quirks are kept: the first call of each parameter stores the live gradient array itself, so at the
    next call the sum is twice the new gradient (``state["cum_live"]``; not for a float16 parameter under
    ``multi_precision``, whose gradient MXNet copies to float32 first); and LBSGD reads the lr before it counts
    its update, so the very first update of a training (no parameter has a count yet) uses the schedule's lr at
    the previous count (``group["lr_before_count"]``, set by ``migrate.torch_lr_scheduler``; the group's lr where
    absent). Parameters are updated in MXNet's index order. ``num_epochs`` is unused (as in MXNet).

    Note:
        This is LBSGD under ``gluon_lr.LrTrainer``, which raises MXNet's global count before every update round.
        Under a stock ``gluon.Trainer`` or ``Module`` the first parameter of EVERY step reads the lr of the
        previous count: where the schedule changes between two counts, its step differs from this one.

    Example:
        >>> opt = LBSGD(model.parameters(), lr=0.1, momentum=0.9, batch_scale=4, warmup_strategy="linear")
    """

    _hyper = {"momentum": 0.0, "warmup_strategy": "linear", "warmup_epochs": 5, "batch_scale": 1,
              "updates_per_epoch": 32, "begin_epoch": 0, "num_epochs": 60}
    lr_before_count = True
    """Read by ``migrate.optim.translate.MXNetLRScheduler``: set each group's ``lr_before_count``."""

    def _new_state(self, param, group):
        return SGD._new_state(self, param, group)

    def _step_all(self):
        first_ever = not any(isinstance(state, dict) and state.get("step") for state in self.state.values())
        for position, (_, group, param, grad, state) in enumerate(self._in_mx_order()):
            lr = group.get("lr_before_count", group["lr"]) if first_ever and position == 0 else group["lr"]
            self._call(group, param, grad, state, lr)

    def _call(self, group, param, grad, state, lr):
        """One MXNet ``LBSGD.update`` of ``param``: accumulate, and on every batch_scale-th call step."""
        num_cums = state.get("num_cums", 0)
        # under multi_precision MXNet hands update() a float32 copy of a float16 gradient: nothing overwrites it
        live = id(param) not in (self.__dict__.get("_halves") or {})
        if num_cums > 0:
            cum = state.get("cum_grad")
            if state.get("cum_live"):
                cum = grad + grad
            else:
                cum = grad.clone() if cum is None else cum + grad
            state.update(cum_grad=cum, cum_live=False, num_cums=num_cums + 1)
        else:  # MXNet stores the gradient array itself: it is read again, overwritten, at the next call
            init = group["begin_epoch"] * group["updates_per_epoch"]
            state.update(cum_grad=None if live else grad.clone(), cum_live=live, num_cums=init + 1)
        if state["num_cums"] % group["batch_scale"] != 0:
            return  # MXNet's sgd_update with lr 0: the weight is unchanged
        cum = grad if state["cum_live"] else state["cum_grad"]
        mean = cum / group["batch_scale"]
        wd = group["weight_decay"]
        if group["warmup_strategy"] == "lars":
            mult = _lars_mult(param, mean, wd)
        else:
            mult = _warmup_mult(group, state["num_cums"])
        _sgd_kernel(self, group, param, mean, state, lr * mult)
        state.update(cum_grad=None, cum_live=False)


def _warmup_mult(group, nup):
    """MXNet's ``LBSGD._get_lbmult``: the lr multiplier at call ``nup`` of the warmup (python doubles)."""
    nwup = group["warmup_epochs"] * group["updates_per_epoch"]
    strategy, maxmult = group["warmup_strategy"], float(group["batch_scale"])
    if nup >= nwup:
        return maxmult
    if nwup <= 1:
        return 1.0
    if strategy == "linear":
        return 1.0 + (maxmult - 1) * nup / nwup
    if strategy == "power2":
        return 1.0 + (maxmult - 1) * (nup * nup) / (nwup * nwup)
    if strategy == "sqrt":
        return 1.0 + (maxmult - 1) * math.sqrt(float(nup) / nwup)
    return 1.0


def _lars_mult(weight, grad, wd):
    """MXNet's ``LBSGD._get_lars``: squared norms summed by numpy in the array's dtype, ratio bounded to [0.01, 100]."""
    weight2 = (weight * weight).detach().cpu().numpy().sum()
    grad2 = (grad * grad).detach().cpu().numpy().sum()
    lars = math.sqrt(weight2 / (grad2 + wd * weight2 + 1e-18))
    return min(max(lars, 0.01), 100)


def _sgd_kernel(optimizer, group, param, grad, state, lr):
    """MXNet's ``sgd_mom_update`` (a momentum buffer and momentum > 0) or ``sgd_update`` with float32 lr and wd."""
    lr, wd = _f32(lr), _f32(group["weight_decay"])
    grad = optimizer._scaled([grad], group)[0]
    if "momentum_buffer" in state:  # m = mu*m - lr*wd*w - lr*g; w += m (momentum 0 when it is not > 0)
        moment = state["momentum_buffer"]
        moment.mul_(_f32(group["momentum"]) if group["momentum"] > 0 else 0.0)
        moment.add_(param, alpha=-lr * wd).add_(grad, alpha=-lr)
        param.add_(moment)
    else:  # w = (1 - lr*wd)*w - lr*g
        param.mul_(1.0 - lr * wd).add_(grad, alpha=-lr)


def default_noise(param, std):
    """SGLD's default noise: ``torch.randn_like(param) * std`` (MXNet draws ``normal(0, std)``, the weight's shape)."""
    return torch.randn_like(param).mul_(std)


class SGLD(_MXNetOptimizer):
    """MXNet ``sgld``, Stochastic Gradient Langevin Dynamics: ``w += -lr/2 * (g + wd*w)``, then ``w += N(0, lr)``.

    ``g = clip(rescale_grad * grad)`` (clipped whenever clip_gradient is set, as MXNet's python code does). The
    deterministic part is exact. The noise cannot be: MXNet draws it from its own generator
    (``mx.nd.random.normal(0, sqrt(lr))``), whose sequence torch's cannot replay. It comes from ``noise``, a
    callable ``noise(param, std) -> tensor`` added to the weight, called once per parameter per step in MXNet's
    index order with ``std = sqrt(lr)`` (python double; ``lr`` the parameter's, lr_mult included); by default
    ``default_noise`` (torch.randn_like scaled by std). A source that draws MXNet's samples in that order (re-seed
    MXNet, call ``mx.nd.random.normal(0, std, shape, dtype)``) makes the whole update MXNet's (float64 within 1e-12,
    ``tests/migrate/test_exact_rare.py``). Set ``optimizer.noise`` after ``migrate.torch_optimizer`` or
    ``load_migration`` to choose the source (it is not saved in the state_dict).

    Example:
        >>> opt = SGLD(model.parameters(), lr=1e-4, noise=lambda p, std: torch.randn_like(p) * std)
    """

    _hyper = {}

    def __init__(self, params, lr, noise=None, **kwargs):
        super().__init__(params, lr, **kwargs)
        self.noise = default_noise if noise is None else noise

    def _step_all(self):
        for _, group, param, grad, _ in self._in_mx_order():
            lr, wd = group["lr"], group["weight_decay"]
            decayed = _python_scaled(grad, group).add_(param * wd)
            param.add_(decayed.mul_(-lr / 2))
            param.add_(self.noise(param, math.sqrt(lr)))


class DCASGD(_MXNetOptimizer):
    """MXNet ``dcasgd``, delay-compensated SGD: ``w_new = w - lr*(g + wd*w + lamda*g*g*(w - w_prev))``.

    ``g = clip(rescale_grad * grad)`` (clipped whenever clip_gradient is set); ``w_prev`` (``state
    ["previous_weight"]``) is the weight before the parameter's previous update, the weight itself at the first.

    Raises:
        UnsupportedOptimizerError: ``momentum`` is not 0: MXNet 1.9.1's DCASGD cannot take a step then (it tests
            ``if mom:`` on an NDArray, which raises for more than one element and is False for a fresh zero
            buffer, which then fails ``assert momentum == 0``), so there is no MXNet training to continue.

    Example:
        >>> opt = DCASGD(model.parameters(), lr=0.1, lamda=0.04)
    """

    _hyper = {"momentum": 0.0, "lamda": 0.04}
    _state_names = ()

    def __init__(self, params, lr, **kwargs):
        super().__init__(params, lr, **kwargs)
        moving = sorted({group["momentum"] for group in self.param_groups if group["momentum"] != 0.0})
        if moving:
            raise UnsupportedOptimizerError(
                f"dcasgd with momentum {moving[0]!r} has no translation: MXNet 1.9.1's DCASGD cannot take a step "
                f"with a momentum (its 'if mom:' on an NDArray raises, or fails 'assert momentum == 0'), so there is "
                f"no MXNet training to continue; use momentum=0")

    def _new_state(self, param, group):
        return {"step": 0, "previous_weight": param.detach().clone(memory_format=torch.preserve_format)}

    def _update(self, group, params, grads, states):
        lr, wd, lamda = group["lr"], group["weight_decay"], group["lamda"]
        for weight, grad, state in zip(params, grads, states):
            grad = _python_scaled(grad, group)
            previous = state["previous_weight"]
            compensation = (grad * lamda).mul_(grad).mul_(weight - previous)
            step = (weight * wd).add_(grad).add_(compensation).mul_(-lr)
            previous.copy_(weight)
            weight.add_(step)


class GroupAdaGrad(_MXNetOptimizer):
    """MXNet ``groupadagrad`` (mxnet.optimizer.contrib.GroupAdaGrad), AdaGrad with one history per row.

    For a 2-D weight: ``g = clip(rescale_grad*grad)`` (clipped whenever clip_gradient is set);
    ``h += mean(g^2, axis=1)`` (``state["history"]``, shape ``(rows, 1)``); ``w -= lr*g / sqrt(h + eps)``.

    Raises:
        UnsupportedOptimizerError: a trained parameter is not 2-D, or has weight decay: MXNet refuses both
            (``assert len(weight.shape) == 2``, ``assert wd == 0``).

    Example:
        >>> opt = GroupAdaGrad(embedding.parameters(), lr=0.1, eps=1e-5)
    """

    _hyper = {"eps": 1e-5}

    def __init__(self, params, lr, **kwargs):
        super().__init__(params, lr, **kwargs)
        for group in self.param_groups:
            if group.get("frozen"):
                continue
            names = group.get("mx_names") or [f"parameter {i}" for i in range(len(group["params"]))]
            wrong = [f"{name} {tuple(p.shape)}" for name, p in zip(names, group["params"]) if p.dim() != 2]
            if wrong:
                raise UnsupportedOptimizerError(f"groupadagrad updates 2-D weights only (one history per row), got "
                                                f"{wrong[:5]}; MXNet refuses these too: freeze them or use adagrad")
            if group["weight_decay"] != 0.0:
                raise UnsupportedOptimizerError(f"groupadagrad has no weight decay (MXNet asserts wd == 0) but "
                                                f"{names[:5]} have wd {group['weight_decay']!r}; set wd (or "
                                                f"wd_mult) to 0")

    def _new_state(self, param, group):
        return {"step": 0, "history": param.new_zeros((param.shape[0], 1))}

    def _update(self, group, params, grads, states):
        for weight, grad, state in zip(params, grads, states):
            grad = _python_scaled(grad, group)
            history = state["history"]
            history.add_(grad.square().mean(dim=1, keepdim=True))
            weight.sub_(grad.mul_(group["lr"]).div_(history.add(group["eps"]).sqrt_()))


class Test(_MXNetOptimizer):
    """MXNet ``test`` (its optimizer for its own unit tests): ``w += rescale_grad * g``, then the state holds a copy
    of the weight. It ignores lr, weight decay and clip_gradient, as MXNet's does.

    Example:
        >>> opt = Test(model.parameters(), lr=0.1, rescale_grad=0.5)
    """

    _state_names = ("weight_copy",)

    def _update(self, group, params, grads, states):
        for weight, grad, state in zip(params, grads, states):
            weight.add_(grad.mul(group["rescale_grad"]))  # NDArray * python scalar, as MXNet's update
            state["weight_copy"].copy_(weight)


OPTIMIZERS = {"lbsgd": LBSGD, "sgld": SGLD, "dcasgd": DCASGD, "groupadagrad": GroupAdaGrad, "test": Test}
