"""MXNet's normalization ops: ``BatchNorm`` (and one device's ``_contrib_SyncBatchNorm``), ``LayerNorm``,
``InstanceNorm``, ``GroupNorm``, ``L2Normalization`` and ``LRN``.

BatchNorm keeps MXNet's semantics in training mode: batch statistics, running statistics updated with MXNet's
momentum (held as a float32) and the biased batch variance, ``fix_gamma`` (gamma read as 1, with zero gradient),
``use_global_stats``, any axis.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

from migrate.generate.ops.layers import MXNetNames
from migrate.generate.registry import OpNode, register
from mxformats.symbol import FORCED_TRAINING

__all__ = ["BatchNorm", "mx_batch_norm", "LayerNorm", "mx_layer_norm", "InstanceNorm", "GroupNorm", "mx_group_norm",
           "mx_l2_normalization", "mx_lrn"]


@register("BatchNorm", "_contrib_SyncBatchNorm")
def _batch_norm(node: OpNode) -> str:
    """One device's ``_contrib_SyncBatchNorm`` is MXNet's BatchNorm (statistics of this process's batch)."""
    x, gamma, beta, mean, var = node.inputs[:5]
    settings = {"eps": float(node.attr("eps", 1e-3)), "momentum": float(node.attr("momentum", 0.9)),
                "fix_gamma": bool(node.attr("fix_gamma", True)),
                "use_global_stats": bool(node.attr("use_global_stats", False)), "axis": node.attr("axis", 1)}
    stats = tuple(key.rsplit(".", 1)[-1] if key else None for key in node.param_keys[3:5])
    forced = bool(node.attr(FORCED_TRAINING, False)) and not settings["use_global_stats"]  # autograd.train_mode()
    layer = None
    if node.in_shapes and node.in_shapes[1] and len(stats) == 2 and None not in stats and not forced:
        written = {k: v for k, v in settings.items() if v != _BATCH_NORM_DEFAULTS[k]}
        layer = node.layer(BatchNorm, node.in_shapes[1][0], **written,
                           **({} if stats == ("running_mean", "running_var") else {"stats": stats}),
                           params={"gamma": 1, "beta": 2, stats[0]: 3, stats[1]: 4})
    momentum = float(np.float32(settings["momentum"]))  # MXNet holds it as a float32
    if forced:  # the batch's statistics in either mode, none kept: MXNet updates arrays the Block made for the call
        mean = var = "None"
    return layer or node.call(mx_batch_norm, x, gamma, beta, mean, var, "True" if forced else "self.training",
                              f"momentum={momentum!r}",
                              *(f"{k}={settings[k]!r}" for k in ("eps", "fix_gamma", "use_global_stats", "axis")))


_BATCH_NORM_DEFAULTS = {"eps": 1e-3, "momentum": 0.9, "fix_gamma": True, "use_global_stats": False, "axis": 1}


class BatchNorm(MXNetNames, _BatchNorm):
    """MXNet's BatchNorm, a torch ``_BatchNorm`` (so ``convert_sync_batchnorm``, fusion and pruning tools see a batch
    norm) holding MXNet's names: ``gamma``, ``beta`` and the running statistics (``weight``, ``bias``,
    ``running_mean`` and ``running_var`` read them).

    In training it normalizes with the batch statistics by torch's kernel (cuDNN on a GPU), run once, and updates the
    running statistics as MXNet does: ``running = running * momentum + batch * (1 - momentum)`` with the biased batch
    variance (torch's layers use the unbiased one). MXNet updates them in the backward pass, this layer in the
    forward: the same values after each training step.

    Args:
        num_features: the size of ``axis``.
        eps: added to the variance.
        momentum: MXNet's momentum, held as the float32 MXNet holds (0.9 -> 0.8999999762); the ``momentum``
            attribute is torch's (1 - that), as torch's tools read it.
        fix_gamma: gamma is read as 1 and gets a zero gradient (MXNet's default).
        use_global_stats: normalize with the running statistics in training too.
        axis: the channel axis.
        stats: the names of the running mean and variance (``moving_mean``, ``moving_var`` in symbol files).
        dtype: of the parameters and buffers.
    """

    def __init__(self, num_features, eps=1e-3, momentum=0.9, fix_gamma=True, use_global_stats=False, axis=1,
                 stats=("running_mean", "running_var"), dtype=None):
        mx_momentum = float(torch.tensor(momentum, dtype=torch.float32))
        super().__init__(num_features, eps, 1.0 - mx_momentum, dtype=dtype)
        self.hold_as(weight="gamma", bias="beta", running_mean=stats[0], running_var=stats[1])
        self.register_buffer("num_batches_tracked", None)  # MXNet counts no batches (and saves no such key)
        self.mx_momentum, self.fix_gamma, self.use_global_stats, self.axis = (mx_momentum, fix_gamma,
                                                                               use_global_stats, axis)

    def forward(self, x):
        return mx_batch_norm(x, self.gamma, self.beta, self.running_mean, self.running_var, self.training,
                             self.mx_momentum, self.eps, self.fix_gamma, self.use_global_stats, self.axis)

    def reset_running_stats(self):
        self.running_mean.zero_()
        self.running_var.fill_(1)

    def _load_from_state_dict(self, *args):
        nn.Module._load_from_state_dict(self, *args)  # torch's _NormBase would add a num_batches_tracked key

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.mx_momentum:.7g}, fix_gamma={self.fix_gamma}, "
                f"use_global_stats={self.use_global_stats}, axis={self.axis}")


def mx_batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps, fix_gamma,
                  use_global_stats, axis=1):
    """MXNet's BatchNorm (``momentum`` as the float32 MXNet holds): in training, the batch statistics, and the running
    ones updated with the biased batch variance, by one call of torch's kernel: its update uses the unbiased
    variance, so it updates a copy of the running variance multiplied by n / (n - 1) (n values per channel), divided
    back into the running variance: two operations on one value per channel. One value per channel (which torch's
    kernel refuses) has variance 0. Without running statistics (None) it normalizes with the batch's in either mode
    (a BatchNorm the MXNet Block ran under ``autograd.train_mode()``, as GluonCV's GroupNorm does)."""
    if fix_gamma:
        gamma = gamma * 0 + 1
    axis = axis % x.dim()
    if axis != 1:
        x = x.movedim(axis, 1)
    count = x.numel() // x.shape[1]
    kept = running_mean is not None
    if not kept and count > 1:
        y = F.batch_norm(x, None, None, gamma, beta, True, 0.0, eps)
    elif kept and (not training or use_global_stats or torch.onnx.is_in_onnx_export()):
        y = F.batch_norm(x, running_mean, running_var, gamma, beta, training and not use_global_stats,
                         1 - momentum, eps)
    elif count > 1:
        with torch.no_grad():
            scaled = running_var * (count / (count - 1))
        y = F.batch_norm(x, running_mean, scaled, gamma, beta, True, 1 - momentum, eps)
        with torch.no_grad():
            torch.div(scaled, count / (count - 1), out=running_var)
    else:
        if kept:
            with torch.no_grad():
                running_mean.mul_(momentum).add_(x.reshape(-1), alpha=1 - momentum)
                running_var.mul_(momentum)
        shape = (1, -1) + (1,) * (x.dim() - 2)
        y = (x - x) * gamma.reshape(shape) + beta.reshape(shape)
    return y.movedim(1, axis) if axis != 1 else y


@register("LayerNorm")
def _layer_norm(node: OpNode) -> str:
    x, gamma, beta = node.inputs[:3]
    axis, eps = node.attr("axis", -1), float(node.attr("eps", 1e-5))
    ndim = len(node.in_shapes[0]) if node.in_shapes and node.in_shapes[0] else None
    if axis == -1 or (ndim is not None and axis == ndim - 1):
        layer = node.in_shapes[1] and node.layer(LayerNorm, node.in_shapes[1][0], **({} if eps == 1e-5 else
                                                                                      {"eps": eps}),
                                                 params={"gamma": 1, "beta": 2})
        return layer or f"F.layer_norm({x}, {gamma}.shape, {gamma}, {beta}, {eps})"
    return node.call(mx_layer_norm, x, gamma, beta, axis, eps)


class LayerNorm(MXNetNames, nn.LayerNorm):
    """torch's LayerNorm over the last axis holding MXNet's ``gamma`` and ``beta`` (``weight`` and ``bias`` read
    them)."""

    def __init__(self, normalized_shape, eps=1e-5, dtype=None):
        super().__init__(normalized_shape, eps, dtype=dtype)
        self.hold_as(weight="gamma", bias="beta")


def mx_layer_norm(x, gamma, beta, axis, eps):
    """MXNet's LayerNorm over one axis (any axis; gamma and beta have that axis' length)."""
    x = x.movedim(axis, -1)
    y = F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
    return y.movedim(-1, axis)


@register("InstanceNorm")
def _instance_norm(node: OpNode) -> str:
    x, gamma, beta = node.inputs[:3]
    eps = float(node.attr("eps", 1e-3))
    layer = node.in_shapes[1] and node.layer(InstanceNorm, node.in_shapes[1][0], **({} if eps == 1e-3 else
                                                                                    {"eps": eps}),
                                             params={"gamma": 1, "beta": 2})
    return layer or f"F.instance_norm({x}, weight={gamma}, bias={beta}, eps={eps})"


class InstanceNorm(MXNetNames, _InstanceNorm):
    """MXNet's InstanceNorm, a torch ``_InstanceNorm`` of any input rank holding ``gamma`` and ``beta``."""

    def __init__(self, num_features, eps=1e-3, dtype=None):
        super().__init__(num_features, eps, affine=True, dtype=dtype)
        self.hold_as(weight="gamma", bias="beta")

    def forward(self, x):
        return F.instance_norm(x, weight=self.gamma, bias=self.beta, eps=self.eps)


@register("GroupNorm")
def _group_norm(node: OpNode) -> str:
    if node.attr("output_mean_var", False):
        raise node.unsupported("output_mean_var=True")
    groups, eps = node.attr("num_groups", 1), float(node.attr("eps", 1e-5))
    channels = node.in_shapes[0][1] if node.in_shapes and node.in_shapes[0] else None
    layer = channels and node.in_shapes[1] and node.layer(
        GroupNorm, groups, channels, **({} if eps == 1e-5 else {"eps": eps}),
        **({} if node.in_shapes[1][0] == groups else {"affine_size": node.in_shapes[1][0]}),
        params={"gamma": 1, "beta": 2})
    return layer or node.call(mx_group_norm, *node.inputs[:3], groups, eps)


class GroupNorm(MXNetNames, nn.GroupNorm):
    """MXNet's GroupNorm, a torch ``GroupNorm`` holding ``gamma`` and ``beta``: MXNet 1.x holds one of each per
    group (``affine_size`` = the groups), later versions one per channel."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine_size=None, dtype=None):
        super().__init__(num_groups, num_channels, eps, dtype=dtype)
        size = num_groups if affine_size is None else affine_size
        self.weight.data, self.bias.data = self.weight.data[:size], self.bias.data[:size]
        self.hold_as(weight="gamma", bias="beta")

    def forward(self, x):
        return mx_group_norm(x, self.gamma, self.beta, self.num_groups, self.eps)


def mx_group_norm(x, gamma, beta, num_groups, eps):
    """MXNet's GroupNorm: statistics per (sample, group); MXNet 1.x holds one gamma and beta per group (a
    per-channel pair, as later versions hold, is accepted too)."""
    n, c = x.shape[:2]
    y = F.group_norm(x, num_groups, None, None, eps)
    if gamma.numel() == num_groups and c != num_groups:
        gamma, beta = gamma.repeat_interleave(c // num_groups), beta.repeat_interleave(c // num_groups)
    shape = (1, c) + (1,) * (x.dim() - 2)
    return y * gamma.reshape(shape) + beta.reshape(shape)


@register("L2Normalization")
def _l2_normalization(node: OpNode) -> str:
    mode = node.attr("mode", "instance")
    if mode not in ("instance", "channel", "spatial"):
        raise node.unsupported(f"mode {mode!r}")
    return node.call(mx_l2_normalization, node.inputs[0], repr(mode), float(node.attr("eps", 1e-10)))


def mx_l2_normalization(x, mode, eps):
    """MXNet's L2Normalization: x / sqrt(sum(x^2) + eps) over all but the batch axis (instance), over the channel
    axis (channel), or over the spatial axes (spatial)."""
    dims = {"instance": tuple(range(1, x.dim())), "channel": (1,), "spatial": tuple(range(2, x.dim()))}[mode]
    return x / torch.sqrt(torch.sum(x * x, dims, keepdim=True) + eps)


@register("LRN")
def _lrn(node: OpNode) -> str:
    nsize = node.attr("nsize")
    if not isinstance(nsize, int) or nsize < 1:
        raise node.unsupported(f"nsize {nsize!r} (a positive window width is required)")
    return node.call(mx_lrn, node.inputs[0], nsize, float(node.attr("alpha", 1e-4)),
                     float(node.attr("beta", 0.75)), float(node.attr("knorm", 2.0)))


def mx_lrn(x, nsize, alpha, beta, knorm):
    """MXNet's LRN: ``x / (knorm + alpha / nsize * sum of x ** 2 over nearby channels) ** beta``. The window holds
    the (nsize - 1) // 2 channels on each side: nsize for an odd nsize; for an even one, MXNet's default CPU build
    (MKLDNN) sums nsize - 1 channels and still divides alpha by nsize (its plain build refuses even sizes)."""
    window = 2 * ((nsize - 1) // 2) + 1
    return F.local_response_norm(x, window, alpha * window / nsize, beta, knorm)
