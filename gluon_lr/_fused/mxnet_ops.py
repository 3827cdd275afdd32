"""Back-end: MXNet's own update operators (``sgd_mom_update``, ``adam_update``, ``mp_*``, ...) on each flat run.

Used on devices other than the CPU, without numba, for rmsprop and adagrad, and for float16 master weights.
"""
import math

import numpy as np
from mxnet import nd
from mxnet import optimizer as mxopt


def _common(optimizer) -> dict:
    """rescale_grad and clip_gradient as the stock optimizer passes them (clip only when truthy)."""
    kwargs = {"rescale_grad": optimizer.rescale_grad}
    if optimizer.clip_gradient:
        kwargs["clip_gradient"] = optimizer.clip_gradient
    return kwargs


def _master(kernel):
    """Wrap a float32 kernel in the stock multi-precision recipe: update the float32 master copy, cast back."""
    def run(optimizer, weight, grad, slots, lr, wd, mp):
        if not mp:
            return kernel(optimizer, weight, grad, slots, lr, wd)
        master = slots[0]
        kernel(optimizer, master, grad.astype(np.float32), slots[1:], lr, wd)
        nd.cast(master, dtype=weight.dtype, out=weight)
    run.__doc__ = kernel.__doc__
    return run


def _momentum_update(momentum_op, mp_momentum_op, optimizer, weight, grad, slots, lr, wd, mp):
    """The SGD family on one run: ``momentum_op`` (``mp_momentum_op`` for float16 master weights), or plain
    ``sgd_update``/``mp_sgd_update`` without momentum. ``lazy_update`` is passed where the optimizer has it."""
    kwargs = _common(optimizer)
    if optimizer.momentum > 0:
        kwargs["momentum"] = optimizer.momentum
    if mp:
        op = mp_momentum_op if len(slots) == 2 else nd.mp_sgd_update
    else:
        op = momentum_op if slots else nd.sgd_update
        if hasattr(optimizer, "lazy_update"):
            kwargs["lazy_update"] = optimizer.lazy_update
    op(weight, grad, *slots, out=weight, lr=lr, wd=wd, **kwargs)


def _sgd(optimizer, weight, grad, slots, lr, wd, mp):
    """SGD with or without momentum: ``sgd_mom_update``/``sgd_update`` (``mp_*`` for float16 master weights).

    Without momentum, stock SGD aggregates (``aggregate_num > 1``) into ``multi_sgd_update``, whose kernel rounds
    differently from ``sgd_update``'s; the same operator runs here then, on the whole flat run.
    """
    if not mp and not slots and optimizer.aggregate_num > 1:
        nd.multi_sgd_update(weight, grad, out=weight, lrs=(lr,), wds=(wd,), num_weights=1, **_common(optimizer))
        return
    _momentum_update(nd.sgd_mom_update, nd.mp_sgd_mom_update, optimizer, weight, grad, slots, lr, wd, mp)


def _nag(optimizer, weight, grad, slots, lr, wd, mp):
    """Nesterov momentum: ``nag_mom_update``/``sgd_update`` (``mp_*`` for float16 master weights)."""
    _momentum_update(nd.nag_mom_update, nd.mp_nag_mom_update, optimizer, weight, grad, slots, lr, wd, mp)


@_master
def _adam(optimizer, weight, grad, slots, lr, wd):
    """Adam: ``adam_update`` (lr already bias-corrected)."""
    nd.adam_update(weight, grad, slots[0], slots[1], out=weight, lazy_update=optimizer.lazy_update, lr=lr, wd=wd,
                   beta1=optimizer.beta1, beta2=optimizer.beta2, epsilon=optimizer.epsilon, **_common(optimizer))


@_master
def _rmsprop(optimizer, weight, grad, slots, lr, wd):
    """RMSProp: ``rmsprop_update``, or ``rmspropalex_update`` when centered."""
    kwargs = dict(_common(optimizer), gamma1=optimizer.gamma1, epsilon=optimizer.epsilon)
    if optimizer.clip_weights:
        kwargs["clip_weights"] = optimizer.clip_weights
    if optimizer.centered:
        nd.rmspropalex_update(weight, grad, *slots, out=weight, lr=lr, wd=wd, gamma2=optimizer.gamma2, **kwargs)
    else:
        nd.rmsprop_update(weight, grad, slots[0], out=weight, lr=lr, wd=wd, **kwargs)


@_master
def _adagrad(optimizer, weight, grad, slots, lr, wd):
    """AdaGrad: the stock optimizer's own NDArray expressions (there is no dense AdaGrad operator)."""
    history = slots[0]
    grad = grad * optimizer.rescale_grad
    if optimizer.clip_gradient is not None:
        grad = nd.clip(grad, -optimizer.clip_gradient, optimizer.clip_gradient)
    history[:] += nd.square(grad)
    div = grad / nd.sqrt(history + optimizer.float_stable_eps)
    weight[:] += (div + weight * wd) * -lr


def _adam_lr(optimizer, index: int, lr: float) -> float:
    """Adam's bias-corrected lr, computed exactly as ``mx.optimizer.Adam.update`` does."""
    t = optimizer._index_update_count[index]
    coef1 = 1. - optimizer.beta1 ** t
    coef2 = 1. - optimizer.beta2 ** t
    return lr * (math.sqrt(coef2) / coef1)


#: optimizer class -> (kernel, per-index lr adjustment or None). Exact classes only: a subclass may change update().
MX_KERNELS = {mxopt.SGD: (_sgd, None), mxopt.NAG: (_nag, None), mxopt.Adam: (_adam, _adam_lr),
            mxopt.RMSProp: (_rmsprop, None), mxopt.AdaGrad: (_adagrad, None)}
