"""MXNet's BatchNorm with statistics synchronized across processes, for generated modules trained in parallel.

torch's ``nn.SyncBatchNorm.convert_sync_batchnorm`` sees a generated ``BatchNorm`` (a ``_BatchNorm``) and replaces it
with torch's ``SyncBatchNorm``: torch's running variance (unbiased), ``fix_gamma`` dropped, the keys renamed
(``weight`` for ``gamma``). ``convert_sync_batchnorm`` here replaces it with ``SyncBatchNorm``, which keeps MXNet's
semantics, its keys and its parameters (an optimizer built before still holds them): the batch statistics are the
mean and variance of the values of every rank of the process group, as if one process ran the whole batch (each
rank's sums are added by one differentiable all-reduce; ranks may hold batches of different sizes), and the running
statistics follow MXNet's update with that biased variance. Outside training, with ``use_global_stats``, or alone
(no process group, or one rank), it is ``BatchNorm``.

Examples:
    >>> model = migrate.generate.convert_sync_batchnorm(model)  # doctest: +SKIP
    >>> model = torch.nn.parallel.DistributedDataParallel(model)  # doctest: +SKIP
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from migrate.errors import ModelTypeError
from migrate.generate.ops.normalization import BatchNorm

__all__ = ["SyncBatchNorm", "convert_sync_batchnorm"]

_SETTINGS = ("mx_momentum", "fix_gamma", "use_global_stats", "axis", "torch_names", "eps")


class SyncBatchNorm(BatchNorm):
    """MXNet's BatchNorm whose batch statistics span the ranks of ``process_group`` (None: every rank).

    Build it with ``convert_sync_batchnorm``; its arguments are ``BatchNorm``'s and ``process_group``.
    """

    def __init__(self, *args, process_group=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.process_group = process_group

    def forward(self, x):
        group = self.process_group
        ranks = (torch.distributed.get_world_size(group) if torch.distributed.is_available()
                 and torch.distributed.is_initialized() else 1)
        if not self.training or self.use_global_stats or ranks == 1:
            return super().forward(x)
        gamma = self.gamma * 0 + 1 if self.fix_gamma else self.gamma
        axis = self.axis % x.dim()
        x = x.movedim(axis, 1) if axis != 1 else x
        y = synced_batch_norm(x, gamma, self.beta, self.running_mean, self.running_var, self.mx_momentum, self.eps,
                              group)
        return y.movedim(1, axis) if axis != 1 else y


class _Summed(torch.autograd.Function):
    """The sum of a tensor over the ranks of a process group; its gradient is the sum of the ranks' gradients."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        total = tensor.clone()
        torch.distributed.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx, grad):
        total = grad.clone()
        torch.distributed.all_reduce(total, group=ctx.group)
        return total, None


def synced_batch_norm(x, gamma, beta, running_mean, running_var, momentum, eps, group):
    """Batch norm of ``x`` (channels on axis 1) with the mean and biased variance of every rank's values, running
    statistics updated as MXNet does (``momentum``: MXNet's, a float32)."""
    dims = [d for d in range(x.dim()) if d != 1]
    count = torch.full_like(running_mean, x.numel() // x.shape[1], dtype=x.dtype)
    sums = _Summed.apply(torch.stack([x.sum(dims), (x * x).sum(dims), count]), group)
    mean, total = sums[0] / sums[2], sums[2]
    var = (sums[1] / total - mean * mean).clamp(min=0)
    with torch.no_grad():
        running_mean.mul_(momentum).add_(mean.to(running_mean.dtype), alpha=1 - momentum)
        running_var.mul_(momentum).add_(var.to(running_var.dtype), alpha=1 - momentum)
    shape = (1, -1) + (1,) * (x.dim() - 2)
    scale = gamma * torch.rsqrt(var + eps)
    return x * scale.reshape(shape) + (beta - mean * scale).reshape(shape)


def convert_sync_batchnorm(module: nn.Module, process_group=None) -> nn.Module:
    """``module`` with every generated ``BatchNorm`` replaced by a ``SyncBatchNorm`` holding the same parameters,
    buffers and settings (the state_dict keys and ``MXNET_NAMES`` stay), as torch's
    ``nn.SyncBatchNorm.convert_sync_batchnorm`` does for its own layers.

    Args:
        module: a module ``generate_torch`` wrote (or any module holding its BatchNorm layers).
        process_group: the ranks whose batches make the statistics (None: every rank).

    Returns:
        ``module`` itself with its layers replaced (or the new layer, when ``module`` is one).

    Raises:
        ModelTypeError: a layer is a ``_BatchNorm`` that is not a generated one (torch's own: convert it with torch's
            converter).

    Example:
        >>> model = convert_sync_batchnorm(generated_model)  # doctest: +SKIP
    """
    if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
        if not all(name in vars(module) for name in _SETTINGS):
            raise ModelTypeError(f"{type(module).__name__} is a torch batch norm layer, not one migrate.generate_torch "
                            f"wrote; convert it with torch.nn.SyncBatchNorm.convert_sync_batchnorm")
        synced = SyncBatchNorm.__new__(SyncBatchNorm)
        synced.__dict__.update(vars(module))  # the same parameters, buffers, hooks and settings
        synced.process_group = process_group
        return synced
    for name, child in module.named_children():
        module.add_module(name, convert_sync_batchnorm(child, process_group))
    return module
