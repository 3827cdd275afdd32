"""torch optimizers for the MXNet 1.9.1 optimizers beyond the common ones (``ftml``), exact as in ``exact.py``.

Registered into ``migrate.optim.exact.OPTIMIZERS`` by that module.
"""
import numpy as np
import torch

from migrate.optim.exact import _MXNetOptimizer, _buffers, _decayed, _f32


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


OPTIMIZERS = {"ftml": FTML}
