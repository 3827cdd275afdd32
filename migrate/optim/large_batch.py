"""MXNet 1.9.1's large-batch SGD optimizers: ``lars`` (layer-wise trust ratio) and ``lbsgd`` (gradients summed over
``batch_scale`` calls, warmup), each an exact torch optimizer, its stock counterpart (torch SGD) and its state
converters.
"""
import math
import os

import numpy as np
import torch

from migrate.optim import compiled
from migrate.optim.base import (HALF_DTYPES, MXNetOptimizer, compiled_on, half_sum_sq, kernel_float, momentum_state,
                                rounded_float32)
from migrate.optim.mx_states import state_tensor
from migrate.optim.registry import OptimizerRecord, register
from migrate.optim.sgd_family import sgd_stock_optimizer, sgd_stock_state

__all__ = ["LARS", "LBSGD"]


class LARS(MXNetOptimizer):
    """MXNet ``lars``: SGD (momentum) whose lr is scaled per parameter by the layer-wise trust ratio.

    For each parameter (a ``gluon.Trainer`` gives MXNet's LARS no parameter names, so it scales biases and norm
    parameters too; ``by_name=True`` skips those whose MXNet name ends in gamma, beta or bias, as MXNet does under a
    ``Module``, names from the groups' ``mx_names``): ``lr = lr*eta*|w| / (|g|*rescale_grad + wd*|w| + eps)``
    in float32 when ``|w| > 0`` and ``|g| > 0``, the norms from MXNet's float ``multi_sum_sq`` (replayed element
    by element on CPU; ``mxupdate.kernels.sum_sq``). Then MXNet's ``multi_sgd(_mom)_update`` (which takes ``lr*wd``
    as a float32 product). Parameters are updated in MXNet's index order in chunks of
    ``MXNET_OPTIMIZER_AGGREGATION_SIZE`` (4), as MXNet's Updater calls LARS; with ``momentum_correction`` a chunk's
    momentum is ``momentum * lr/last_lr`` where ``last_lr`` is the schedule's lr at the previous chunk (so after an
    lr change only the first chunk of the step is corrected, as in MXNet). ``last_lr`` is kept in
    ``state["lars_last_lr"]``.

    Examples:
        >>> opt = LARS(param_groups, lr=0.1, momentum=0.9, eta=0.001)
    """

    hyperparameters = {"momentum": 0.0, "lazy_update": True, "eta": 0.001, "eps": 0.0,
                       "momentum_correction": True, "by_name": False}
    state_names = ("momentum_buffer",)

    def _new_state(self, param, group):
        return momentum_state(param, group)

    def _step_all(self):
        rows = []  # (MXNet index, group, param, grad, state, MXNet name)
        for group in self.param_groups:
            where = {id(p): (i, n) for p, i, n in zip(group["params"], group.get("mx_indices", ()),
                                                       group.get("mx_names", ()))}
            for entry in self._entries(group):
                index, name = where.get(id(entry.param), (len(rows), ""))
                rows.append((index, group, entry.weight, entry.grad, entry.state, name))
        rows.sort(key=lambda row: row[0])
        size = int(os.getenv("MXNET_OPTIMIZER_AGGREGATION_SIZE", "4"))
        for start in range(0, len(rows), max(size, 1)):
            self._update_chunk(rows[start:start + max(size, 1)])

    def _update_chunk(self, rows):
        group = rows[0][1]
        lr_now = group["lr"] / group["lr_mult"] if group.get("lr_mult") else group["lr"]
        last = self.state.get("lars_last_lr")
        last = lr_now if last is None else last
        self.state["lars_last_lr"] = lr_now
        lars = [row for row in rows if not (row[1]["by_name"] and row[5].endswith(("gamma", "beta", "bias")))]
        scaled = {}
        if lars:
            weights = [row[2] for row in lars]
            on = compiled_on(group)
            w_sums = self._mesh_sums(_sums_sq(self._stored(weights), on), weights)
            g_sums = self._mesh_sums(_sums_sq(self._stored(weights, [row[3] for row in lars]), on), weights)
            for row, w_sum, g_sum in zip(lars, w_sums, g_sums):
                scaled[id(row[2])] = _lars_lr(row[1], w_sum, g_sum)
        for _, grp, param, grad, state, _ in rows:
            momentum = grp["momentum"]
            if momentum > 0 and grp["momentum_correction"] and last != 0:
                momentum = momentum * (lr_now / last)
            lr = scaled.get(id(param), rounded_float32(grp["lr"]))  # MXNet's lrs: a float32 array
            _multi_sgd_update(self, dict(grp, lr=lr, momentum=momentum), param, grad, state)


def _multi_sgd_update(optimizer, group, param, grad, state):
    """MXNet's preloaded_multi_sgd(_mom)_update on one parameter: ``m = mu*m - f32(lr*wd)*w - lr*clip(...)``."""
    lr, wd = np.float32(group["lr"]), np.float32(group["weight_decay"])  # float32 arrays in MXNet
    grad = optimizer._scaled([grad], group)[0]
    step = torch.mul(param, -float(lr * wd)).add_(grad, alpha=-float(lr))
    if group["momentum"] > 0:
        moment = state["momentum_buffer"]
        moment.mul_(kernel_float(group["momentum"])).add_(step)
        param.add_(moment)
    else:
        param.add_(step)


def _sums_sq(tensors, on=True):
    """MXNet's multi_sum_sq (float sums of squares) of ``tensors``: replayed by the compiled kernel where it can
    run (and ``on``: the group's ``compiled_on``), else float64 sums rounded to float32."""
    if any(t.dtype in HALF_DTYPES for t in tensors):
        return [half_sum_sq(t) if t.dtype in HALF_DTYPES else _sums_sq([t], on)[0] for t in tensors]
    if on and compiled.available(*tensors):
        return compiled.sum_sqs(tensors).tolist()
    return [rounded_float32(total) for total in torch.stack([t.double().square().sum() for t in tensors]).tolist()]


def _lars_lr(group, w_sum, g_sum):
    """MXNet's MultiLARSKernel in float32: ``lr*eta*|w| / (|g|*rescale_grad + wd*|w| + eps)``, or lr."""
    f = np.float32
    lr, wd = f(group["lr"]), f(group["weight_decay"])  # float32 arrays in MXNet
    w_norm = np.sqrt(f(w_sum))
    if not (w_norm > 0 and f(g_sum) > 0):
        return float(lr)
    eta, eps, rescale = (f(kernel_float(group[key])) for key in ("eta", "eps", "rescale_grad"))
    return float(lr * eta * w_norm / (np.sqrt(f(g_sum)) * rescale + wd * w_norm + eps))


class LBSGD(MXNetOptimizer):
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

    Examples:
        >>> opt = LBSGD(model.parameters(), lr=0.1, momentum=0.9, batch_scale=4, warmup_strategy="linear")
    """

    hyperparameters = {"momentum": 0.0, "warmup_strategy": "linear", "warmup_epochs": 5, "batch_scale": 1,
                       "updates_per_epoch": 32, "begin_epoch": 0, "num_epochs": 60}
    state_names = ("momentum_buffer",)
    lr_before_count = True
    """Read by ``migrate.optim.translate.MXNetLRScheduler``: set each group's ``lr_before_count``."""

    def _new_state(self, param, group):
        return momentum_state(param, group)

    def _step_all(self):
        first_ever = not any(isinstance(state, dict) and state.get("step") for state in self.state.values())
        for position, (_, group, param, grad, state) in enumerate(self._in_mx_order()):
            lr = group.get("lr_before_count", group["lr"]) if first_ever and position == 0 else group["lr"]
            self._call(group, param, grad, state, lr)

    def _call(self, group, param, grad, state, lr):
        """One MXNet ``LBSGD.update`` of ``param``: accumulate, and on every batch_scale-th call step."""
        num_cums = state.get("num_cums", 0)
        # under multi_precision MXNet hands update() a float32 copy of a float16 gradient: nothing overwrites it
        live = not self._stands_on_master(param)
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
            mult = _lars_mult(self._mesh_sums(_lbsgd_sums_sq(param, mean), [param, param]), wd)
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


def _lbsgd_sums_sq(weight, grad):
    """The squared norms of MXNet's ``LBSGD._get_lars``, each summed by numpy in the array's dtype."""
    return [(t * t).detach().cpu().numpy().sum() for t in (weight, grad)]


def _lars_mult(sums, wd):
    """MXNet's ``LBSGD._get_lars`` from the squared norms ``sums`` (weight, gradient): ratio bounded to [0.01, 100]."""
    weight2, grad2 = sums
    lars = math.sqrt(weight2 / (grad2 + wd * weight2 + 1e-18))
    return min(max(lars, 0.01), 100)


def _sgd_kernel(optimizer, group, param, grad, state, lr):
    """MXNet's ``sgd_mom_update`` (a momentum buffer and momentum > 0) or ``sgd_update`` with float32 lr and wd."""
    lr, wd = kernel_float(lr), kernel_float(group["weight_decay"])
    grad = optimizer._scaled([grad], group)[0]
    if "momentum_buffer" in state:  # m = mu*m - lr*wd*w - lr*g; w += m (momentum 0 when it is not > 0)
        moment = state["momentum_buffer"]
        moment.mul_(kernel_float(group["momentum"]) if group["momentum"] > 0 else 0.0)
        moment.add_(param, alpha=-lr * wd).add_(grad, alpha=-lr)
        param.add_(moment)
    else:  # w = (1 - lr*wd)*w - lr*g
        param.mul_(1.0 - lr * wd).add_(grad, alpha=-lr)


# ---------------------------------------------------------------- MXNet's optimizer-wide state


def _lars_extra_state(mx_optimizer, optimizer, targets):
    """The lr of LARS's last chunk (its momentum correction's ``last_lr``: MXNet's ``cur_lr``)."""
    if getattr(mx_optimizer, "cur_lr", None) is not None:
        optimizer.state["lars_last_lr"] = float(mx_optimizer.cur_lr)


def _lbsgd_extra_state(mx_optimizer, optimizer, targets):
    """LBSGD's gradient sums (``mx_optimizer.cumgrads``, kept on the optimizer) -> each torch parameter's state.

    A sum still at its first call is MXNet's live gradient array (``cum_live``: the next call reads it overwritten).
    """
    for index, entry in getattr(mx_optimizer, "cumgrads", {}).items():
        mx_name = targets.by_index.get(index)
        if mx_name not in targets.params or targets.params[mx_name] not in optimizer.state:
            continue
        param, cum, num_cums = targets.params[mx_name], entry["cum_grad"], int(entry["num_cums"])
        held = isinstance(cum, np.ndarray)
        master = "master" in optimizer.state[param]  # a float32 sum, as the gradients it adds
        live = held and num_cums == mx_optimizer.init_updates + 1 and not master
        dtype = torch.float32 if master else None
        optimizer.state[param].update(
            num_cums=num_cums, cum_live=live,
            cum_grad=state_tensor(targets.mapping, mx_name, cum, param, dtype=dtype) if held else None)


# ---------------------------------------------------------------- stock counterparts and their state


def _lars_stock_optimizer(groups, o):
    optimizer, diffs = sgd_stock_optimizer(groups, o)
    which = "of each weight (not of biases and norm parameters)" if o.get("by_name") else "of every parameter"
    return optimizer, diffs + ["LARS has no torch counterpart: SGD lacks the layer-wise trust ratio "
                               f"eta*||w||/(||g|| + wd*||w|| + eps) that scales the lr {which}"]


def _lbsgd_stock_optimizer(groups, o):
    optimizer, diffs = sgd_stock_optimizer(groups, o)
    return optimizer, diffs + [
        f"LBSGD has no torch counterpart: SGD steps every call, LBSGD sums gradients over batch_scale="
        f"{o.get('batch_scale', 1)} calls and steps on every batch_scale-th with their mean, its lr multiplied by "
        f"the {o.get('warmup_strategy', 'linear')!r} warmup factor (or, for 'lars', the layer's trust ratio)"]


def _lars_stock_state(given):
    converted, lost = sgd_stock_state(given)
    return converted, lost + ["MXNet's LARS momentum holds lr scaled by each step's trust ratio; it was converted "
                              "with the unscaled lr (lr * lr_mult), so weights' buffers are off by that ratio"]


def _lbsgd_stock_state(given):
    converted, lost = sgd_stock_state(given)
    return converted, lost + ["MXNet's LBSGD momentum holds lr scaled by its warmup (or LARS) multiplier; it was "
                              "converted with the unscaled lr (lr * lr_mult); its partial gradient sums (over "
                              "batch_scale calls) were not carried"]


register(OptimizerRecord("lars", LARS, ("sum_sq",), torch.optim.SGD, _lars_stock_optimizer, _lars_stock_state,
                         master_last=True, extra_state=_lars_extra_state))
register(OptimizerRecord("lbsgd", LBSGD, (), torch.optim.SGD, _lbsgd_stock_optimizer, _lbsgd_stock_state,
                         extra_state=_lbsgd_extra_state))
