"""MXNet's vision ops: ``UpSampling`` (nearest and bilinear), ``_contrib_BilinearResize2D``, ``_contrib_ROIAlign``,
``ROIPooling``, the deformable convolutions, ``Crop``, ``depth_to_space`` and ``space_to_depth``.

The ROI ops run on every ROI at once (no loop over ROIs): the bilinear weights of ROIAlign are separable, so each
ROI's samples become two small weight matrices; ROIPooling's bins become row and column masks.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from migrate.generate.registry import OpNode, register

__all__ = ["mx_upsampling_nearest", "mx_bilinear_resize", "mx_resize_size", "mx_resize_source", "mx_roi_align",
           "mx_roi_axis_weights", "mx_roi_pooling", "mx_round_half_away", "mx_deformable_conv", "mx_bilinear_gather",
           "mx_crop", "mx_depth_to_space", "mx_space_to_depth"]


@register("UpSampling")
def _upsampling(node: OpNode) -> str:
    scale, kind = node.attr("scale"), node.attr("sample_type")
    if kind == "nearest":
        mode = node.attr("multi_input_mode", "concat")
        return node.call(mx_upsampling_nearest, f"[{', '.join(node.inputs)}]", scale, repr(mode))
    if kind != "bilinear":
        raise node.unsupported(f"sample_type {kind!r}")
    pad = -(-(scale - 1) // 2)  # MXNet's deconvolution: kernel 2 * scale - scale % 2 (the weight's), this pad
    x, weight = node.inputs[:2]
    return f"F.conv_transpose2d({x}, {weight}, None, stride={scale}, padding={pad}, groups={node.attr('num_filter')})"


def mx_upsampling_nearest(inputs, scale, multi_input_mode):
    """MXNet's nearest UpSampling: the first input repeated ``scale`` times along height and width, the others to
    the same size; several inputs are concatenated on channels or summed."""
    height = inputs[0].shape[2] * scale
    outs = []
    for x in inputs:
        k = height // x.shape[2]
        outs.append(x.repeat_interleave(k, 2).repeat_interleave(k, 3))
    if len(outs) == 1:
        return outs[0]
    return sum(outs[1:], outs[0]) if multi_input_mode == "sum" else torch.cat(outs, 1)


@register("_contrib_BilinearResize2D")
def _bilinear_resize(node: OpNode) -> str:
    mode = node.attr("mode", "size")
    like = node.optional_input(1) if mode == "like" else None

    def scale(key):
        value = node.attr(key)
        return None if value in (None, "None") else float(value)
    return node.call(mx_bilinear_resize, node.inputs[0], like, node.attr("height", 1), node.attr("width", 1),
                     scale("scale_height"), scale("scale_width"), repr(mode), bool(node.attr("align_corners", True)))


def mx_bilinear_resize(x, like, height, width, scale_height, scale_width, mode, align_corners):
    """MXNet's contrib.BilinearResize2D to the size ``mode`` gives: source positions in float32 (as MXNet
    computes them for every dtype) and MXNet's order of the four weighted terms."""
    size = mx_resize_size(x, like, height, width, scale_height, scale_width, mode)
    if tuple(size) == tuple(x.shape[2:]):
        return x * 1.0
    top, down, wy = mx_resize_source(x.shape[2], size[0], align_corners, x.device)
    left, right, wx = mx_resize_source(x.shape[3], size[1], align_corners, x.device)
    wy, wx = wy.to(x.dtype)[:, None], wx.to(x.dtype)
    rows = (x.index_select(2, top), x.index_select(2, top + down))
    a, b = rows[0].index_select(3, left), rows[0].index_select(3, left + right)
    c, d = rows[1].index_select(3, left), rows[1].index_select(3, left + right)
    return (1 - wy) * ((1 - wx) * a + wx * b) + wy * ((1 - wx) * c + wx * d)


def mx_resize_size(x, like, height, width, scale_height, scale_width, mode):
    """The output (height, width) of MXNet's BilinearResize2D for input ``x`` (sizes from a scale are truncated
    products in float32, as MXNet computes them)."""
    h, w = x.shape[2], x.shape[3]

    def scaled(size, scale):
        return int(torch.tensor(scale, dtype=torch.float32) * size)
    if mode == "size":
        if scale_height is not None:
            return scaled(h, scale_height), scaled(w, scale_width)
        return height, width
    if mode == "odd_scale":
        return tuple(scaled(s, k) if s % 2 == 0 else scaled(s - 1, k) + 1
                     for s, k in ((h, scale_height), (w, scale_width)))
    if mode == "like":
        return like.shape[2], like.shape[3]
    step = {"to_even_down": (0, -1), "to_even_up": (0, 1), "to_odd_down": (1, -1), "to_odd_up": (1, 1)}[mode]
    return tuple(s if s % 2 == step[0] else s + step[1] for s in (h, w))


def mx_resize_source(size_in, size_out, align_corners, device):
    """For each output row of MXNet's bilinear resize: (first source row, step to the second, 0 at the last row;
    the second row's weight), computed in float32 for every dtype, as MXNet computes them."""
    def f32(v):
        return torch.tensor(float(v), dtype=torch.float32, device=device)
    if size_out > 1:
        scale = f32(size_in - 1) / f32(size_out - 1) if align_corners else f32(size_in) / f32(size_out)
    else:
        scale = f32(0)
    dst = torch.arange(size_out, dtype=torch.float32, device=device)
    src = scale * dst if align_corners else (scale * (dst + 0.5) - 0.5).clamp(min=0)
    first = src.long()
    return first, (first < size_in - 1).long(), src - first.to(torch.float32)


@register("_contrib_ROIAlign")
def _roi_align(node: OpNode) -> str:
    return node.call(mx_roi_align, *node.inputs[:2], node.tuple_attr("pooled_size"),
                     float(node.attr("spatial_scale")), node.attr("sample_ratio", -1),
                     bool(node.attr("position_sensitive", False)), bool(node.attr("aligned", False)))


def mx_roi_align(x, rois, pooled_size, spatial_scale, sample_ratio, position_sensitive, aligned):
    """MXNet's contrib.ROIAlign (Detectron's): ``rois`` (R, 5) [batch, x1, y1, x2, y2] (or (R, 4) on image 0);
    the mean of sample_ratio x sample_ratio bilinear samples per bin (adaptive ceil(roi / pooled) when <= 0).
    ROIs get no gradient (as in MXNet); an ROI with a negative batch index gives zeros."""
    rois = rois.detach()
    ph, pw = pooled_size
    batch = (rois[:, 0].long() if rois.shape[1] == 5
             else torch.zeros(rois.shape[0], dtype=torch.long, device=rois.device))
    box = rois[:, -4:] * spatial_scale - (0.5 if aligned else 0.0)
    width, height = box[:, 2] - box[:, 0], box[:, 3] - box[:, 1]
    if not aligned:
        width, height = width.clamp(min=1.0), height.clamp(min=1.0)
    if sample_ratio > 0:
        grid_h = grid_w = torch.full_like(width, float(sample_ratio))
    else:
        grid_h, grid_w = torch.ceil(height / ph), torch.ceil(width / pw)
    gh, gw = max(int(grid_h.max()), 1) if rois.shape[0] else 1, max(int(grid_w.max()), 1) if rois.shape[0] else 1
    wy = mx_roi_axis_weights(box[:, 1], height / ph, grid_h, ph, x.shape[2], gh)
    wx = mx_roi_axis_weights(box[:, 0], width / pw, grid_w, pw, x.shape[3], gw)
    rows = torch.einsum("nkw,rqw->nrkq", x.reshape(x.shape[0], -1, x.shape[3]), wx.to(x.dtype))
    rows = rows[batch.clamp(min=0), torch.arange(rois.shape[0], device=rois.device)]
    rows = rows.reshape(rois.shape[0], x.shape[1], x.shape[2], pw)
    out = torch.einsum("rchq,rph->rcpq", rows, wy.to(x.dtype)) / (grid_h * grid_w).to(x.dtype)[:, None, None, None]
    out = out * (batch >= 0).to(x.dtype)[:, None, None, None]
    if position_sensitive:
        r, c = out.shape[:2]  # output channel k, bin (i, j) reads input channel k * ph * pw + i * pw + j
        out = torch.diagonal(out.reshape(r, c // (ph * pw), ph * pw, ph * pw), dim1=2, dim2=3)
        out = out.reshape(r, c // (ph * pw), ph, pw)
    return out


def mx_roi_axis_weights(start, bin_size, grid, pooled, size, grid_max):
    """Per ROI, the weights (R, pooled, size) that average ROIAlign's bilinear samples of one axis in each bin."""
    device, dtype = start.device, start.dtype
    k = torch.arange(grid_max, device=device, dtype=dtype)
    p = torch.arange(pooled, device=device, dtype=dtype)
    pos = (start[:, None, None] + p[None, :, None] * bin_size[:, None, None]
           + (k[None, None, :] + 0.5) * bin_size[:, None, None] / grid[:, None, None])
    used = (k[None, None, :] < grid[:, None, None]) & (pos >= -1.0) & (pos <= size)
    pos = pos.clamp(min=0)
    low = pos.floor().clamp(max=size - 1)
    pos = torch.where(low >= size - 1, low, pos)
    high = (low + 1).clamp(max=size - 1)
    frac = pos - low
    cells = torch.arange(size, device=device, dtype=dtype)
    w = (cells == low[..., None]) * (1 - frac)[..., None] + (cells == high[..., None]) * frac[..., None]
    return (w * used[..., None]).sum(2)


@register("ROIPooling")
def _roi_pooling(node: OpNode) -> str:
    return node.call(mx_roi_pooling, *node.inputs[:2], node.tuple_attr("pooled_size"),
                     float(node.attr("spatial_scale")))


def mx_roi_pooling(x, rois, pooled_size, spatial_scale):
    """MXNet's ROIPooling (Fast R-CNN's): the max of each bin of the rounded ROI (rounded half away from zero,
    bins floor/ceil of the bin size, clipped to the feature map); an empty bin or a batch index outside the batch
    gives 0. ROIs get no gradient."""
    rois = rois.detach()
    ph, pw = pooled_size
    n, c, height, width = x.shape
    batch = rois[:, 0].long()
    x1, y1, x2, y2 = mx_round_half_away(rois[:, 1:5] * spatial_scale).to(rois.dtype).unbind(1)
    bin_h = (y2 - y1 + 1).clamp(min=1) / ph
    bin_w = (x2 - x1 + 1).clamp(min=1) / pw

    def masks(start, bin_size, pooled, size):
        p = torch.arange(pooled, dtype=x.dtype, device=x.device)
        lo = (torch.floor(p * bin_size[:, None]) + start[:, None]).clamp(0, size)
        hi = (torch.ceil((p + 1) * bin_size[:, None]) + start[:, None]).clamp(0, size)
        cells = torch.arange(size, dtype=x.dtype, device=x.device)
        return (cells >= lo[..., None]) & (cells < hi[..., None]), hi > lo
    rows, rows_ok = masks(y1.to(x.dtype), bin_h.to(x.dtype), ph, height)
    cols, cols_ok = masks(x1.to(x.dtype), bin_w.to(x.dtype), pw, width)
    valid = (batch >= 0) & (batch < n)
    feats = x[batch.clamp(0, n - 1)]
    lowest = torch.finfo(x.dtype).min
    by_col = feats[:, :, :, None, :].masked_fill(~cols[:, None, None, :, :], lowest).amax(-1)
    out = by_col[:, :, None, :, :].masked_fill(~rows[:, None, :, :, None], lowest).amax(3)
    keep = (rows_ok[:, :, None] & cols_ok[:, None, :] & valid[:, None, None])[:, None]
    return torch.where(keep, out, torch.zeros_like(out))


def mx_round_half_away(x):
    """C's ``std::round`` (half away from zero) of float32 values, in float64: ``|x| + 0.5`` is exact there, where
    float32 would round 0.49999997 + 0.5 up to 1."""
    x = x.double()
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


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
    return node.call(mx_deformable_conv, x, offset, mask, weight, bias, node.tuple_attr("stride", (1, 1)),
                     node.tuple_attr("pad", (0, 0)), node.tuple_attr("dilate", (1, 1)), node.attr("num_group", 1),
                     node.attr("num_deformable_group", 1))


def mx_deformable_conv(x, offset, mask, weight, bias, stride, pad, dilate, groups, deformable_groups):
    """MXNet's contrib.DeformableConvolution (mask None) and ModulatedDeformableConvolution (DCNv2): each kernel
    tap reads the input at its offset position (offset channels: per deformable group, per tap, dy then dx),
    scaled by the mask, then a grouped convolution of those columns."""
    n, c, height, width = x.shape
    f, _, kh, kw = weight.shape
    ho, wo = offset.shape[2:]
    taps = kh * kw
    dg = deformable_groups
    i = torch.arange(kh, device=x.device, dtype=x.dtype).repeat_interleave(kw)
    j = torch.arange(kw, device=x.device, dtype=x.dtype).repeat(kh)
    rows = torch.arange(ho, device=x.device, dtype=x.dtype) * stride[0] - pad[0]
    cols = torch.arange(wo, device=x.device, dtype=x.dtype) * stride[1] - pad[1]
    base_y = (rows[None, :, None] + i[:, None, None] * dilate[0]).expand(taps, ho, wo)
    base_x = (cols[None, None, :] + j[:, None, None] * dilate[1]).expand(taps, ho, wo)
    offset = offset.reshape(n, dg, taps, 2, ho, wo)
    y = (base_y + offset[:, :, :, 0]).reshape(n, dg, -1)
    xx = (base_x + offset[:, :, :, 1]).reshape(n, dg, -1)
    columns = mx_bilinear_gather(x.reshape(n, dg, c // dg, height, width), y, xx)  # (N, dg, C / dg, K * L)
    if mask is not None:
        columns = columns * mask.reshape(n, dg, 1, -1)
    columns = columns.reshape(n, groups, (c // groups) * taps, ho * wo)
    out = torch.einsum("ngkl,gfk->ngfl", columns, weight.reshape(groups, f // groups, -1)).reshape(n, f, ho, wo)
    return out if bias is None else out + bias.reshape(1, -1, 1, 1)


def mx_bilinear_gather(x, y, xx):
    """Bilinear samples of ``x`` (N, G, C, H, W) at float positions ``y``/``xx`` (N, G, L), as MXNet's deformable
    convolutions take them: corners outside the map read 0, a point at or beyond one pixel outside reads 0."""
    n, g, c, height, width = x.shape
    inside = (y > -1) & (xx > -1) & (y < height) & (xx < width)
    y0, x0 = torch.floor(y), torch.floor(xx)
    ly, lx = y - y0, xx - x0
    flat = x.reshape(n, g, c, height * width)
    out = 0
    for dy, dx, weight in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx), (1, 0, ly * (1 - lx)),
                           (1, 1, ly * lx)):
        cy, cx = y0 + dy, x0 + dx
        ok = inside & (cy >= 0) & (cy <= height - 1) & (cx >= 0) & (cx <= width - 1)
        index = (cy.clamp(0, height - 1) * width + cx.clamp(0, width - 1)).long()
        value = torch.gather(flat, 3, index[:, :, None, :].expand(n, g, c, index.shape[-1]))
        out = out + value * (weight * ok)[:, :, None, :]
    return out


@register("Crop")
def _crop(node: OpNode) -> str:
    """``Crop`` (deprecated in MXNet for ``slice``): a second input gives only its height and width (no gradient)."""
    like = node.optional_input(1) if node.attr("num_args", 1) > 1 else None
    if like is None and min(node.tuple_attr("h_w", (0, 0))) < 1:
        raise node.unsupported(f"h_w {node.tuple_attr('h_w', (0, 0))} with one input (MXNet needs the crop size)")
    return node.call(mx_crop, node.inputs[0], like, node.tuple_attr("h_w", (0, 0)),
                     node.tuple_attr("offset", (0, 0)), bool(node.attr("center_crop", False)))


def mx_crop(x, like, h_w, offset, center_crop):
    """MXNet's Crop of an NCHW input: height and width from ``like``'s axes 2 and 3 (a second input) or ``h_w``;
    the window's top-left corner at ``offset`` (y, x), or centred (rounded down) with ``center_crop``."""
    height, width = (like.shape[2], like.shape[3]) if like is not None else h_w
    top, left = ((x.shape[2] - height) // 2, (x.shape[3] - width) // 2) if center_crop else offset
    if top < 0 or left < 0 or top + height > x.shape[2] or left + width > x.shape[3]:
        raise ValueError(f"Crop: a {height}x{width} window at offset ({top}, {left}) leaves the input's "
                         f"{x.shape[2]}x{x.shape[3]} (height x width)")
    return x[:, :, top:top + height, left:left + width]


@register("depth_to_space", "space_to_depth")
def _depth_to_space(node: OpNode) -> str:
    helper = mx_depth_to_space if node.op == "depth_to_space" else mx_space_to_depth
    return node.call(helper, node.inputs[0], node.attr("block_size"))


def mx_depth_to_space(x, block):
    """MXNet's depth_to_space (ONNX's DCR order): channel ``(i * block + j) * C' + c`` moves to channel ``c`` at
    row offset ``i`` and column offset ``j`` of each block (torch's pixel_shuffle uses the CRD order)."""
    n, c, h, w = x.shape
    y = x.reshape(n, block, block, c // block ** 2, h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // block ** 2, h * block, w * block)


def mx_space_to_depth(x, block):
    """MXNet's space_to_depth, the inverse of ``depth_to_space``: each block's pixel (i, j) of channel ``c`` moves to
    channel ``(i * block + j) * C + c``."""
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // block, block, w // block, block).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * block ** 2, h // block, w // block)
