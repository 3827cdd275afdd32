"""torch optimizers for the MXNet 1.9.1 optimizers beyond the common ones (``ftml``, ``lars``), exact as in
``exact.py``.

Registered into ``migrate.optim.exact.OPTIMIZERS`` by that module.
"""
import os

import numpy as np
import torch

from migrate.optim import _kernels
from migrate.optim.exact import SGD, _MXNetOptimizer, _buffers, _decayed, _f32, _round32, half_sum_sq


class FTML(_MXNetOptimizer):
    """MXNet ``ftml`` (ftml_update), Follow the Moving Leader.

    ``gg = clip(rescale_grad*g + wd*w)``; ``v = b2*v + (1-b2)*gg^2``;
    ``d_t = (1-b1^t)/lr * (sqrt(v/(1-b2^t)) + eps)``; ``z = b1*z + (1-b1)*gg - (d_t - b1*d)*w``; ``d = d_t``;
    ``w = -z/d_t``. The scalars are computed in the weight's dtype from float32 hyperparameters, as MXNet's
    kernel does (``t`` is the parameter's update count). lr must be > 0 (MXNet divides by it).

    Example:
        >>> opt = FTML(model.parameters(), lr=0.01, beta1=0.6, beta2=0.999, epsilon=1e-8)
    """

    _hyper = {"beta1": 0.6, "beta2": 0.999, "epsilon": 1e-8}
    _state_names = ("d", "v", "z")

    def _update(self, group, params, grads, states):
        grads = _decayed(grads, params, group)
        for weight, grad, d, v, z, state in zip(params, grads, _buffers(states, "d"), _buffers(states, "v"),
                                               _buffers(states, "z"), states):
            real = np.float64 if weight.dtype == torch.float64 else np.float32
            lr, beta1, beta2, eps = (real(_f32(group[key])) for key in ("lr", "beta1", "beta2", "epsilon"))
            t = real(state["step"])
            one = real(1.0)
            scale_d = float((one - beta1 ** t) / lr)
            correction2 = float(one - beta2 ** t)
            v.mul_(float(beta2)).add_(grad.square().mul_(float(one - beta2)))
            d_t = v.div(correction2).sqrt_().add_(float(eps)).mul_(scale_d)
            z.mul_(float(beta1)).add_(grad.mul(float(one - beta1))).sub_(d_t.sub(d, alpha=float(beta1)).mul_(weight))
            d.copy_(d_t)
            torch.div(z, d_t, out=weight).neg_()


class LARS(_MXNetOptimizer):
    """MXNet ``lars``: SGD (momentum) whose lr is scaled per parameter by the layer-wise trust ratio.

    For each parameter (a ``gluon.Trainer`` gives MXNet's LARS no parameter names, so it scales biases and norm
    parameters too; ``by_name=True`` skips those whose MXNet name ends in gamma, beta or bias, as MXNet does under a
    ``Module``, names from the groups' ``mx_names``): ``lr = lr*eta*|w| / (|g|*rescale_grad + wd*|w| + eps)``
    in float32 when ``|w| > 0`` and ``|g| > 0``, the norms from MXNet's float ``multi_sum_sq`` (replayed element
    by element on CPU; ``migrate.optim._kernels``). Then MXNet's ``multi_sgd(_mom)_update`` (which takes ``lr*wd``
    as a float32 product). Parameters are updated in MXNet's index order in chunks of
    ``MXNET_OPTIMIZER_AGGREGATION_SIZE`` (4), as MXNet's Updater calls LARS; with ``momentum_correction`` a chunk's
    momentum is ``momentum * lr/last_lr`` where ``last_lr`` is the schedule's lr at the previous chunk (so after an
    lr change only the first chunk of the step is corrected, as in MXNet). ``last_lr`` is kept in
    ``state["lars_last_lr"]``.

    Example:
        >>> opt = LARS(param_groups, lr=0.1, momentum=0.9, eta=0.001)
    """

    _hyper = {"momentum": 0.0, "lazy_update": True, "eta": 0.001, "eps": 0.0, "momentum_correction": True,
              "by_name": False}

    def _new_state(self, param, group):
        return SGD._new_state(self, param, group)

    def _step_all(self):
        rows = []  # (MXNet index, group, param, grad, state, MXNet name)
        for group in self.param_groups:
            params, grads, states = self._gather(group)
            where = {id(p): (i, n) for p, i, n in zip(group["params"], group.get("mx_indices", ()),
                                                       group.get("mx_names", ()))}
            for param, grad, state in zip(params, grads, states):
                index, name = where.get(id(param), (len(rows), ""))
                rows.append((index, group, param, grad, state, name))
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
            w_sums = _sums_sq(self._stored([row[2] for row in lars]))
            g_sums = _sums_sq(self._stored([row[2] for row in lars], [row[3] for row in lars]))
            for row, w_sum, g_sum in zip(lars, w_sums, g_sums):
                scaled[id(row[2])] = _lars_lr(row[1], w_sum, g_sum)
        for _, grp, param, grad, state, _ in rows:
            momentum = grp["momentum"]
            if momentum > 0 and grp["momentum_correction"] and last != 0:
                momentum = momentum * (lr_now / last)
            lr = scaled.get(id(param), _round32(grp["lr"]))  # MXNet's lrs: a float32 array
            _sgd_update(self, dict(grp, lr=lr, momentum=momentum), param, grad, state)


def _sgd_update(optimizer, group, param, grad, state):
    """MXNet's preloaded_multi_sgd(_mom)_update on one parameter: ``m = mu*m - f32(lr*wd)*w - lr*clip(...)``."""
    lr, wd = np.float32(group["lr"]), np.float32(group["weight_decay"])  # float32 arrays in MXNet
    grad = optimizer._scaled([grad], group)[0]
    step = torch.mul(param, -float(lr * wd)).add_(grad, alpha=-float(lr))
    if group["momentum"] > 0:
        moment = state["momentum_buffer"]
        moment.mul_(_f32(group["momentum"])).add_(step)
        param.add_(moment)
    else:
        param.add_(step)


def _sums_sq(tensors):
    """MXNet's multi_sum_sq (float sums of squares) of ``tensors``, as numpy float32 values."""
    if any(t.dtype in (torch.float16, torch.bfloat16) for t in tensors):
        return [half_sum_sq(t) if t.dtype in (torch.float16, torch.bfloat16) else _sums_sq([t])[0] for t in tensors]
    if _kernels.available(*tensors):
        return _kernels.sum_sqs([_kernels.flat(t) for t in tensors]).tolist()
    return [_round32(torch.sum(t.double() ** 2).item()) for t in tensors]


def _lars_lr(group, w_sum, g_sum):
    """MXNet's MultiLARSKernel in float32: ``lr*eta*|w| / (|g|*rescale_grad + wd*|w| + eps)``, or lr."""
    f = np.float32
    lr, wd = f(group["lr"]), f(group["weight_decay"])  # float32 arrays in MXNet
    w_norm = np.sqrt(f(w_sum))
    if not (w_norm > 0 and f(g_sum) > 0):
        return float(lr)
    eta, eps, rescale = f(_f32(group["eta"])), f(_f32(group["eps"])), f(_f32(group["rescale_grad"]))
    return float(lr * eta * w_norm / (np.sqrt(f(g_sum)) * rescale + wd * w_norm + eps))


OPTIMIZERS = {"ftml": FTML, "lars": LARS}
