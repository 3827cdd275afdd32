"""The SGD family of MXNet 1.9.1 optimizers: ``sgd`` (and its alias ``ccsgd``), ``nag``, ``signum``, ``sgld``,
``dcasgd`` and ``test``, each an exact torch optimizer, its stock counterpart and its state converters.

sgd, nag and signum are MXNet C++ kernels (float32 hyperparameters; sgd and nag replayed by compiled loops on CPU).
sgld, dcasgd and test are written in python in MXNet (``mxnet/optimizer/optimizer.py``): their arithmetic is NDArray
arithmetic with python-double scalars (cast to the weight's dtype), which torch's ops with python scalars reproduce.
"""
import math

import numpy as np
import torch

from migrate.errors import UnsupportedOptimizerError
from migrate.optim import compiled
from migrate.optim.base import (MXNetOptimizer, by_dtype, clip_bound, compiled_on, kernel_float, momentum_state, pick,
                                python_scaled, python_scaled_all, rounded_float32, state_buffers)
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
        mu, rescale, clip = (kernel_float(group["momentum"]) if momentum else 0.0, kernel_float(group["rescale_grad"]),
                             clip_bound(group))
        moms = state_buffers(states, "momentum_buffer") if momentum else None
        rows = list(zip(params, grads, moms)) if momentum else list(zip(params, grads))
        left = compiled.update("sgd_mom" if momentum else "sgd", rows, [lr] * len(rows), [wd] * len(rows),
                               lambda kind: [kind(rescale), kind(clip), kind(mu)], clip >= 0, compiled_on(group))
        if left:  # CUDA, strided, half (or compiled=False): torch's fused SGD kernel with adjusted constants
            _fused_sgd([params[i] for i in left], self._scaled([grads[i] for i in left], group),
                       [moms[i] for i in left] if momentum else [], lr, wd, mu)


def _fused_sgd(params, grads, moms, lr, wd, mu):
    """MXNet's ``multi_sgd(_mom)_update`` with torch's fused SGD: ``g' = -lr*g`` (a new list: torch's kernel writes
    an unscaled gradient back), then ``m = mu*m + (g' + (-lr*wd)*w); w = w - (-1)*m`` (without momentum
    ``w = w + g' - lr*wd*w``): MXNet's arithmetic, each product rounded in another order (float32 rounding)."""
    torch._fused_sgd_(params, torch._foreach_mul(grads, -lr), moms, weight_decay=-lr * wd, momentum=mu, lr=-1.0,
                      dampening=0.0, nesterov=False, maximize=False, is_first_step=False)


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
        rescale, clip = kernel_float(group["rescale_grad"]), clip_bound(group)
        scalars = [lr] * len(params), [wd] * len(params)
        if mom <= 0:  # sgd_update (SGDKernel): w = (1 - lr*wd)*w - lr*clip(rescale_grad*g)
            left = compiled.update("sgd_single", list(zip(params, grads)), *scalars,
                                   lambda kind: [kind(rescale), kind(clip), kind(1)], clip >= 0, compiled_on(group))
            if left:
                weights = pick(params, left)
                torch._foreach_mul_(weights, 1.0 - lr * wd)
                torch._foreach_add_(weights, self._scaled(pick(grads, left), group), alpha=-lr)
            return
        moms = state_buffers(states, "momentum_buffer")
        left = compiled.update("nag_mom", list(zip(params, grads, moms)), *scalars,
                               lambda kind: [kind(rescale), kind(clip), kind(mom), kind(mom) + kind(1)], clip >= 0,
                               compiled_on(group))
        for index in by_dtype(pick(params, left)).values():  # CUDA, strided, half (or compiled=False): torch ops
            rows = pick(left, index)
            nag_mom_update_torch(pick(params, rows), self._scaled(pick(grads, rows), group), pick(moms, rows), lr,
                                 wd, mom)


def nag_mom_update_torch(weights, grads, moments, lr, wd, mom):
    """MXNet's nag_mom_update (and mp_nag_mom_update on a master) on lists of one dtype with torch's multi-tensor ops,
    in the kernel's order of operations: ``m1 = mu*m; w = (w - m1) + (mu+1)*(m1 - lr*(g + wd*w));
    m = m1 - lr*(g + wd*w_new)``, each operation rounded (no fused multiply-add), so float32 runs are bit for bit
    MXNet's; 13 launches for the whole list.

    Examples:
        >>> nag_mom_update_torch(weights, scaled_grads, momentum_buffers, 0.1, 1e-4, 0.9)  # doctest: +SKIP
    """
    kind = np.float64 if weights[0].dtype == torch.float64 else np.float32
    torch._foreach_mul_(moments, mom)
    decayed = _decayed(weights, grads, wd)
    torch._foreach_mul_(decayed, lr)
    torch._foreach_neg_(decayed)
    torch._foreach_add_(decayed, moments)  # m1 - lr*gg
    torch._foreach_mul_(decayed, float(kind(mom) + kind(1)))
    torch._foreach_sub_(weights, moments)
    torch._foreach_add_(weights, decayed)
    step = _decayed(weights, grads, wd)
    torch._foreach_mul_(step, lr)
    torch._foreach_sub_(moments, step)


def _decayed(weights, grads, wd):
    """New tensors ``wd*w + g`` (a copy of ``g`` when wd is 0)."""
    if not wd:
        return torch._foreach_mul(grads, 1.0)
    out = torch._foreach_mul(weights, wd)
    torch._foreach_add_(out, grads)
    return out


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
        scalars = [lr] * len(params), [wd] * len(params)
        if mom <= 0:  # signsgd_update: the raw gradient's sign; rescale, clip and wd_lh play no part
            left = compiled.update("signsgd", list(zip(params, grads)), *scalars, lambda kind: [kind(1), kind(0)],
                                   False, compiled_on(group))
            if left:
                weights = pick(params, left)
                torch._foreach_mul_(weights, 1.0 - lr * wd)
                torch._foreach_add_(weights, torch._foreach_sign(pick(grads, left)), alpha=-lr)
            return
        rescale, clip = kernel_float(group["rescale_grad"]), clip_bound(group)
        wd_lh = kernel_float(group["wd_lh"]) if group["wd_lh"] else 0.0
        moms = state_buffers(states, "momentum_buffer")
        left = compiled.update("signum", list(zip(params, grads, moms)), *scalars,
                               lambda kind: [kind(rescale), kind(clip), kind(mom), kind(1) - kind(mom), kind(wd_lh),
                                             kind(1), kind(0)], clip >= 0, compiled_on(group))
        if left:  # CUDA, strided, half (or compiled=False): torch's multi-tensor ops
            _signum_torch(pick(params, left), self._scaled(pick(grads, left), group), pick(moms, left), lr, wd, mom,
                          wd_lh)


def _signum_torch(weights, grads, moments, lr, wd, mom, wd_lh):
    """MXNet's signum_update with torch's multi-tensor ops: ``m = mu*m - (1-mu)*(wd*w + g);
    w = (1 - lr*wd_lh)*w + lr*sign(m)`` (fused multiply-adds: float32 rounding apart from MXNet's order)."""
    torch._foreach_mul_(moments, mom)
    torch._foreach_add_(moments, weights, alpha=-(1.0 - mom) * wd)
    torch._foreach_add_(moments, grads, alpha=-(1.0 - mom))
    signs = torch._foreach_sign(moments)
    if wd_lh:
        torch._foreach_mul_(weights, 1.0 - lr * wd_lh)
    torch._foreach_add_(weights, signs, alpha=lr)


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
        grads, previous = python_scaled_all(grads, group), state_buffers(states, "previous_weight")
        compensation = torch._foreach_mul(grads, lamda)  # lamda*g*g*(w - w_prev)
        torch._foreach_mul_(compensation, grads)
        torch._foreach_mul_(compensation, torch._foreach_sub(params, previous))
        step = torch._foreach_mul(params, wd)  # -lr*(wd*w + g + compensation)
        torch._foreach_add_(step, grads)
        torch._foreach_add_(step, compensation)
        torch._foreach_mul_(step, -lr)
        torch._foreach_copy_(previous, params)
        torch._foreach_add_(params, step)


class Test(MXNetOptimizer):
    """MXNet ``test`` (its optimizer for its own unit tests): ``w += rescale_grad * g``, then the state holds a copy
    of the weight. It ignores lr, weight decay and clip_gradient, as MXNet's does.

    Examples:
        >>> opt = Test(model.parameters(), lr=0.1, rescale_grad=0.5)
    """

    state_names = ("weight_copy",)

    def _update(self, group, params, grads, states):
        torch._foreach_add_(params, torch._foreach_mul(grads, group["rescale_grad"]))  # NDArray * python scalar
        torch._foreach_copy_(state_buffers(states, "weight_copy"), params)


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


register(OptimizerRecord("sgd", SGD, ("sgd", "sgd_mom"), torch.optim.SGD, sgd_stock_optimizer, sgd_stock_state,
                         master_last=True))
register(OptimizerRecord("nag", NAG, ("nag_mom", "sgd_single"), torch.optim.SGD, _nag_stock_optimizer,
                         _nag_stock_state, master_last=True))
register(OptimizerRecord("signum", Signum, ("signum", "signsgd"), torch.optim.SGD, _signum_stock_optimizer,
                         _signum_stock_state))
register(OptimizerRecord("sgld", SGLD, (), torch.optim.SGD, _sgld_stock_optimizer, _sgld_stock_state))
register(OptimizerRecord("dcasgd", DCASGD, (), torch.optim.SGD, _dcasgd_stock_optimizer, _dcasgd_stock_state))
register(OptimizerRecord("test", Test, (), None, None, None))
