"""Back-end: MXNet's own update operators on a table's tensors, the operators the stock optimizer calls.

Used on devices other than the CPU (GPUs), without numba, for rmsprop and adagrad, and for float16 master weights.
SGD runs MXNet's multi-tensor operators (``multi_sgd_update``, ``multi_sgd_mom_update``, ``multi_mp_sgd_*``) on up
to ``MAX_TENSORS`` tensors per call, as stock SGD aggregates dense updates; nag, adam, rmsprop and adagrad have no
multi-tensor operator with their arithmetic and run their per-tensor operator on each tensor, as stock does. Each
kernel takes (optimizer, tensors, mp): ``table.Tensor`` records with their lr/wd, and whether the weights are float16
with float32 master copies (the first state slot of adam/rmsprop/adagrad, the last of sgd/nag).
"""
import math

import numpy as np
from mxnet import nd
from mxnet import optimizer as mxopt

#: Tensors per multi-tensor operator call: MXNet's ``multi_*`` operators abort the process above 60.
MAX_TENSORS = 60


def _common(optimizer) -> dict:
    """rescale_grad and clip_gradient as the stock optimizer passes them (clip only when truthy)."""
    kwargs = {"rescale_grad": optimizer.rescale_grad}
    if optimizer.clip_gradient:
        kwargs["clip_gradient"] = optimizer.clip_gradient
    return kwargs


def _per_tensor(kernel):
    """A kernel on one tensor's (weight, grad, slots, lr, wd) as a kernel on a list of tensors; float16 weights with
    a master copy get the stock multi-precision recipe: update the float32 master copy (first slot), cast back."""
    def run(optimizer, tensors, mp):
        for t in tensors:
            if not mp:
                kernel(optimizer, t.weight, t.grad, t.slots, t.lr, t.wd)
                continue
            master = t.slots[0]
            kernel(optimizer, master, t.grad.astype(np.float32), t.slots[1:], t.lr, t.wd)
            nd.cast(master, dtype=t.weight.dtype, out=t.weight)
    run.__doc__ = kernel.__doc__
    return run


def _sgd(optimizer, tensors, mp):
    """SGD with or without momentum: the multi-tensor operator stock ``SGD._update_impl`` calls on dense arrays
    (``multi_sgd_update``, ``multi_sgd_mom_update``, and their ``multi_mp_*`` forms for float16 master weights)."""
    kwargs = _common(optimizer)
    momentum = optimizer.momentum > 0
    if momentum:
        kwargs["momentum"] = optimizer.momentum
    op = {(False, False): nd.multi_sgd_update, (False, True): nd.multi_sgd_mom_update,
          (True, False): nd.multi_mp_sgd_update, (True, True): nd.multi_mp_sgd_mom_update}[(mp, momentum)]
    for start in range(0, len(tensors), MAX_TENSORS):
        chunk = tensors[start:start + MAX_TENSORS]
        arrays = [array for t in chunk for array in [t.weight, t.grad] + list(t.slots)]
        op(*arrays, out=[t.weight for t in chunk], num_weights=len(chunk), lrs=[t.lr for t in chunk],
           wds=[t.wd for t in chunk], **kwargs)


def _nag(optimizer, tensors, mp):
    """Nesterov momentum: ``nag_mom_update`` or ``sgd_update`` per tensor (``mp_*`` for float16 master weights), as
    stock ``NAG._update_impl``."""
    kwargs = _common(optimizer)
    if optimizer.momentum > 0:
        kwargs["momentum"] = optimizer.momentum
    for t in tensors:
        if mp:
            op = nd.mp_nag_mom_update if len(t.slots) == 2 else nd.mp_sgd_update
        else:
            op = nd.nag_mom_update if t.slots else nd.sgd_update
        op(t.weight, t.grad, *t.slots, out=t.weight, lr=t.lr, wd=t.wd, **kwargs)


@_per_tensor
def _adam(optimizer, weight, grad, slots, lr, wd):
    """Adam: ``adam_update`` (lr already bias-corrected)."""
    nd.adam_update(weight, grad, slots[0], slots[1], out=weight, lazy_update=optimizer.lazy_update, lr=lr, wd=wd,
                   beta1=optimizer.beta1, beta2=optimizer.beta2, epsilon=optimizer.epsilon, **_common(optimizer))


@_per_tensor
def _rmsprop(optimizer, weight, grad, slots, lr, wd):
    """RMSProp: ``rmsprop_update``, or ``rmspropalex_update`` when centered."""
    kwargs = dict(_common(optimizer), gamma1=optimizer.gamma1, epsilon=optimizer.epsilon)
    if optimizer.clip_weights:
        kwargs["clip_weights"] = optimizer.clip_weights
    if optimizer.centered:
        nd.rmspropalex_update(weight, grad, *slots, out=weight, lr=lr, wd=wd, gamma2=optimizer.gamma2, **kwargs)
    else:
        nd.rmsprop_update(weight, grad, slots[0], out=weight, lr=lr, wd=wd, **kwargs)


@_per_tensor
def _adagrad(optimizer, weight, grad, slots, lr, wd):
    """AdaGrad: the stock optimizer's own NDArray expressions (there is no dense AdaGrad operator)."""
    history = slots[0]
    grad = grad * optimizer.rescale_grad
    if optimizer.clip_gradient is not None:
        grad = nd.clip(grad, -optimizer.clip_gradient, optimizer.clip_gradient)
    history[:] += nd.square(grad)
    div = grad / nd.sqrt(history + optimizer.float_stable_eps)
    weight[:] += (div + weight * wd) * -lr


def _adam_lrs(optimizer, indices: list, lrs: list, ahead: int = 0) -> list:
    """Adam's bias-corrected lr of each index, computed exactly as ``mx.optimizer.Adam.update`` does (``ahead``
    updates later): ``lr * (math.sqrt(coef2) / coef1)``, the factor once per distinct update count."""
    counts = [optimizer._index_update_count[index] + ahead for index in indices]
    factors = {t: _adam_factor(optimizer, t) for t in set(counts)}
    return [lr * factors[t] for lr, t in zip(lrs, counts)]


def _adam_factor(optimizer, t: int) -> float:
    """``math.sqrt(coef2) / coef1`` of ``mx.optimizer.Adam.update`` at update count ``t``."""
    coef1 = 1. - optimizer.beta1 ** t
    coef2 = 1. - optimizer.beta2 ** t
    return math.sqrt(coef2) / coef1


#: optimizer class -> (kernel, lr adjustment ``(optimizer, indices, lrs, ahead=0) -> lrs`` or None). Exact classes
#: only: a subclass may change update().
MX_KERNELS = {mxopt.SGD: (_sgd, None), mxopt.NAG: (_nag, None), mxopt.Adam: (_adam, _adam_lrs),
              mxopt.RMSProp: (_rmsprop, None), mxopt.AdaGrad: (_adagrad, None)}
