"""MXNet's normalization ops: ``BatchNorm`` (and one device's ``_contrib_SyncBatchNorm``), ``LayerNorm``,
``InstanceNorm``, ``GroupNorm``, ``L2Normalization`` and ``LRN``.

BatchNorm keeps MXNet's semantics in training mode: batch statistics, running statistics updated with MXNet's
momentum (held as a float32) and the biased batch variance, ``fix_gamma`` (gamma read as 1, with zero gradient),
``use_global_stats``, any axis.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from migrate.generate.registry import OpNode, register

__all__ = ["mx_batch_norm", "mx_layer_norm", "mx_group_norm", "mx_l2_normalization", "mx_lrn"]


@register("BatchNorm")
def _batch_norm(node: OpNode) -> str:
    x, gamma, beta, mean, var = node.inputs[:5]
    return node.call(mx_batch_norm, x, gamma, beta, mean, var, "self.training",
                 f"momentum={node.attr('momentum', 0.9)}", f"eps={node.attr('eps', 1e-3)}",
                 f"fix_gamma={node.attr('fix_gamma', True)}",
                 f"use_global_stats={node.attr('use_global_stats', False)}", f"axis={node.attr('axis', 1)}")


@register("_contrib_SyncBatchNorm")
def _sync_batch_norm(node: OpNode) -> str:
    """One device's SyncBatchNorm is MXNet's BatchNorm (statistics of this process's batch)."""
    x, gamma, beta, mean, var = node.inputs[:5]
    return node.call(mx_batch_norm, x, gamma, beta, mean, var, "self.training",
                     f"momentum={node.attr('momentum', 0.9)}", f"eps={node.attr('eps', 1e-3)}",
                     f"fix_gamma={node.attr('fix_gamma', True)}",
                     f"use_global_stats={node.attr('use_global_stats', False)}")


def mx_batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps, fix_gamma,
                   use_global_stats, axis=1):
    """MXNet's BatchNorm: batch statistics in training (biased variance), running = running * momentum +
    batch * (1 - momentum) with the BIASED batch variance (torch's own uses the unbiased one); fix_gamma uses
    gamma = 1 with a zero gradient. MXNet updates the running statistics in the backward pass, this in the forward.
    MXNet holds momentum as a float32 (0.9 -> 0.89999998), whatever the data's dtype."""
    momentum = float(torch.tensor(momentum, dtype=torch.float32))
    if fix_gamma:
        gamma = gamma * 0 + 1
    axis = axis % x.dim()
    if axis != 1:
        x = x.movedim(axis, 1)
    batch_stats = training and not use_global_stats
    if batch_stats and not torch.onnx.is_in_onnx_export():
        dims = [d for d in range(x.dim()) if d != 1]
        with torch.no_grad():
            var, mean = torch.var_mean(x, dims, correction=0)
            running_mean.mul_(momentum).add_(mean, alpha=1 - momentum)
            running_var.mul_(momentum).add_(var, alpha=1 - momentum)
        y = F.batch_norm(x, None, None, gamma, beta, True, 0.0, eps)
    else:
        y = F.batch_norm(x, running_mean, running_var, gamma, beta, batch_stats, 1 - momentum, eps)
    return y.movedim(1, axis) if axis != 1 else y


@register("LayerNorm")
def _layer_norm(node: OpNode) -> str:
    x, gamma, beta = node.inputs[:3]
    axis, eps = node.attr("axis", -1), node.attr("eps", 1e-5)
    ndim = len(node.in_shapes[0]) if node.in_shapes and node.in_shapes[0] else None
    if axis == -1 or (ndim is not None and axis == ndim - 1):
        return f"F.layer_norm({x}, {gamma}.shape, {gamma}, {beta}, {eps})"
    return node.call(mx_layer_norm, x, gamma, beta, axis, eps)


def mx_layer_norm(x, gamma, beta, axis, eps):
    """MXNet's LayerNorm over one axis (any axis; gamma and beta have that axis' length)."""
    x = x.movedim(axis, -1)
    y = F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
    return y.movedim(-1, axis)


@register("InstanceNorm")
def _instance_norm(node: OpNode) -> str:
    x, gamma, beta = node.inputs[:3]
    return f"F.instance_norm({x}, weight={gamma}, bias={beta}, eps={float(node.attr('eps', 1e-3))})"


@register("GroupNorm")
def _group_norm(node: OpNode) -> str:
    if node.attr("output_mean_var", False):
        raise node.unsupported("output_mean_var=True")
    return node.call(mx_group_norm, *node.inputs[:3], node.attr("num_groups", 1), float(node.attr("eps", 1e-5)))


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
