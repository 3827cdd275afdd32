"""The Adam family of MXNet 1.9.1 optimizers (first and second moments): ``adam``, ``adamax``, ``nadam``, ``lamb``
and ``ftml``, each an exact torch optimizer, its stock counterpart and its state converters.

adam, lamb and ftml are MXNet C++ kernels (float32 hyperparameters; adam replayed by a compiled loop on CPU, lamb's
norms too); adamax and nadam are written in python in MXNet (python-double scalars).
"""
import math

import numpy as np
import torch

from migrate.optim import _kernels
from migrate.optim.base import (HALF_DTYPES, MXNetOptimizer, clip_, clips, decayed_grads, half_sum_sq, kernel_float,
                                rounded_float32, state_buffers)
from migrate.optim.registry import OptimizerRecord, register

__all__ = ["FTML", "LAMB", "Adam", "Adamax", "Nadam"]


class Adam(MXNetOptimizer):
    """MXNet ``adam``: ``gg = clip(rescale_grad*g + wd*w)``; bias correction folded into lr; eps outside the sqrt.

    Examples:
        >>> opt = Adam(model.parameters(), lr=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8)
    """

    hyperparameters = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "lazy_update": True}
    state_names = ("mean", "var")

    def _update(self, group, params, grads, states):
        beta1, beta2 = kernel_float(group["beta1"]), kernel_float(group["beta2"])
        wd = kernel_float(group["weight_decay"])
        hyper = (wd, beta1, beta2, kernel_float(group["epsilon"]), kernel_float(group["rescale_grad"]),
                 kernel_float(group["clip_gradient"]) if clips(group) else -1.0)
        rows = [(p, g, s) for p, g, s in zip(params, grads, states)
                if not _kernels.run_in_place(_kernels.adam_update, (p, g, s["mean"], s["var"]), _adam_lr(group, s),
                                             *hyper)]
        if not rows:
            return
        params, grads, states = (list(column) for column in zip(*rows))  # CUDA, strided, half: the torch path
        if group["rescale_grad"] != 1.0 or clips(group):  # wd goes inside the clip: a pre-pass
            grads, wd = decayed_grads(grads, params, group), 0.0
        for step, index in _by_step(states).items():
            # torch's kernel: w -= lr_k/(1-b1^t) * m/(sqrt(v)/sqrt(1-b2^t) + eps_k); MXNet's update is
            # w -= f32(lr*sqrt(1-b2^t)/(1-b1^t)) * m/(sqrt(v) + eps): choose lr_k and eps_k to make them equal
            mx_step = _adam_lr(group, states[index[0]])
            root2 = math.sqrt(1.0 - beta2 ** step)
            torch._fused_adam_(
                _pick(params, index), _pick(grads, index), _pick(state_buffers(states, "mean"), index),
                _pick(state_buffers(states, "var"), index), [], [_step_tensor(step, params[0].device)] * len(index),
                lr=mx_step * (1.0 - beta1 ** step) / root2, beta1=beta1, beta2=beta2, weight_decay=wd,
                eps=kernel_float(group["epsilon"]) / root2, amsgrad=False, maximize=False)


def _adam_lr(group, state):
    """MXNet's Adam lr for this update count, as its kernel parses it: ``lr *= sqrt(1-b2^t)/(1-b1^t)`` in doubles."""
    step = state["step"]
    return kernel_float(group["lr"] * (math.sqrt(1.0 - group["beta2"] ** step) / (1.0 - group["beta1"] ** step)))


def _by_step(states):
    """Positions of ``states`` grouped by update count, so each count takes one fused kernel call."""
    out = {}
    for position, state in enumerate(states):
        out.setdefault(state["step"], []).append(position)
    return out


def _pick(items, index):
    """``items`` at positions ``index`` (the list itself when ``index`` covers all of it in order)."""
    return items if len(index) == len(items) else [items[i] for i in index]


def _step_tensor(step, device):
    """The update count as the float32 scalar tensor torch's fused kernels read (on the parameters' device: CUDA's
    kernels refuse a CPU one)."""
    return torch.tensor(float(step), dtype=torch.float32, device=device)


class Adamax(MXNetOptimizer):
    """MXNet ``adamax``: ``u = max(beta2*u, |gg|)`` with no epsilon; ``w -= lr/(1-beta1^t) * m/u``.

    Examples:
        >>> opt = Adamax(model.parameters(), lr=2e-3, beta1=0.9, beta2=0.999)
    """

    hyperparameters = {"beta1": 0.9, "beta2": 0.999}
    state_names = ("mean", "var")

    def _update(self, group, params, grads, states):
        beta1 = group["beta1"]
        grads = _python_decayed(grads, params, group)
        means, norms = state_buffers(states, "mean"), state_buffers(states, "var")
        torch._foreach_mul_(means, beta1)
        torch._foreach_add_(means, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(norms, group["beta2"])
        torch._foreach_maximum_(norms, torch._foreach_abs(grads))
        steps = [-(group["lr"] / (1.0 - beta1 ** s["step"])) for s in states]
        torch._foreach_addcdiv_(params, means, norms, steps)


def _python_decayed(grads, params, group):
    """``clip(g*rescale_grad + wd*w)`` computed as MXNet's python optimizers do (double scalars)."""
    if group["rescale_grad"] == 1.0:
        out = torch._foreach_add(grads, params, alpha=group["weight_decay"])
    else:
        out = torch._foreach_mul(grads, group["rescale_grad"])
        torch._foreach_add_(out, params, alpha=group["weight_decay"])
    clip_(out, group)
    return out


class Nadam(MXNetOptimizer):
    """MXNet ``nadam``: one momentum schedule shared by all parameters, advanced once per parameter update.

    Parameters are updated in MXNet's index order (the ``mx_indices`` of each group when present, else group
    order), so the result depends on the parameter count and order exactly as in MXNet.

    Examples:
        >>> opt = Nadam(model.parameters(), lr=1e-3, schedule_decay=0.004)
    """

    hyperparameters = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "schedule_decay": 0.004}
    state_names = ("mean", "var")

    def _schedule(self, entries):
        """Per-parameter (momentum_t, momentum_t_1, m_schedule, m_schedule_next), advancing the shared product
        (``state["m_schedule"]``, 1 before the first update)."""
        out, m_schedule = [], self.state.get("m_schedule", 1.0)
        for _, group, _, _, state in entries:
            t, beta1, decay = state["step"], group["beta1"], group["schedule_decay"]
            momentum_t = beta1 * (1.0 - 0.5 * (pow(0.96, t * decay)))
            momentum_t_1 = beta1 * (1.0 - 0.5 * (pow(0.96, (t + 1) * decay)))
            m_schedule = m_schedule * momentum_t
            out.append((momentum_t, momentum_t_1, m_schedule, m_schedule * momentum_t_1))
        self.state["m_schedule"] = m_schedule
        return out

    def _step_all(self):
        """One update of every parameter that has a gradient, in MXNet's order (the schedule is shared)."""
        entries = self._in_mx_order()
        if entries:
            self._update_all(entries, self._schedule(entries))

    def _update_all(self, entries, schedule):
        """Apply the update group by group (foreach), each parameter with its own schedule values."""
        by_group = {}
        for (_, group, param, grad, state), values in zip(entries, schedule):
            by_group.setdefault(id(group), (group, []))[1].append((param, grad, state, values))
        for group, items in by_group.values():
            self._update_group(group, *(list(column) for column in zip(*items)))

    @staticmethod
    def _update_group(group, params, grads, states, schedule):
        beta1, beta2 = group["beta1"], group["beta2"]
        grads = _python_decayed(grads, params, group)
        means, variances = state_buffers(states, "mean"), state_buffers(states, "var")
        torch._foreach_mul_(means, beta1)
        torch._foreach_add_(means, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(variances, beta2)
        torch._foreach_addcmul_(variances, grads, grads, value=1.0 - beta2)
        denom = torch._foreach_div(variances, [1.0 - pow(beta2, s["step"]) for s in states])
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["epsilon"])
        lr = group["lr"]  # w -= lr*((1-mu_t)*g/(1-m_sched) + mu_t1*m/(1-m_sched_next)) / denom, as two addcdiv_
        torch._foreach_addcdiv_(params, grads, denom, [-lr * (1.0 - m[0]) / (1.0 - m[2]) for m in schedule])
        torch._foreach_addcdiv_(params, means, denom, [-lr * m[1] / (1.0 - m[3]) for m in schedule])


class LAMB(MXNetOptimizer):
    """MXNet ``lamb`` (multi_lamb_update): Adam direction plus ``wd*w``, scaled by the trust ratio ||w||/||g||.

    The weight norm is bounded below by ``lower_bound`` and above by ``upper_bound`` when they are set.

    Note:
        Gluon's Trainer updates LAMB through ``multi_lamb_update`` (``aggregate_num`` 45 unless
        ``MXNET_OPTIMIZER_AGGREGATION_SIZE`` lowers it; 1 switches MXNet to ``lamb_update_phase1/2`` with
        ``nd.norm``, 2e-9 from this class in float64). Its norms come from ``multi_sum_sq``: each tensor summed in
        element order into a C ``float`` by one thread, so they do not depend on MXNet's thread count. Here float64
        CPU tensors replay that sum exactly (numba); float32 and CUDA tensors use torch's norm (~1e-7 relative).

    Examples:
        >>> opt = LAMB(model.parameters(), lr=1e-3, epsilon=1e-6)
    """

    hyperparameters = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "lower_bound": None, "upper_bound": None,
                       "bias_correction": True}
    state_names = ("mean", "var")

    def _sharded_f32_norms(self, tensors, weights, square_in_float=False):
        """``_f32_norms`` of ``tensors`` (this step's, standing for ``weights``); a DTensor's from the sum of squares
        of its shards over the mesh (float32 sums per shard, added in float64)."""
        if not self._sharded(weights):
            return _f32_norms(tensors, square_in_float)
        sums = [norm * norm for norm in _f32_norms(tensors, square_in_float)] if tensors[0].dtype != torch.float64 \
            else _f32_sums(tensors, square_in_float)
        return [rounded_float32(math.sqrt(total)) for total in self._mesh_sums(sums, weights)]

    def _update(self, group, params, grads, states):
        grads = self._scaled(grads, group)
        negated = self._negated_directions(group, params, grads, states)
        torch._foreach_add_(negated, params, alpha=-rounded_float32(group["weight_decay"]))  # multi_lamb's wds tuple
        if negated[0].dtype != torch.float32:  # MXNet keeps the direction in a float32 buffer
            for buffer in negated:
                buffer.copy_(buffer.to(torch.float32))
        norms = (self._sharded_f32_norms(self._stored(params), params),
                 self._sharded_f32_norms(negated, params, square_in_float=True))
        torch._foreach_mul_(negated, [-step for step in _trust_steps(*norms, group)])
        torch._foreach_add_(params, negated)

    def _negated_directions(self, group, params, grads, states):
        """Scratch buffers holding ``-m_hat/(sqrt(v_hat) + eps)``, the moments updated, by torch's fused Adam.

        The kernel writes ``d -= lr_k/(1-b1^t) * m/(sqrt(v)/sqrt(1-b2^t) + eps_k)`` into zeroed buffers ``d``;
        lr_k and eps_k are chosen so that this is MXNet's (optionally bias-corrected) direction.
        """
        scratch = self.__dict__.setdefault("_scratch", {})  # reused every step, kept out of the state_dict
        keys = [self._param_of(p) for p in params]
        negated = [scratch[k] if k in scratch else scratch.setdefault(k, torch.empty_like(p)) for k, p in zip(keys, params)]
        torch._foreach_zero_(negated)
        beta1, beta2 = kernel_float(group["beta1"]), kernel_float(group["beta2"])
        for step, index in _by_step(states).items():
            root2 = math.sqrt(1.0 - beta2 ** step)
            lr = 1.0 if group["bias_correction"] else (1.0 - beta1 ** step) / root2
            eps = kernel_float(group["epsilon"]) / (1.0 if group["bias_correction"] else root2)
            torch._fused_adam_(
                _pick(negated, index), _pick(grads, index), _pick(state_buffers(states, "mean"), index),
                _pick(state_buffers(states, "var"), index), [], [_step_tensor(step, params[0].device)] * len(index),
                lr=lr, beta1=beta1, beta2=beta2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False)
        return negated


def _f32_norms(tensors, square_in_float=False):
    """L2 norms as float32 values, as MXNet's multi_lamb_update takes them: ``sqrt`` of multi_sum_sq's float sums.

    float64 CPU tensors replay multi_sum_sq exactly (one float accumulator per tensor, in element order; see
    ``migrate.optim._kernels``); others take torch's norm rounded to float32, ~1e-7 relative from MXNet's, within
    float32's own rounding. ``square_in_float``: the values are float32 numbers (MXNet's float32 direction buffer).
    """
    if any(t.dtype in HALF_DTYPES for t in tensors):
        return [rounded_float32(math.sqrt(half_sum_sq(t))) if t.dtype in HALF_DTYPES
                else _f32_norms([t], square_in_float)[0] for t in tensors]
    if tensors[0].dtype == torch.float64 and _kernels.available(*tensors):
        return [rounded_float32(math.sqrt(total)) for total in _f32_sums(tensors, square_in_float)]
    return [rounded_float32(norm) for norm in torch.stack(torch._foreach_norm(tensors)).tolist()]


def _f32_sums(tensors, square_in_float=False):
    """MXNet's multi_sum_sq of float64 tensors (float sums, element order) where the compiled loop runs, else the
    float64 sums of squares."""
    if _kernels.available(*tensors):
        return _kernels.sum_sqs([_kernels.flat(t) for t in tensors], square_in_float).tolist()
    return torch.stack([t.square().sum() for t in tensors]).tolist() if tensors else []


def _trust_steps(r1, r2, group):
    """Per-parameter ``-lr * r1/r2`` (or ``-lr`` when a norm is 0) from the weight norms ``r1`` and the direction
    norms ``r2``, r1 bounded as MXNet's multi_lamb does."""
    lr, lower, upper = rounded_float32(group["lr"]), group["lower_bound"], group["upper_bound"]  # lrs: a tuple
    steps = []
    for w_norm, g_norm in zip(r1, r2):
        if lower is not None and lower >= 0:
            w_norm = max(w_norm, kernel_float(lower))
        if upper is not None and upper >= 0:
            w_norm = min(w_norm, kernel_float(upper))
        steps.append(-lr if w_norm == 0 or g_norm == 0 else -lr * rounded_float32(w_norm / g_norm))
    return steps


class FTML(MXNetOptimizer):
    """MXNet ``ftml`` (ftml_update), Follow the Moving Leader.

    ``gg = clip(rescale_grad*g + wd*w)``; ``v = b2*v + (1-b2)*gg^2``;
    ``d_t = (1-b1^t)/lr * (sqrt(v/(1-b2^t)) + eps)``; ``z = b1*z + (1-b1)*gg - (d_t - b1*d)*w``; ``d = d_t``;
    ``w = -z/d_t``. The scalars are computed in the weight's dtype from float32 hyperparameters, as MXNet's
    kernel does (``t`` is the parameter's update count). lr must be > 0 (MXNet divides by it).

    Examples:
        >>> opt = FTML(model.parameters(), lr=0.01, beta1=0.6, beta2=0.999, epsilon=1e-8)
    """

    hyperparameters = {"beta1": 0.6, "beta2": 0.999, "epsilon": 1e-8}
    state_names = ("d", "v", "z")

    def _update(self, group, params, grads, states):
        grads = decayed_grads(grads, params, group)
        for weight, grad, d, v, z, state in zip(params, grads, state_buffers(states, "d"), state_buffers(states, "v"),
                                               state_buffers(states, "z"), states):
            real = np.float64 if weight.dtype == torch.float64 else np.float32
            lr, beta1, beta2, eps = (real(kernel_float(group[key])) for key in ("lr", "beta1", "beta2", "epsilon"))
            t = real(state["step"])
            one = real(1.0)
            scale_d = float((one - beta1 ** t) / lr)
            correction2 = float(one - beta2 ** t)
            v.mul_(float(beta2)).add_(grad.square().mul_(float(one - beta2)))
            d_t = v.div(correction2).sqrt_().add_(float(eps)).mul_(scale_d)
            z.mul_(float(beta1)).add_(grad.mul(float(one - beta1))).sub_(d_t.sub(d, alpha=float(beta1)).mul_(weight))
            d.copy_(d_t)
            torch.div(z, d_t, out=weight).neg_()


# ---------------------------------------------------------------- MXNet's optimizer-wide state


def _nadam_extra_state(mx_optimizer, optimizer, targets):
    """Nadam's momentum schedule (``m_schedule``, shared by all parameters)."""
    optimizer.state["m_schedule"] = float(mx_optimizer.m_schedule)


# ---------------------------------------------------------------- stock counterparts and their state


def _adam_stock_optimizer(groups, o):
    return torch.optim.Adam(groups, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                            eps=o.get("epsilon", 1e-8), weight_decay=o["weight_decay"], foreach=True), [
        "MXNet adds epsilon to sqrt(v) before bias correction (torch after): set eps to epsilon/sqrt(1-beta2^t) "
        "before each step to match", "MXNet clips the gradient after adding wd*w (torch clips before)"]


def _adamax_stock_optimizer(groups, o):
    return torch.optim.Adamax(groups, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)), eps=0.0,
                              weight_decay=o["weight_decay"], foreach=True), [
        "MXNet clips the gradient after adding wd*w (torch clips before)"]


def _nadam_stock_optimizer(groups, o):
    return torch.optim.NAdam(groups, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                             eps=o.get("epsilon", 1e-8), momentum_decay=o.get("schedule_decay", 0.004),
                             weight_decay=o["weight_decay"], foreach=True), [
        "MXNet's Nadam shares one momentum schedule across all parameters, advanced once per parameter update "
        "(so it depends on their count); torch keeps one per parameter"]


def _lamb_stock_optimizer(groups, o):
    return torch.optim.AdamW(groups, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                             eps=o.get("epsilon", 1e-6), weight_decay=o["weight_decay"], foreach=True), [
        "LAMB has no torch counterpart: AdamW lacks the layer-wise trust ratio ||w||/||g|| and applies weight "
        "decay outside the normalized direction"]


def _ftml_stock_optimizer(groups, o):
    return torch.optim.Adam(groups, lr=o["lr"], betas=(o.get("beta1", 0.6), o.get("beta2", 0.999)),
                            eps=o.get("epsilon", 1e-8), weight_decay=o["weight_decay"], foreach=True), [
        "FTML has no torch counterpart: Adam (same betas) steps along a bias-corrected mean, FTML sets the weight "
        "to -z/d from its accumulated z and d"]


def _adam_stock_state(given):
    """MXNet's mean/var -> Adam's (and AdamW's) exp_avg/exp_avg_sq."""
    return {"step": given.step, "exp_avg": given.arrays[0], "exp_avg_sq": given.arrays[1]}, []


def _adamax_stock_state(given):
    return {"step": given.step, "exp_avg": given.arrays[0], "exp_inf": given.arrays[1]}, []


def _nadam_stock_state(given):
    """mean/var -> exp_avg/exp_avg_sq, and ``mu_product`` recomputed with torch's per-parameter schedule."""
    beta1, decay = float(given.hyper.get("beta1", 0.9)), float(given.hyper.get("schedule_decay", 0.004))
    mu_product = 1.0
    for t in range(1, given.count + 1):
        mu_product *= beta1 * (1.0 - 0.5 * 0.96 ** (t * decay))
    return {"step": given.step, "exp_avg": given.arrays[0], "exp_avg_sq": given.arrays[1],
            "mu_product": torch.tensor(mu_product, dtype=given.step.dtype)}, [
        "MXNet's Nadam momentum schedule (m_schedule, shared by all parameters) is not carried: each torch "
        "parameter's mu_product is recomputed from its own update count"]


def _ftml_stock_state(given):
    return {}, ["MXNet's FTML state (d, v, z) was not converted: the stock Adam keeps other quantities; it restarts "
                "from zero"]


register(OptimizerRecord("adam", Adam, _kernels.adam_update, torch.optim.Adam, _adam_stock_optimizer,
                         _adam_stock_state))
register(OptimizerRecord("adamax", Adamax, None, torch.optim.Adamax, _adamax_stock_optimizer, _adamax_stock_state))
register(OptimizerRecord("nadam", Nadam, None, torch.optim.NAdam, _nadam_stock_optimizer, _nadam_stock_state,
                         extra_state=_nadam_extra_state))
register(OptimizerRecord("lamb", LAMB, _kernels.sum_sqs, torch.optim.AdamW, _lamb_stock_optimizer, _adam_stock_state))
register(OptimizerRecord("ftml", FTML, None, torch.optim.Adam, _ftml_stock_optimizer, _ftml_stock_state))
