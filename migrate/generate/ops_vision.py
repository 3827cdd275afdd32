"""Translators of MXNet's vision ops: ``UpSampling`` (nearest and bilinear), ``_contrib_BilinearResize2D``,
``L2Normalization``, ``InstanceNorm``, ``GroupNorm``, ``LRN``, ``_contrib_SyncBatchNorm``, ``_contrib_ROIAlign``,
``ROIPooling``, the deformable convolutions, ``Crop``, ``depth_to_space`` and ``space_to_depth``. Each translator is
a pure function of the node and imports no MXNet; the arithmetic lives in ``runtime_vision``.
"""
from __future__ import annotations

from migrate.generate.registry import OpNode, register

__all__ = []


@register("UpSampling")
def _upsampling(node: OpNode) -> str:
    scale, kind = node.attr("scale"), node.attr("sample_type")
    if kind == "nearest":
        mode = node.attr("multi_input_mode", "concat")
        return node.call("_mx_upsampling_nearest", f"[{', '.join(node.inputs)}]", scale, repr(mode))
    if kind != "bilinear":
        raise node.unsupported(f"sample_type {kind!r}")
    pad = -(-(scale - 1) // 2)  # MXNet's deconvolution: kernel 2 * scale - scale % 2 (the weight's), this pad
    x, weight = node.inputs[:2]
    return f"F.conv_transpose2d({x}, {weight}, None, stride={scale}, padding={pad}, groups={node.attr('num_filter')})"


@register("_contrib_BilinearResize2D")
def _bilinear_resize(node: OpNode) -> str:
    mode = node.attr("mode", "size")
    like = node.optional_input(1) if mode == "like" else None

    def scale(key):
        value = node.attr(key)
        return None if value in (None, "None") else float(value)
    return node.call("_mx_bilinear_resize", node.inputs[0], like, node.attr("height", 1), node.attr("width", 1),
                     scale("scale_height"), scale("scale_width"), repr(mode), bool(node.attr("align_corners", True)))


@register("L2Normalization")
def _l2_normalization(node: OpNode) -> str:
    mode = node.attr("mode", "instance")
    if mode not in ("instance", "channel", "spatial"):
        raise node.unsupported(f"mode {mode!r}")
    return node.call("_mx_l2_normalization", node.inputs[0], repr(mode), float(node.attr("eps", 1e-10)))


@register("InstanceNorm")
def _instance_norm(node: OpNode) -> str:
    x, gamma, beta = node.inputs[:3]
    return f"F.instance_norm({x}, weight={gamma}, bias={beta}, eps={float(node.attr('eps', 1e-3))})"


@register("GroupNorm")
def _group_norm(node: OpNode) -> str:
    if node.attr("output_mean_var", False):
        raise node.unsupported("output_mean_var=True")
    return node.call("_mx_group_norm", *node.inputs[:3], node.attr("num_groups", 1), float(node.attr("eps", 1e-5)))


@register("LRN")
def _lrn(node: OpNode) -> str:
    nsize = node.attr("nsize")
    if not isinstance(nsize, int) or nsize < 1:
        raise node.unsupported(f"nsize {nsize!r} (a positive window width is required)")
    return node.call("_mx_lrn", node.inputs[0], nsize, float(node.attr("alpha", 1e-4)),
                     float(node.attr("beta", 0.75)), float(node.attr("knorm", 2.0)))


@register("_contrib_SyncBatchNorm")
def _sync_batch_norm(node: OpNode) -> str:
    """One device's SyncBatchNorm is MXNet's BatchNorm (statistics of this process's batch)."""
    x, gamma, beta, mean, var = node.inputs[:5]
    return node.call("_mx_batch_norm", x, gamma, beta, mean, var, "self.training",
                     f"momentum={node.attr('momentum', 0.9)}", f"eps={node.attr('eps', 1e-3)}",
                     f"fix_gamma={node.attr('fix_gamma', True)}",
                     f"use_global_stats={node.attr('use_global_stats', False)}")


@register("_contrib_ROIAlign")
def _roi_align(node: OpNode) -> str:
    return node.call("_mx_roi_align", *node.inputs[:2], node.tuple_attr("pooled_size"),
                     float(node.attr("spatial_scale")), node.attr("sample_ratio", -1),
                     bool(node.attr("position_sensitive", False)), bool(node.attr("aligned", False)))


@register("ROIPooling")
def _roi_pooling(node: OpNode) -> str:
    return node.call("_mx_roi_pooling", *node.inputs[:2], node.tuple_attr("pooled_size"),
                     float(node.attr("spatial_scale")))


@register("_contrib_DeformableConvolution", "_contrib_ModulatedDeformableConvolution")
def _deformable_convolution(node: OpNode) -> str:
    kernel = node.tuple_attr("kernel")
    if len(kernel) != 2:
        raise node.unsupported(f"kernel {kernel} (2-D deformable convolutions only)")
    if node.attr("layout") not in (None, "None", "NCHW"):
        raise node.unsupported(f"layout {node.attr('layout')!r}")
    modulated = node.op == "_contrib_ModulatedDeformableConvolution"
    x, offset = node.inputs[:2]
    mask = node.inputs[2] if modulated else None
    weight = node.inputs[3 if modulated else 2]
    bias = None if node.attr("no_bias", False) else node.optional_input(4 if modulated else 3)
    return node.call("_mx_deformable_conv", x, offset, mask, weight, bias, node.tuple_attr("stride", (1, 1)),
                     node.tuple_attr("pad", (0, 0)), node.tuple_attr("dilate", (1, 1)), node.attr("num_group", 1),
                     node.attr("num_deformable_group", 1))


@register("Crop")
def _crop(node: OpNode) -> str:
    """``Crop`` (deprecated in MXNet for ``slice``): a second input gives only its height and width (no gradient)."""
    like = node.optional_input(1) if node.attr("num_args", 1) > 1 else None
    if like is None and min(node.tuple_attr("h_w", (0, 0))) < 1:
        raise node.unsupported(f"h_w {node.tuple_attr('h_w', (0, 0))} with one input (MXNet needs the crop size)")
    return node.call("_mx_crop", node.inputs[0], like, node.tuple_attr("h_w", (0, 0)),
                     node.tuple_attr("offset", (0, 0)), bool(node.attr("center_crop", False)))


@register("depth_to_space", "space_to_depth")
def _depth_to_space(node: OpNode) -> str:
    return node.call(f"_mx_{node.op}", node.inputs[0], node.attr("block_size"))
