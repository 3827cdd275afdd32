"""The Adam family of MXNet 1.9.1 optimizers (first and second moments): ``adam``, ``adamax``, ``nadam``, ``lamb``
and ``ftml``, each an exact torch optimizer, its stock counterpart and its state converters.

adam, lamb and ftml are MXNet C++ kernels (float32 hyperparameters; adam replayed by a compiled loop on CPU, lamb's
norms too); adamax and nadam are written in python in MXNet (python-double scalars).
"""
import math

import numpy as np
import torch

from migrate.optim import compiled
from migrate.optim.base import (HALF_DTYPES, MXNetOptimizer, addcdiv_, by_dtype, cache_pieces, cached_on_cpu, clip_,
                                clip_bound, clips, compiled_on, decayed_grads, half_sum_sq, kernel_float, per_tensor,
                                pick, rounded_float32, state_buffers)
from migrate.optim.registry import OptimizerRecord, register

__all__ = ["FTML", "LAMB", "Adam", "Adamax", "Nadam", "moments_"]


class Adam(MXNetOptimizer):
    """MXNet ``adam``: ``gg = clip(rescale_grad*g + wd*w)``; bias correction folded into lr; eps outside the sqrt.

    Examples:
        >>> opt = Adam(model.parameters(), lr=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8)
    """

    hyperparameters = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "lazy_update": True}
    state_names = ("mean", "var")
    capturable_supported = True

    def _update(self, group, params, grads, states):
        if group["capturable"]:
            _adam_on_device(group, params, grads, states)
            return
        beta1, beta2 = kernel_float(group["beta1"]), kernel_float(group["beta2"])
        wd, eps, rescale = (kernel_float(group[key]) for key in ("weight_decay", "epsilon", "rescale_grad"))
        clip = clip_bound(group)
        rows = [(p, g, s["mean"], s["var"]) for p, g, s in zip(params, grads, states)]
        left = compiled.update("adam", rows, [_adam_lr(group, s) for s in states], [wd] * len(rows),
                               lambda kind: [kind(rescale), kind(clip), kind(beta1), kind(beta2), kind(1) - kind(beta1),
                                             kind(1) - kind(beta2), kind(eps)], clip >= 0, compiled_on(group))
        if not left:
            return
        params, grads, states = pick(params, left), pick(grads, left), pick(states, left)  # CUDA, strided, half
        if group["rescale_grad"] != 1.0 or clips(group):  # wd goes inside the clip: a pre-pass
            grads, wd = decayed_grads(grads, params, group), 0.0
        for step, index in _by_step(states).items():
            # torch's kernel: w -= lr_k/(1-b1^t) * m/(sqrt(v)/sqrt(1-b2^t) + eps_k); MXNet's update is
            # w -= f32(lr*sqrt(1-b2^t)/(1-b1^t)) * m/(sqrt(v) + eps): choose lr_k and eps_k to make them equal
            mx_step = _adam_lr(group, states[index[0]])
            root2 = math.sqrt(1.0 - beta2 ** step)
            torch._fused_adam_(
                pick(params, index), pick(grads, index), pick(state_buffers(states, "mean"), index),
                pick(state_buffers(states, "var"), index), [], [_step_tensor(step, params[0].device)] * len(index),
                lr=mx_step * (1.0 - beta1 ** step) / root2, beta1=beta1, beta2=beta2, weight_decay=wd,
                eps=kernel_float(group["epsilon"]) / root2, amsgrad=False, maximize=False)


def _adam_on_device(group, params, grads, states):
    """MXNet's adam_update in its order with torch's multi-tensor ops, the bias-corrected lr computed from the device
    update counts (``capturable``; rounded to float32 there, where MXNet parses its decimal: within one unit in the
    last place of it)."""
    beta1, beta2, eps = (kernel_float(group[key]) for key in ("beta1", "beta2", "epsilon"))
    lr, b1, b2 = group["lr"], group["beta1"], group["beta2"]
    steps = per_tensor(lambda t: -(lr * (1.0 - b2 ** t) ** 0.5 / (1.0 - b1 ** t)).float(), states, group, params[0])
    grads = decayed_grads(grads, params, group)
    means, variances = state_buffers(states, "mean"), state_buffers(states, "var")
    moments_(means, variances, grads, beta1, beta2)
    denom = torch._foreach_sqrt(variances)
    torch._foreach_add_(denom, eps)
    addcdiv_(params, means, denom, steps)


def moments_(means, variances, grads, beta1, beta2) -> None:
    """Adam's moments in place, in MXNet's order: ``m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g`` (torch's
    multi-tensor ops)."""
    torch._foreach_mul_(means, beta1)
    torch._foreach_add_(means, grads, alpha=1.0 - beta1)
    torch._foreach_mul_(variances, beta2)
    torch._foreach_addcmul_(variances, grads, grads, value=1.0 - beta2)


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
    capturable_supported = True

    def _update(self, group, params, grads, states):
        beta1 = group["beta1"]
        grads = _python_decayed(grads, params, group)
        means, norms = state_buffers(states, "mean"), state_buffers(states, "var")
        torch._foreach_mul_(means, beta1)
        torch._foreach_add_(means, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(norms, group["beta2"])
        torch._foreach_maximum_(norms, torch._foreach_abs(grads))
        lr = group["lr"]
        addcdiv_(params, means, norms, per_tensor(lambda t: -(lr / (1.0 - beta1 ** t)), states, group, params[0]))


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
    capturable_supported = True

    def _schedule(self, entries):
        """Per-parameter (momentum_t, momentum_t_1, m_schedule, m_schedule_next), advancing the shared product
        (``state["m_schedule"]``, 1 before the first update; under ``capturable`` all on the device)."""
        if entries[0][1]["capturable"]:
            return self._device_schedule(entries)
        out, m_schedule = [], self.state.get("m_schedule", 1.0)
        for _, group, _, _, state in entries:
            momentum_t, momentum_t_1 = _nadam_momenta(state["step"], group)
            m_schedule = m_schedule * momentum_t
            out.append((momentum_t, momentum_t_1, m_schedule, m_schedule * momentum_t_1))
        self.state["m_schedule"] = m_schedule
        return out

    def _device_schedule(self, entries):
        """``_schedule`` from the device update counts: the shared product as a cumulative product (float64), each
        column one tensor (a value per parameter)."""
        device = entries[0][2].device
        counts = torch.stack([entry[4]["step"] for entry in entries]).to(device=device, dtype=torch.float64)
        hyper = self._constant([(entry[1]["beta1"], entry[1]["schedule_decay"]) for entry in entries], device)
        momentum_t, momentum_t_1 = _nadam_momenta(counts, {"beta1": hyper[:, 0], "schedule_decay": hyper[:, 1]})
        previous = self.state.get("m_schedule", 1.0)
        if not torch.is_tensor(previous):  # kept on the device and written in place: a CUDA graph replays the step
            previous = self.state["m_schedule"] = torch.tensor(float(previous), dtype=torch.float64, device=device)
        m_schedule = previous * torch.cumprod(momentum_t, 0)
        previous.copy_(m_schedule[-1])
        return momentum_t, momentum_t_1, m_schedule, m_schedule * momentum_t_1

    def _step_all(self):
        """One update of every parameter that has a gradient, in MXNet's order (the schedule is shared)."""
        entries = self._in_mx_order()
        if entries:
            self._update_all(entries, self._schedule(entries))

    def _update_all(self, entries, schedule):
        """Apply the update group by group (foreach), each parameter with its own schedule values (a tuple per
        parameter, or under capturable four tensors of one value per parameter)."""
        by_group = {}
        for position, (_, group, param, grad, state) in enumerate(entries):
            by_group.setdefault(id(group), (group, []))[1].append((position, param, grad, state))
        for group, items in by_group.values():
            positions, params, grads, states = (list(column) for column in zip(*items))
            lr = group["lr"]
            if torch.is_tensor(schedule[0]):
                index = self._constant(positions, schedule[0].device, torch.int64)
                momentum_t, momentum_t_1, m_schedule, m_next = (column[index] for column in schedule)
                scalars = [list((-lr * value).to(params[0].dtype).unbind()) for value in
                           ((1.0 - momentum_t) / (1.0 - m_schedule), momentum_t_1 / (1.0 - m_next))]
            else:
                values = [schedule[p] for p in positions]
                scalars = [[-lr * (1.0 - m[0]) / (1.0 - m[2]) for m in values],
                           [-lr * m[1] / (1.0 - m[3]) for m in values]]
            self._update_group(group, params, grads, states, *scalars)

    @staticmethod
    def _update_group(group, params, grads, states, grad_steps, mean_steps):
        beta1, beta2 = group["beta1"], group["beta2"]
        grads = _python_decayed(grads, params, group)
        means, variances = state_buffers(states, "mean"), state_buffers(states, "var")
        moments_(means, variances, grads, beta1, beta2)
        denom = torch._foreach_div(variances, per_tensor(lambda t: 1.0 - beta2 ** t, states, group, params[0]))
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["epsilon"])
        # w -= lr*((1-mu_t)*g/(1-m_sched) + mu_t1*m/(1-m_sched_next)) / denom, as two addcdiv_
        addcdiv_(params, grads, denom, grad_steps)
        addcdiv_(params, means, denom, mean_steps)


def _nadam_momenta(t, group):
    """MXNet's Nadam (momentum_t, momentum_t_1) at update count ``t`` (python numbers, or float64 tensors of one value
    per parameter: ``t`` and the group's beta1 and schedule_decay)."""
    beta1, decay = group["beta1"], group["schedule_decay"]
    return beta1 * (1.0 - 0.5 * (0.96 ** (t * decay))), beta1 * (1.0 - 0.5 * (0.96 ** ((t + 1) * decay)))



class LAMB(MXNetOptimizer):
    """MXNet ``lamb`` (multi_lamb_update): Adam direction plus ``wd*w``, scaled by the trust ratio ||w||/||g||.

    The weight norm is bounded below by ``lower_bound`` and above by ``upper_bound`` when they are set.

    Note:
        Gluon's Trainer updates LAMB through ``multi_lamb_update`` (``aggregate_num`` 45 unless
        ``MXNET_OPTIMIZER_AGGREGATION_SIZE`` lowers it; 1 switches MXNet to ``lamb_update_phase1/2`` with
        ``nd.norm``, 2e-9 from this class in float64). On contiguous CPU float32/float64 tensors its two steps run
        as MXNet's kernels (``mxupdate.kernels.lamb_direction``/``lamb_apply``: moments and the float32 direction,
        then ``w -= lr*r1/r2*d``). Its norms come from ``multi_sum_sq``: each tensor summed in element order into a
        C ``float`` by one thread. float64 tensors replay it all bit for bit (``mxupdate.kernels.sum_sq`` for the
        sums). float32 tensors take the fast form: the direction in float32 arithmetic (MXNet divides in double;
        within 8 units in the last place of its terms) and the float64 sums that the direction's pass accumulates
        on the way (no extra pass over memory; MXNet's float sum of a million squares is itself ~1e-4 relative from
        the true norm). CUDA (and ``compiled=False``) tensors take torch's fused Adam (adjusted constants) and
        norms, the trust ratios computed on the device (no host sync), ~1e-7 relative from MXNet's.

    Examples:
        >>> opt = LAMB(model.parameters(), lr=1e-3, epsilon=1e-6)
    """

    hyperparameters = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "lower_bound": None, "upper_bound": None,
                       "bias_correction": True}
    state_names = ("mean", "var")
    capturable_supported = True

    def _update(self, group, params, grads, states):
        taken = [i for i, (p, g, s) in enumerate(zip(params, grads, states))
                 if compiled_on(group) and compiled.available(p, g, s["mean"], s["var"])]
        for index in by_dtype(pick(params, taken)).values():
            rows = pick(taken, index)
            self._compiled(group, pick(params, rows), pick(grads, rows), pick(states, rows))
        left = sorted(set(range(len(params))) - set(taken))
        if left:  # CUDA, strided, half (or compiled=False)
            self._torch(group, pick(params, left), self._scaled(pick(grads, left), group), pick(states, left))

    def _directions(self, params, dtype):
        """A scratch buffer of ``dtype`` shaped like each of ``params`` (MXNet's ``temp_g``), kept across steps (out
        of the state_dict)."""
        scratch = self.__dict__.setdefault("_scratch", {})
        out = []
        for param in params:
            key = (self._param_of(param), dtype)
            if key not in scratch:
                scratch[key] = torch.empty(param.shape, dtype=dtype, device=param.device)
            out.append(scratch[key])
        return out

    def _compiled(self, group, params, grads, states):
        """MXNet's multi_lamb_update on CPU tensors of one dtype with the compiled kernels."""
        kind = np.float64 if params[0].dtype == torch.float64 else np.float32
        beta1, beta2, eps = (kernel_float(group[key]) for key in ("beta1", "beta2", "epsilon"))
        clip = clip_bound(group)
        directions = self._directions(params, torch.float32)
        rows = [(p, g, s["mean"], s["var"], d) for p, g, s, d in zip(params, grads, states, directions)]
        corrections = [(kind(1) - np.power(kind(beta1), kind(s["step"])),
                        kind(1) - np.power(kind(beta2), kind(s["step"]))) for s in states]
        consts = [kind(kernel_float(group["rescale_grad"])), kind(clip), kind(beta1), kind(beta2),
                  kind(1) - kind(beta1), kind(1) - kind(beta2), kind(eps)]
        fast = kind is np.float32  # float32: the direction in float32, the direction pass's own float64 sums
        sums = compiled.lamb_direction(rows, [rounded_float32(group["weight_decay"])] * len(rows), corrections,
                                       consts, clip >= 0, group["bias_correction"], sums=fast)
        w_sums = sums[:, 0] if fast else compiled.sum_sqs(params)
        d_sums = sums[:, 1] if fast else compiled.sum_sqs(directions)
        w_sums = [half_sum_sq(t) if t.dtype in HALF_DTYPES else total  # multi_mp_lamb: the float16 weights' sums
                  for t, total in zip(self._stored(params), w_sums.tolist())]
        lr = kind(rounded_float32(group["lr"]))
        ratios = _trust_ratios(self._mesh_sums(w_sums, params), self._mesh_sums(d_sums.tolist(), params), group)
        compiled.lamb_apply(list(zip(params, directions)), [lr * kind(ratio) for ratio in ratios])

    def _torch(self, group, params, grads, states):
        """The update with torch's ops (fused Adam for the direction), the trust ratios on the device."""
        by_kind = by_dtype(params)
        for dtype, index in by_kind.items():
            weights, moments = pick(params, index), pick(states, index)
            negated = self._negated_directions(group, weights, pick(grads, index), moments)
            torch._foreach_add_(negated, weights, alpha=-rounded_float32(group["weight_decay"]))  # wds tuple
            if dtype != torch.float32:  # MXNet keeps the direction in a float32 buffer
                rounded = self._directions(weights, torch.float32)
                torch._foreach_copy_(rounded, negated)
                torch._foreach_copy_(negated, rounded)
            r1 = self._device_norms(self._stored(weights), weights)
            r2 = self._device_norms(negated, weights)
            ratios = _device_trust_ratios(r1, r2, group).to(dtype) * rounded_float32(group["lr"])
            torch._foreach_mul_(negated, list(ratios.unbind()))  # -lr*ratio*d: no host sync
            torch._foreach_add_(weights, negated)

    def _device_norms(self, tensors, weights):
        """Float32 L2 norms of ``tensors`` as one tensor on their device (DTensor shards: sums over the mesh)."""
        halves = [t.dtype in HALF_DTYPES for t in tensors]
        norms = torch.stack(torch._foreach_norm([t.float() if half else t for t, half in zip(tensors, halves)]))
        if any(halves):  # MXNet's float16 sums of squares (multi_mp_lamb), on the host
            exact = [math.sqrt(half_sum_sq(t)) if half else 0.0 for t, half in zip(tensors, halves)]
            norms = torch.where(torch.tensor(halves, device=norms.device),
                                torch.tensor(exact, dtype=norms.dtype, device=norms.device), norms)
        if self._sharded(weights):
            squares = norms.double().square()
            norms = torch.tensor(self._mesh_sums(squares.tolist(), weights), device=norms.device).sqrt()
        return norms.float()

    def _negated_directions(self, group, params, grads, states):
        """Scratch buffers holding ``-m_hat/(sqrt(v_hat) + eps)``, the moments updated, by torch's fused Adam.

        The kernel writes ``d -= lr_k/(1-b1^t) * m/(sqrt(v)/sqrt(1-b2^t) + eps_k)`` into zeroed buffers ``d``;
        lr_k and eps_k are chosen so that this is MXNet's (optionally bias-corrected) direction.
        """
        beta1, beta2 = kernel_float(group["beta1"]), kernel_float(group["beta2"])
        if group["capturable"]:
            return _negated_directions_on_device(group, params, grads, states, beta1, beta2)
        negated = self._directions(params, params[0].dtype)
        torch._foreach_zero_(negated)
        for step, index in _by_step(states).items():
            root2 = math.sqrt(1.0 - beta2 ** step)
            lr = 1.0 if group["bias_correction"] else (1.0 - beta1 ** step) / root2
            eps = kernel_float(group["epsilon"]) / (1.0 if group["bias_correction"] else root2)
            torch._fused_adam_(
                pick(negated, index), pick(grads, index), pick(state_buffers(states, "mean"), index),
                pick(state_buffers(states, "var"), index), [], [_step_tensor(step, params[0].device)] * len(index),
                lr=lr, beta1=beta1, beta2=beta2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False)
        return negated


def _negated_directions_on_device(group, params, grads, states, beta1, beta2):
    """New tensors ``-m_hat/(sqrt(v_hat) + eps)`` (the moments updated) in MXNet's order with torch's multi-tensor
    ops, the bias corrections from the device update counts (``capturable``)."""
    means, variances = state_buffers(states, "mean"), state_buffers(states, "var")
    moments_(means, variances, grads, beta1, beta2)
    if group["bias_correction"]:
        means = torch._foreach_div(means, per_tensor(lambda t: 1.0 - beta1 ** t, states, group, params[0]))
        variances = torch._foreach_div(variances, per_tensor(lambda t: 1.0 - beta2 ** t, states, group, params[0]))
    denom = torch._foreach_sqrt(variances)
    torch._foreach_add_(denom, kernel_float(group["epsilon"]))
    negated = torch._foreach_div(means, denom)
    torch._foreach_neg_(negated)
    return negated


def _bounded(norm, group):
    """The weight norm ``norm`` bounded by the group's lower_bound and upper_bound (when set, >= 0), as MXNet's."""
    lower, upper = group["lower_bound"], group["upper_bound"]
    if lower is not None and lower >= 0:
        norm = max(norm, kernel_float(lower))
    if upper is not None and upper >= 0:
        norm = min(norm, kernel_float(upper))
    return norm


def _trust_ratios(w_sums, d_sums, group):
    """Per tensor MXNet's ``r = r1/r2`` in float (1 when a norm is 0) from the sums of squares of the weight and of
    the direction: ``r1 = sqrt(w_sum)`` (bounded), ``r2 = sqrt(d_sum)``, each a float."""
    ratios = []
    for w_sum, d_sum in zip(w_sums, d_sums):
        r1 = _bounded(rounded_float32(math.sqrt(w_sum)), group)
        r2 = rounded_float32(math.sqrt(d_sum))
        ratios.append(1.0 if r1 == 0 or r2 == 0 else rounded_float32(r1 / r2))
    return ratios


def _device_trust_ratios(r1, r2, group):
    """``_trust_ratios`` on float32 norm tensors (on their device): ``r1/r2``, or 1 where a norm is 0."""
    lower, upper = group["lower_bound"], group["upper_bound"]
    if lower is not None and lower >= 0:
        r1 = r1.clamp_min(kernel_float(lower))
    if upper is not None and upper >= 0:
        r1 = r1.clamp_max(kernel_float(upper))
    return torch.where((r1 == 0) | (r2 == 0), torch.ones_like(r1), r1 / r2)


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
    capturable_supported = True

    def _update(self, group, params, grads, states):
        grads = decayed_grads(grads, params, group)
        for index in by_dtype(params).values():
            columns = [state_buffers(pick(states, index), name) for name in self.state_names]
            if group["capturable"]:
                lr, beta1, beta2 = (kernel_float(group[key]) for key in ("lr", "beta1", "beta2"))
                scalars = [per_tensor(formula, pick(states, index), group, params[index[0]])
                           for formula in (lambda t: (1.0 - beta1 ** t) / lr, lambda t: 1.0 - beta2 ** t)]
                _ftml_update(group, *scalars, pick(params, index), pick(grads, index), *columns)
                continue
            steps = [states[i]["step"] for i in index]
            for step in sorted(set(steps)):  # the scalars depend on the update count: one pass per count
                rows = [i for i, t in zip(index, steps) if t == step]
                scalars = _ftml_scalars(group, step, params[rows[0]].dtype)
                columns = [pick(params, rows), pick(grads, rows)] + [state_buffers(pick(states, rows), name)
                                                                     for name in self.state_names]
                if not cached_on_cpu(params, group):
                    _ftml_update(group, *scalars, *columns)
                    continue
                for piece in cache_pieces(columns):  # every pass over a cache-sized piece while it is in cache
                    _ftml_update(group, *scalars, *([tensor] for tensor in piece))


def _ftml_scalars(group, step, dtype):
    """(``(1 - b1^t)/lr``, ``1 - b2^t``) in the weights' dtype from float32 hyperparameters, as MXNet's kernel
    computes them."""
    real = np.float64 if dtype == torch.float64 else np.float32
    lr, beta1, beta2 = (real(kernel_float(group[key])) for key in ("lr", "beta1", "beta2"))
    t, one = real(step), real(1.0)
    return float((one - beta1 ** t) / lr), float(one - beta2 ** t)


def _ftml_update(group, scale_d, correction2, weights, grads, ds, vs, zs):
    """MXNet's ftml_update on lists of one dtype with torch's multi-tensor ops; ``scale_d`` and ``correction2``
    python floats (one update count) or per-tensor device scalars (``capturable``)."""
    real = np.float64 if weights[0].dtype == torch.float64 else np.float32
    beta1, beta2, eps = (real(kernel_float(group[key])) for key in ("beta1", "beta2", "epsilon"))
    one = real(1.0)
    torch._foreach_mul_(vs, float(beta2))  # v = b2*v + (1-b2)*g^2
    squares = torch._foreach_mul(grads, grads)
    torch._foreach_mul_(squares, float(one - beta2))
    torch._foreach_add_(vs, squares)
    d_t = torch._foreach_div(vs, correction2)  # d_t = (1-b1^t)/lr * (sqrt(v/(1-b2^t)) + eps)
    torch._foreach_sqrt_(d_t)
    torch._foreach_add_(d_t, float(eps))
    torch._foreach_mul_(d_t, scale_d)
    torch._foreach_mul_(zs, float(beta1))  # z = b1*z + (1-b1)*g - (d_t - b1*d)*w
    torch._foreach_add_(zs, torch._foreach_mul(grads, float(one - beta1)))
    change = torch._foreach_sub(d_t, ds, alpha=float(beta1))
    torch._foreach_mul_(change, weights)
    torch._foreach_sub_(zs, change)
    torch._foreach_copy_(ds, d_t)
    torch._foreach_copy_(weights, torch._foreach_div(zs, d_t))  # w = -z/d_t
    torch._foreach_neg_(weights)


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


register(OptimizerRecord("adam", Adam, ("adam",), torch.optim.Adam, _adam_stock_optimizer,
                         _adam_stock_state))
register(OptimizerRecord("adamax", Adamax, (), torch.optim.Adamax, _adamax_stock_optimizer, _adamax_stock_state))
register(OptimizerRecord("nadam", Nadam, (), torch.optim.NAdam, _nadam_stock_optimizer, _nadam_stock_state,
                         extra_state=_nadam_extra_state))
register(OptimizerRecord("lamb", LAMB, ("lamb_direction", "lamb_apply", "sum_sq"), torch.optim.AdamW,
                         _lamb_stock_optimizer, _adam_stock_state))
register(OptimizerRecord("ftml", FTML, (), torch.optim.Adam, _ftml_stock_optimizer, _ftml_stock_state))
