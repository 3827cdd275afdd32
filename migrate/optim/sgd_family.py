"""The SGD family of MXNet 1.9.1 optimizers: ``sgd`` (and its alias ``ccsgd``), ``nag``, ``signum``, ``sgld``,
``dcasgd`` and ``test``, each an exact torch optimizer, its stock counterpart and its state converters.

sgd, nag and signum are MXNet C++ kernels (float32 hyperparameters; sgd and nag replayed by compiled loops on CPU).
sgld, dcasgd and test are written in python in MXNet (``mxnet/optimizer/optimizer.py``): their arithmetic is NDArray
arithmetic with python-double scalars (cast to the weight's dtype), which torch's ops with python scalars reproduce.
"""
import math

import torch

from migrate.errors import UnsupportedOptimizerError
from migrate.optim import _kernels
from migrate.optim.base import (MXNetOptimizer, cache_pieces, clips, kernel_float, momentum_state, python_scaled,
                                rounded_float32, state_buffers)
from migrate.optim.registry import OptimizerRecord, register

__all__ = ["DCASGD", "NAG", "SGD", "SGLD", "Signum", "Test", "default_noise", "nag_mom_update_torch",
           "sgd_stock_optimizer", "sgd_stock_state"]


class SGD(MXNetOptimizer):
    """MXNet ``sgd``: ``m = momentum*m - lr*wd*w - lr*clip(rescale_grad*g); w += m`` (lr inside the momentum).

    Examples:
        >>> opt = SGD(model.parameters(), lr=0.1, momentum=0.9, rescale_grad=1 / 32)
    """

    hyperparameters = {"momentum": 0.0, "lazy_update": True}
    state_names = ("momentum_buffer",)

    def _new_state(self, param, group):
        return momentum_state(param, group)

    def _update(self, group, params, grads, states):
        lr, wd = rounded_float32(group["lr"]), rounded_float32(group["weight_decay"])  # multi_sgd's lrs/wds tuples
        momentum = group["momentum"] > 0
        hyper = (lr, wd, kernel_float(group["momentum"]) if momentum else 0.0, kernel_float(group["rescale_grad"]),
                 kernel_float(group["clip_gradient"]) if clips(group) else -1.0)
        moms = state_buffers(states, "momentum_buffer") if momentum else [None] * len(params)
        rows = [row for row in zip(params, grads, moms) if not _kernels.run_in_place(_kernels.sgd_update, row, *hyper)]
        if not rows:
            return
        params, grads, moms = (list(column) for column in zip(*rows))  # CUDA, strided, half: the torch path
        grads = self._scaled(grads, group)
        if momentum:
            torch._foreach_mul_(moms, kernel_float(group["momentum"]))
            torch._foreach_add_(moms, params, alpha=-lr * wd)
            torch._foreach_add_(moms, grads, alpha=-lr)
            torch._foreach_add_(params, moms)
        else:  # multi_sgd_update: the momentum formula with a zero momentum
            step = torch._foreach_mul(params, -lr * wd)
            torch._foreach_add_(step, grads, alpha=-lr)
            torch._foreach_add_(params, step)


class NAG(MXNetOptimizer):
    """MXNet ``nag`` (nag_mom_update): ``m1 = mu*m; w += -m1 + (mu+1)*(m1 - lr*gg); m = m1 - lr*gg'``.

    ``gg = clip(rescale_grad*g) + wd*w`` with the old weight, ``gg'`` the same with the new weight: MXNet's kernel
    writes the weight in place before it updates the momentum.

    Examples:
        >>> opt = NAG(model.parameters(), lr=0.1, momentum=0.9)
    """

    hyperparameters = {"momentum": 0.0}
    state_names = ("momentum_buffer",)

    def _new_state(self, param, group):
        return momentum_state(param, group)

    def _update(self, group, params, grads, states):
        lr, wd, mom = (kernel_float(group[key]) for key in ("lr", "weight_decay", "momentum"))
        if mom <= 0:  # sgd_update: w = (1 - lr*wd)*w - lr*clip(rescale_grad*g)
            clipped = self._scaled(grads, group)
            torch._foreach_mul_(params, 1.0 - lr * wd)
            torch._foreach_add_(params, clipped, alpha=-lr)
            return
        clip = kernel_float(group["clip_gradient"]) if clips(group) else -1.0
        rows = [row for row in zip(params, grads, state_buffers(states, "momentum_buffer"))
                if not _kernels.run_in_place(_kernels.nag_update, row, lr, wd, mom,
                                             kernel_float(group["rescale_grad"]), clip)]
        if rows:  # CUDA, non-contiguous or half-precision tensors: the torch path (same order of operations)
            params, grads, moments = (list(column) for column in zip(*rows))
            for weight, grad, moment in cache_pieces((params, self._scaled(grads, group), moments)):
                nag_mom_update_torch(weight, grad, moment, lr, wd, mom)


def nag_mom_update_torch(weight, grad, moment, lr, wd, mom):
    """MXNet's nag_mom_update (and mp_nag_mom_update on a master) on one piece, in the kernel's order of operations:
    ``m1 = mu*m; w = (w - m1) + (mu+1)*(m1 - lr*(g + wd*w)); m = m1 - lr*(g + wd*w_new)``, each operation rounded
    (no fused multiply-add), so float32 runs are bit for bit MXNet's (NAG's path for CUDA and strided tensors).

    Examples:
        >>> nag_mom_update_torch(weight, scaled_grad, momentum_buffer, 0.1, 1e-4, 0.9)  # doctest: +SKIP
    """
    moment.mul_(mom)
    decayed = torch.mul(weight, wd).add_(grad) if wd else grad.clone()
    decayed.mul_(lr)
    decayed.neg_().add_(moment)  # m1 - lr*gg
    decayed.mul_(rounded_float32(mom + 1.0))
    weight.sub_(moment).add_(decayed)
    step = torch.mul(weight, wd).add_(grad) if wd else grad.clone()
    moment.sub_(step.mul_(lr))


class Signum(MXNetOptimizer):
    """MXNet ``signum``: ``m = mu*m - (1-mu)*(wd*w + clip(rescale_grad*g)); w = (1 - lr*wd_lh)*w + lr*sign(m)``.

    With ``momentum=0`` it is MXNet's signsgd_update: ``w = (1 - lr*wd)*w - lr*sign(g)`` (raw gradient).

    Examples:
        >>> opt = Signum(model.parameters(), lr=0.01, momentum=0.9, wd_lh=0.0)
    """

    hyperparameters = {"momentum": 0.9, "wd_lh": 0.0}
    state_names = ("momentum_buffer",)

    def _new_state(self, param, group):
        return momentum_state(param, group)

    def _update(self, group, params, grads, states):
        lr, wd, mom = (kernel_float(group[key]) for key in ("lr", "weight_decay", "momentum"))
        if mom <= 0:  # signsgd_update: the raw gradient's sign; rescale, clip and wd_lh play no part
            signs = torch._foreach_sign(grads)
            torch._foreach_mul_(params, 1.0 - lr * wd)
            torch._foreach_add_(params, signs, alpha=-lr)
            return
        grads = self._scaled(grads, group)
        wd_lh = kernel_float(group["wd_lh"]) if group["wd_lh"] else 0.0
        for piece in cache_pieces((params, grads, state_buffers(states, "momentum_buffer"))):
            _signum_piece(*piece, lr, wd, mom, wd_lh)


def _signum_piece(weight, grad, moment, lr, wd, mom, wd_lh):
    """MXNet's signum_update on one piece: ``m = mu*m - (1-mu)*(wd*w + g); w = (1 - lr*wd_lh)*w + lr*sign(m)``."""
    moment.mul_(mom)
    moment.add_(weight, alpha=-(1.0 - mom) * wd)
    moment.add_(grad, alpha=-(1.0 - mom))
    signs = moment.sign()
    if wd_lh:
        weight.mul_(1.0 - lr * wd_lh)
    weight.add_(signs, alpha=lr)


def default_noise(param, std):
    """SGLD's default noise: ``torch.randn_like(param) * std`` (MXNet draws ``normal(0, std)``, the weight's shape)."""
    return torch.randn_like(param).mul_(std)


class SGLD(MXNetOptimizer):
    """MXNet ``sgld``, Stochastic Gradient Langevin Dynamics: ``w += -lr/2 * (g + wd*w)``, then ``w += N(0, lr)``.

    ``g = clip(rescale_grad * grad)`` (clipped whenever clip_gradient is set, as MXNet's python code does). The
    deterministic part is exact. The noise cannot be: MXNet draws it from its own generator
    (``mx.nd.random.normal(0, sqrt(lr))``), whose sequence torch's cannot replay. It comes from ``noise``, a
    callable ``noise(param, std) -> tensor`` added to the weight, called once per parameter per step in MXNet's
    index order with ``std = sqrt(lr)`` (python double; ``lr`` the parameter's, lr_mult included); by default
    ``default_noise`` (torch.randn_like scaled by std). A source that draws MXNet's samples in that order (re-seed
    MXNet, call ``mx.nd.random.normal(0, std, shape, dtype)``) makes the whole update MXNet's (float64 within 1e-12,
    ``tests/migrate/optim/test_lbsgd_sgld_dcasgd_groupadagrad.py``). Set ``optimizer.noise`` after ``migrate.torch_optimizer`` or
    ``load_migration`` to choose the source (it is not saved in the state_dict).

    Examples:
        >>> opt = SGLD(model.parameters(), lr=1e-4, noise=lambda p, std: torch.randn_like(p) * std)
    """

    hyperparameters = {}

    def __init__(self, params, lr, noise=None, **kwargs):
        super().__init__(params, lr, **kwargs)
        self.noise = default_noise if noise is None else noise

    def _step_all(self):
        for _, group, param, grad, _ in self._in_mx_order():
            lr, wd = group["lr"], group["weight_decay"]
            decayed = python_scaled(grad, group).add_(param * wd)
            param.add_(decayed.mul_(-lr / 2))
            param.add_(self.noise(param, math.sqrt(lr)))


class DCASGD(MXNetOptimizer):
    """MXNet ``dcasgd``, delay-compensated SGD: ``w_new = w - lr*(g + wd*w + lamda*g*g*(w - w_prev))``.

    ``g = clip(rescale_grad * grad)`` (clipped whenever clip_gradient is set); ``w_prev`` (``state
    ["previous_weight"]``) is the weight before the parameter's previous update, the weight itself at the first.

    Raises:
        UnsupportedOptimizerError: ``momentum`` is not 0: MXNet 1.9.1's DCASGD cannot take a step then (it tests
            ``if mom:`` on an NDArray, which raises for more than one element and is False for a fresh zero
            buffer, which then fails ``assert momentum == 0``), so there is no MXNet training to continue.

    Examples:
        >>> opt = DCASGD(model.parameters(), lr=0.1, lamda=0.04)
    """

    hyperparameters = {"momentum": 0.0, "lamda": 0.04}
    state_names = ("previous_weight",)

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
            grad = python_scaled(grad, group)
            previous = state["previous_weight"]
            compensation = (grad * lamda).mul_(grad).mul_(weight - previous)
            step = (weight * wd).add_(grad).add_(compensation).mul_(-lr)
            previous.copy_(weight)
            weight.add_(step)


class Test(MXNetOptimizer):
    """MXNet ``test`` (its optimizer for its own unit tests): ``w += rescale_grad * g``, then the state holds a copy
    of the weight. It ignores lr, weight decay and clip_gradient, as MXNet's does.

    Examples:
        >>> opt = Test(model.parameters(), lr=0.1, rescale_grad=0.5)
    """

    state_names = ("weight_copy",)

    def _update(self, group, params, grads, states):
        for weight, grad, state in zip(params, grads, states):
            weight.add_(grad.mul(group["rescale_grad"]))  # NDArray * python scalar, as MXNet's update
            state["weight_copy"].copy_(weight)


# ---------------------------------------------------------------- stock counterparts and their state


def sgd_stock_optimizer(groups, o):
    """torch.optim.SGD for MXNet's sgd (options ``o``), and what differs (lr inside MXNet's momentum)."""
    diffs = []
    if o.get("momentum", 0.0):
        diffs.append("MXNet keeps lr inside the momentum (m = mu*m - lr*g; w += m), torch outside "
                     "(b = mu*b + g; w -= lr*b): equal at constant lr; after an lr change scale each momentum "
                     "buffer by lr_old/lr_new")
    return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0.0), weight_decay=o["weight_decay"],
                           foreach=True), diffs


def _nag_stock_optimizer(groups, o):
    diffs = []
    if o.get("momentum", 0.0):
        diffs.append("MXNet keeps lr inside the NAG momentum (torch outside): equal at constant lr; after an lr "
                     "change scale each momentum buffer by lr_old/lr_new")
        if o["weight_decay"]:
            diffs.append("MXNet's NAG adds wd times the already-updated weight to its momentum; torch adds wd "
                         "times the weight before the step")
    return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0.0), nesterov=o.get("momentum", 0) > 0,
                           weight_decay=o["weight_decay"], foreach=True), diffs


def _signum_stock_optimizer(groups, o):
    return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0.9), weight_decay=o["weight_decay"],
                           foreach=True), [
        "Signum has no torch counterpart: SGD steps along the momentum itself, not its sign, and ignores wd_lh"]


def _sgld_stock_optimizer(groups, o):
    for group in groups:  # MXNet steps by lr/2: halve each group's lr and the lr_mult the lr scheduler reads
        group["lr"] = group["lr"] / 2
        if "lr_mult" in group:
            group["lr_mult"] = group["lr_mult"] / 2
    return torch.optim.SGD(groups, lr=o["lr"] / 2, weight_decay=o["weight_decay"], foreach=True), [
        "SGLD has no torch counterpart: this SGD takes its deterministic step w -= lr/2*(g + wd*w) (lr and lr_mult "
        "halved here) but adds no Langevin noise; add torch.randn_like(w) * sqrt(lr) to each weight after each "
        "step, or use migrate's exact SGLD (its noise source is pluggable)"]


def _dcasgd_stock_optimizer(groups, o):
    return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0.0), weight_decay=o["weight_decay"],
                           foreach=True), [
        "DCASGD has no torch counterpart: SGD lacks its delay compensation lamda*g*g*(w - w_previous) "
        f"(lamda={o.get('lamda', 0.04)})"]


def _momentum_stock_state(label, given):
    """MXNet's momentum (lr inside) as torch SGD's ``momentum_buffer = -momentum / lr``; not converted at lr 0."""
    if given.lr == 0.0:
        return {}, [f"{given.mx_name}: MXNet's {label} momentum was not converted (its next lr is 0, and "
                    f"torch's buffer is MXNet's divided by -lr); torch restarts it from the next gradient"]
    return {"momentum_buffer": given.arrays[0] / -given.lr}, []


def sgd_stock_state(given):
    """MXNet sgd's momentum of one parameter (``StockStateInput``) as torch SGD's state, and what did not cross."""
    return _momentum_stock_state("SGD", given)


def _nag_stock_state(given):
    converted, lost = _momentum_stock_state("NAG", given)
    if converted and float(given.hyper.get("wd", 0.0)):
        lost = lost + ["MXNet's NAG adds wd times the already-updated weight to its momentum; torch adds wd times "
                       "the weight before the step"]
    return converted, lost


def _signum_stock_state(given):
    return {}, ["MXNet's Signum momentum (a (1-momentum)-weighted average of gradients, stepped along by its sign) "
                "was not converted: torch SGD's buffer has another meaning; it restarts from zero"]


def _sgld_stock_state(given):
    return {}, []  # MXNet's SGLD keeps no state


def _dcasgd_stock_state(given):
    return {}, ["MXNet's DCASGD previous weights (its delay compensation's w_previous) were not converted: torch SGD "
                "has no counterpart"]


register(OptimizerRecord("sgd", SGD, _kernels.sgd_update, torch.optim.SGD, sgd_stock_optimizer, sgd_stock_state,
                         master_last=True))
register(OptimizerRecord("nag", NAG, _kernels.nag_update, torch.optim.SGD, _nag_stock_optimizer, _nag_stock_state,
                         master_last=True))
register(OptimizerRecord("signum", Signum, None, torch.optim.SGD, _signum_stock_optimizer, _signum_stock_state))
register(OptimizerRecord("sgld", SGLD, None, torch.optim.SGD, _sgld_stock_optimizer, _sgld_stock_state))
register(OptimizerRecord("dcasgd", DCASGD, None, torch.optim.SGD, _dcasgd_stock_optimizer, _dcasgd_stock_state))
register(OptimizerRecord("test", Test, None, None, None, None))
