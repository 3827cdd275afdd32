"""MXNet's int8 ops, their integer arithmetic replayed as MXNet 1.9.1's CPU build (oneDNN) computes it:
``_contrib_quantize_v2``, ``_contrib_dequantize``, ``_contrib_requantize``, ``_contrib_quantized_conv``,
``_contrib_quantized_fully_connected``, ``_contrib_quantized_pooling``, ``_contrib_quantized_act``,
``_contrib_quantized_flatten``, ``_contrib_quantized_concat``, and ``_sg_mkldnn_conv`` (the convolution MXNet's
quantization fuses with BatchNorm, ReLU and a residual sum) with calibrated output ranges; the float forms of
``_sg_mkldnn_conv`` and ``_sg_mkldnn_fully_connected`` are their subgraphs written out.

A quantized value is three outputs, as in MXNet: the int8 (or uint8) tensor and float32 tensors of shape (1,) holding
the real range's min and max. MXNet's oneDNN ops scale by 127.5 (int8) or 255.5 (uint8) over the largest absolute
range bound, compute each scaled value in float32, round half to even and saturate (INT32_MAX reads as
2147483648.0, its float32 value, as in MXNet's float arithmetic); products of integers are
exact (computed here in float64: every sum stays far below 2^53, as oneDNN's int32 accumulation does with VNNI).
A number divided by a tensor is written as a tensor division (torch computes ``number / tensor`` as the
reciprocal times the number: a second rounding that moves a weight across a rounding tie). torch's own quantized
ops are not used: their rounding (``round(x / scale)``) and fixed int8 range give other
numbers than MXNet's ``x * (127.5 / range)``.

``_sg_mkldnn_conv`` folds BatchNorm into the weights as MXNet does (float32), quantizes the weights per output
channel (scale 127.5 / max |w|, capped so the int32 bias cannot overflow), the bias to int32 at the data scale times
the weight scale, convolves the integers, then scales each channel by output scale / data scale / weight scale,
adds a residual sum (scaled by output scale / its scale), applies ReLU (or LeakyReLU), rounds and saturates. With a
residual MXNet's oneDNN call writes the result into the residual's memory: the output saturates to the residual's
dtype even where MXNet declares the other one (the generated module does the same). Uncalibrated (int32 output), it
quantizes the weights with one scale and gives the range of the integer product; MXNet drops a fused relu6 (clip).

Also replayed: ``_contrib_quantized_batch_norm`` (a per-channel scale and shift in float32, then oneDNN's
normalization of int8 data), ``_contrib_quantized_embedding`` (rows of the int8 weight), and the int8
``_sg_mkldnn_fully_connected`` in each mode ``quantize_net`` writes: int8 weights with their ranges (tensor-wise;
the int32 bias std::round'ed, capped as MXNet caps it) or float32 ones quantized per channel, a calibrated int8 or
uint8 output, a float32 one (dequantize fused) or an int32 one, with a fused ReLU, LeakyReLU, abs or clip. And
``_contrib_quantize`` (v1: scale 127 or 255, not 127.5/255.5), ``_contrib_quantize_asym`` (uint8 with a scale and a
shift: the data of the int8 LSTM, ``ops/quantized_rnn.py``), ``_contrib_quantized_elemwise_add`` (oneDNN's sum) and
``_contrib_quantized_elemwise_mul`` (MXNet's plain loop: truncation and an 8-bit wrap where calibrated).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from migrate.generate.ops.control_flow import subgraph_lines, value_prefix
from migrate.generate.ops.vision import mx_round_half_away
from migrate.generate.registry import OpNode, register, translator

__all__ = ["mx_range_constant", "mx_max_abs", "mx_quantize_scale", "mx_saturate", "mx_quantize_v2", "mx_dequantize",
           "mx_requantize", "mx_int8_product_range", "mx_quantized_conv", "mx_quantized_fully_connected",
           "mx_quantized_concat", "mx_fold_batch_norm", "mx_int8_weights", "mx_int8_convolution",
           "mx_integer_convolution", "mx_quantized_batch_norm", "mx_int8_dense_weights",
           "mx_int8_fully_connected", "mx_int32_convolution", "mx_relu", "mx_quantize", "mx_quantize_asym",
           "mx_quantized_elemwise_add", "mx_quantized_elemwise_mul"]

def mx_max_abs(low, high):
    """MXNet's MaxAbs of a range's bounds (float32 tensors of shape (1,))."""
    return torch.maximum(low.abs(), high.abs())


def mx_quantize_scale(uint8, low, high):
    """MXNet's GetQuantizeScale: 255.5 (uint8) or 127.5 (int8) over the range's largest bound; INT32_MAX for an
    empty range."""
    real = mx_max_abs(low, high)
    scale = torch.full_like(real, 255.5 if uint8 else 127.5) / real  # number / tensor would round twice
    return torch.where(real == 0, torch.full_like(real, 2147483648.0), scale)


def mx_saturate(x, dtype):
    """oneDNN's conversion of float32 values to ``dtype`` (int8, uint8, int32): round half to even, saturate."""
    info = torch.iinfo(dtype)
    return torch.round(x.double()).clamp(info.min, info.max).to(dtype)


def mx_range_constant(value, like):
    """A range bound from a node attribute as MXNet holds it: a float32 tensor of shape (1,)."""
    return torch.tensor([value], dtype=torch.float32, device=like.device)


def mx_quantize_v2(x, out_type, calib_min, calib_max):
    """MXNet's quantize_v2 (oneDNN): ``x * scale`` rounded and saturated, scale from the calibrated range or else
    from x's own min and max; ``auto`` gives uint8 for a calibrated range that starts at 0 or above, else int8.
    Returns (quantized, min, max): uint8 keeps the range, int8 the symmetric one."""
    if calib_min is None:
        low, high = x.detach().min().float().reshape(1), x.detach().max().float().reshape(1)
    else:
        low, high = mx_range_constant(calib_min, x), mx_range_constant(calib_max, x)
    uint8 = out_type == "uint8" or (out_type == "auto" and calib_min is not None and calib_min >= 0)
    quantized = mx_saturate(x.float() * mx_quantize_scale(uint8, low, high), torch.uint8 if uint8 else torch.int8)
    real = mx_max_abs(low, high)
    return (quantized, low, high) if uint8 else (quantized, -real, real)


def mx_dequantize(q, low, high):
    """MXNet's dequantize (oneDNN): q times (range / 255.5 or 127.5), in float32."""
    return q.float() * (mx_max_abs(low, high) / (255.5 if q.dtype == torch.uint8 else 127.5))


def mx_requantize(q, low, high, out_type, calib_min, calib_max):
    """MXNet's requantize (oneDNN) of int32 values: to the calibrated range (or, without one, the range the values
    reach), scale (range_in / INT32_MAX) * (127 or 255 / range_out), rounded and saturated."""
    first = mx_max_abs(low, high) / 2147483648.0
    if calib_min is None:
        reach = torch.maximum(q.min().abs(), q.max().abs()).float().trunc()  # MXNet holds it in an int32
        real = reach * mx_max_abs(low, high) / 2147483648.0
    else:
        real = mx_max_abs(mx_range_constant(calib_min, q), mx_range_constant(calib_max, q))
    uint8 = out_type == "uint8" or (out_type == "auto" and calib_min is not None and calib_min >= 0)
    second = torch.full_like(real, 255.0 if uint8 else 127.0) / real
    out = mx_saturate(q.float() * (first * second), torch.uint8 if uint8 else torch.int8)
    return (out, torch.zeros_like(real), real) if uint8 else (out, -real, real)


def mx_int8_product_range(a_low, a_high, b_low, b_high, a_levels, b_levels):
    """MXNet's QuantizationRangeForMultiplication: the int32 range of a product of values quantized to ``a_levels``
    and ``b_levels`` steps per range bound (127 or 255, as MXNet's callers pick them)."""
    high = (mx_max_abs(a_low, a_high) / a_levels) * (mx_max_abs(b_low, b_high) / b_levels) * 2147483648.0
    return -high, high


def mx_integer_convolution(x, weight, stride, pad, dilate, groups):
    """A convolution of integer-valued tensors, exact in float64 (1, 2 or 3 spatial axes)."""
    conv = (F.conv1d, F.conv2d, F.conv3d)[weight.dim() - 3]
    return conv(x.double(), weight.double(), None, stride, pad, dilate, groups)


def mx_quantized_conv(data, weight, bias, d_low, d_high, w_low, w_high, stride, pad, dilate, groups):
    """MXNet's quantized_conv (oneDNN, uint8 data, int8 weight and bias): the int32 convolution plus the raw int8
    bias, and the int32 range MXNet gives it."""
    out = mx_integer_convolution(data, weight, stride, pad, dilate, groups)
    if bias is not None:
        out = out + bias.double().reshape((1, -1) + (1,) * (out.dim() - 2))
    return (mx_saturate(out, torch.int32), *mx_int8_product_range(d_low, d_high, w_low, w_high, 127.0, 127.0))


def mx_quantized_fully_connected(data, weight, bias, ranges, flatten):
    """MXNet's quantized_fully_connected (oneDNN): the int32 product, the int8 bias rescaled to the product's scale
    (truncated to int32, as MXNet does), and the int32 range MXNet gives it (``ranges``: data, weight and bias
    min/max)."""
    d_low, d_high, w_low, w_high = ranges[:4]
    x = data.flatten(1) if flatten else data
    out = torch.matmul(x.double(), weight.double().t())
    int8_data = data.dtype == torch.int8
    if bias is not None:
        data_scale = mx_quantize_scale(not int8_data, d_low, d_high)
        rescale = data_scale * mx_quantize_scale(False, w_low, w_high) * mx_max_abs(ranges[4], ranges[5]) / 127.5
        out = out + (bias.float() * rescale).trunc().double()
    levels = (127.0, 127.0) if int8_data else (127.0, 255.0)
    return (mx_saturate(out, torch.int32), *mx_int8_product_range(d_low, d_high, w_low, w_high, *levels))


def mx_quantized_concat(parts, lows, highs, dim):
    """MXNet's quantized_concat (oneDNN): every part rescaled to the widest range (rounded, saturated; int8 if any
    part is), then concatenated; the range is the widest one, 0 included."""
    low = torch.minimum(torch.stack(lows).min(0).values, torch.zeros_like(lows[0]))
    high = torch.maximum(torch.stack(highs).max(0).values, torch.zeros_like(highs[0]))
    dtype = torch.int8 if any(p.dtype == torch.int8 for p in parts) else torch.uint8
    out_scale = mx_quantize_scale(dtype == torch.uint8, low, high)
    rescaled = [mx_saturate(part.float() * (out_scale / mx_quantize_scale(part.dtype == torch.uint8, part_low,
                                                                          part_high)), dtype)
                for part, part_low, part_high in zip(parts, lows, highs)]  # a part already at the scale stays as it is
    return torch.cat(rescaled, dim), low, high


def mx_fold_batch_norm(weight, bias, gamma, beta, mean, var, eps, fix_gamma):
    """MXNet's BatchNorm folded into a convolution's weight and bias (float32; the scale gamma / sqrt(var + eps) in
    double, as MXNet computes it)."""
    gamma = torch.ones_like(gamma) if fix_gamma else gamma
    alpha = (gamma.double() / torch.sqrt(var.double() + eps)).float()
    shape = (-1,) + (1,) * (weight.dim() - 1)
    new_bias = beta - alpha * mean if bias is None else beta + alpha * (bias - mean)
    return weight * alpha.reshape(shape), new_bias


def mx_int8_weights(weight, bias, data_scale):
    """MXNet's per-channel int8 weights of a calibrated fused convolution: (int8 weights, int32 bias or None,
    float32 scales); a channel's scale 127.5 / max |w| is capped so that its int32 bias stays within INT32_MAX / 2."""
    w_max = weight.flatten(1).abs().amax(1)
    scales = mx_quantize_scale(False, w_max, w_max)
    if bias is None:
        return mx_saturate(weight * scales.reshape((-1,) + (1,) * (weight.dim() - 1)), torch.int8), None, scales
    cap = torch.where(bias > 0, 2147483648.0, -2147483648.0) / 2 / bias / data_scale
    scales = torch.where(bias != 0, torch.minimum(scales, cap), scales)
    q_weight = mx_saturate(weight * scales.reshape((-1,) + (1,) * (weight.dim() - 1)), torch.int8)
    return q_weight, mx_saturate(bias * (scales * data_scale), torch.int32), scales


def mx_relu(x, slope):
    """oneDNN's relu post-op: x where x > 0, else x times ``slope`` (0: ReLU; LeakyReLU's slope)."""
    return x.clamp(min=0) if slope == 0 else torch.where(x > 0, x, x * slope)


def mx_int8_convolution(data, d_low, d_high, weight, bias, bn, residual, conv, act, out_range):
    """MXNet's calibrated int8 ``_sg_mkldnn_conv``: ``data`` quantized (its range ``d_low``/``d_high``), float32
    ``weight``/``bias`` (None: no bias), ``bn`` None or (gamma, beta, mean, var, eps, fix_gamma) folded in first,
    ``residual`` None or (quantized, min, max) added after the scaling, ``conv`` (stride, pad, dilate, groups),
    ``act`` (the negative slope of a ReLU/LeakyReLU before the sum, of one after it; None: none), ``out_range`` (min,
    max, uint8). Returns (quantized output, min, max)."""
    if bn is not None:
        weight, bias = mx_fold_batch_norm(weight, bias, *bn)
    out_low, out_high = mx_range_constant(out_range[0], data), mx_range_constant(out_range[1], data)
    data_scale = mx_quantize_scale(data.dtype == torch.uint8, d_low, d_high)
    q_weight, q_bias, w_scales = mx_int8_weights(weight, bias, data_scale)
    out_scale = mx_quantize_scale(out_range[2], out_low, out_high)
    acc = mx_integer_convolution(data, q_weight, *conv)
    channel = (1, -1) + (1,) * (acc.dim() - 2)
    value = acc.float() if q_bias is None else acc.float() + q_bias.float().reshape(channel)
    value = value * (out_scale / data_scale / w_scales).reshape(channel)
    if act[0] is not None:
        value = mx_relu(value, act[0])
    if residual is not None:
        sum_scale = out_scale / mx_quantize_scale(residual[0].dtype == torch.uint8, residual[1], residual[2])
        value = (value.double() + sum_scale.double() * residual[0].double()).float()  # one rounding, as an FMA
    if act[1] is not None:
        value = mx_relu(value, act[1])
    out_dtype = torch.uint8 if out_range[2] else torch.int8
    if residual is not None:  # the sum is written into the residual's memory, saturated to its dtype
        return mx_saturate(value, residual[0].dtype).to(out_dtype), out_low, out_high
    return mx_saturate(value, out_dtype), out_low, out_high


def _calib(node: OpNode) -> tuple:
    low, high = node.attr("min_calib_range"), node.attr("max_calib_range")
    return (None, None) if low is None or high is None else (float(low), float(high))


@register("_contrib_quantize_v2")
def _quantize_v2(node: OpNode) -> str:
    return node.call(mx_quantize_v2, node.inputs[0], repr(node.attr("out_type", "int8")), *_calib(node))


@register("_contrib_dequantize")
def _dequantize(node: OpNode) -> str:
    if node.attr("out_type", "float32") != "float32":
        raise node.unsupported(f"out_type {node.attr('out_type')!r}")
    return node.call(mx_dequantize, *node.inputs[:3])


@register("_contrib_requantize")
def _requantize(node: OpNode) -> str:
    return node.call(mx_requantize, *node.inputs[:3], repr(node.attr("out_type", "int8")), *_calib(node))


def _conv_args(node: OpNode, attrs: dict) -> tuple:
    """(stride, pad, dilate, groups) of a Convolution's attributes."""
    conv = OpNode("Convolution", node.name, attrs, [])
    n = len(conv.tuple_attr("kernel"))
    if conv.attr("layout") not in (None, "None", "NCW", "NCHW", "NCDHW"):
        raise node.unsupported(f"layout {conv.attr('layout')}")
    return (conv.tuple_attr("stride", (1,) * n) or (1,) * n, conv.tuple_attr("pad", (0,) * n) or (0,) * n,
            conv.tuple_attr("dilate", (1,) * n) or (1,) * n, int(conv.attr("num_group", 1)))


@register("_contrib_quantized_conv")
def _quantized_conv(node: OpNode) -> str:
    has_bias = not node.attr("no_bias", False)
    data, weight = node.inputs[:2]
    bias = node.inputs[2] if has_bias else None
    ranges = node.inputs[3 if has_bias else 2:][:4]
    return node.call(mx_quantized_conv, data, weight, bias, *ranges, *_conv_args(node, node.attrs))


@register("_contrib_quantized_fully_connected")
def _quantized_fully_connected(node: OpNode) -> str:
    has_bias = not node.attr("no_bias", False)
    bias = node.inputs[2] if has_bias else None
    ranges = node.inputs[3 if has_bias else 2:]
    return node.call(mx_quantized_fully_connected, *node.inputs[:2], bias, f"[{', '.join(ranges)}]",
                     bool(node.attr("flatten", True)))


@register("_contrib_quantized_pooling")
def _quantized_pooling(node: OpNode) -> str:
    """MXNet's Pooling on the integers (its translation, in float64), rounded half to even and saturated to the
    input's dtype (max pooling is exact; average pooling rounds as oneDNN does); the range passes through."""
    x = node.inputs[0]
    pool = OpNode("Pooling", node.name, node.attrs, [f"{x}.double()"], node.in_shapes[:1], node.out_shape)
    pooled = translator("Pooling", node.name)(pool)
    node.emitted |= pool.emitted
    return f"({node.call(mx_saturate, pooled, f'{x}.dtype')}, {node.inputs[1]}, {node.inputs[2]})"


@register("_contrib_quantized_act")
def _quantized_act(node: OpNode) -> str:
    if node.attr("act_type") != "relu":
        raise node.unsupported(f"act_type {node.attr('act_type')!r} (relu is translated)")
    return f"({node.inputs[0]}.clamp(min=0), {node.inputs[1]}, {node.inputs[2]})"


@register("_contrib_quantized_flatten")
def _quantized_flatten(node: OpNode) -> str:
    return f"({node.inputs[0]}.flatten(1), {node.inputs[1]}, {node.inputs[2]})"


@register("_contrib_quantized_concat")
def _quantized_concat(node: OpNode) -> str:
    n = int(node.attr("num_args"))
    parts, ranges = node.inputs[:n], node.inputs[n:]
    return node.call(mx_quantized_concat, f"[{', '.join(parts)}]", f"[{', '.join(ranges[0::2])}]",
                     f"[{', '.join(ranges[1::2])}]", int(node.attr("dim", 1)))


def mx_quantized_batch_norm(data, gamma, beta, mean, var, d_low, d_high, eps, out_low, out_high):
    """MXNet's quantized_batch_norm (oneDNN): uint8 data first reordered to int8 (times 127.5 / 255.5, rounded);
    per channel the scale gamma * invstd * (data range / output range) and the shift (beta - mean * gamma * invstd)
    * 127.5 / output range (float32; invstd = 1 / sqrt(var + eps) in double; gamma as given, fix_gamma is not read),
    then oneDNN's normalization of that with mean 0 and variance 1 (the scale divided by sqrt(1 + eps) in float32),
    ``x * scale + shift`` rounded (half to even) and saturated to int8; the range is the calibrated one."""
    if data.dtype == torch.uint8:
        to_int8 = torch.full_like(d_low, 127.5) / torch.full_like(d_low, 255.5)
        data = mx_saturate(data.float() * to_int8, torch.int8)
    out_low, out_high = mx_range_constant(out_low, gamma), mx_range_constant(out_high, gamma)
    out_real = mx_max_abs(out_low, out_high)
    invstd = (1.0 / torch.sqrt(var.double() + eps)).float()
    scale = gamma * invstd * mx_max_abs(d_low, d_high) / out_real
    shift = (beta - mean * gamma * invstd) * 127.5 / out_real
    scale = scale / torch.sqrt(torch.ones_like(scale) + torch.full_like(scale, eps))  # both float32, as oneDNN adds
    channel = (1, -1) + (1,) * (data.dim() - 2)
    return mx_saturate(data.float() * scale.reshape(channel) + shift.reshape(channel), torch.int8), out_low, out_high


@register("_contrib_quantized_batch_norm")
def _quantized_batch_norm(node: OpNode) -> str:
    low, high = _calib(node)
    if low is None:
        raise node.unsupported("a quantized BatchNorm without a calibrated output range (MXNet 1.9.1 refuses it too; "
                               "quantize the model with calib_mode 'naive' or 'entropy')")
    ndim = len(node.in_shapes[0]) if node.in_shapes and node.in_shapes[0] else None
    axis = int(node.attr("axis", 1))
    if axis != 1 and not (ndim is not None and axis == 1 - ndim):
        raise node.unsupported(f"axis {axis} (oneDNN normalizes axis 1)")
    return node.call(mx_quantized_batch_norm, *node.inputs[:7], float(node.attr("eps", 1e-3)), low, high)


@register("_contrib_quantized_embedding")
def _quantized_embedding(node: OpNode) -> str:
    """MXNet's quantized_embedding: the int8 weight's rows (indices truncated and clipped to the rows, as MXNet's
    Embedding reads them); the weight's range passes through."""
    rows = f"{node.inputs[0]}.long().clamp(0, {int(node.attr('input_dim')) - 1})"
    return f"(F.embedding({rows}, {node.inputs[1]}), {node.inputs[2]}, {node.inputs[3]})"


_FUSED_FLAGS = ("with_bn", "with_act", "with_sum", "with_postsum_act")


def _fused_float(node: OpNode) -> str:
    """A float fused op (``_sg_mkldnn_conv``, ``_sg_mkldnn_fully_connected``): the ops of its subgraph written out
    one per line (MXNet folds BatchNorm into the weights first: the same values up to float32 rounding)."""
    lines, heads = subgraph_lines(node, dict(enumerate(node.inputs)), dict(enumerate(node.in_shapes)),
                                  value_prefix(node.name))
    node.statements = lines
    return heads[0] if len(heads) == 1 else f"({', '.join(heads)})"


def mx_int8_dense_weights(weight, bias, ranges, data_scale):
    """MXNet's tensor-wise int8 weights and int32 bias of a quantized fused FullyConnected (int8 ``weight`` and
    ``bias``, ``ranges``: their min/max): the bias rescaled to data scale times weight scale, std::round'ed; where
    that rescale would pass INT32_MAX / 2 over the bias range, MXNet caps it and rescales the weights to match
    (std::round'ed; MXNet writes them into the weight array). Returns (weights, int32 bias or None, weight scale)."""
    w_scale = mx_quantize_scale(False, ranges[0], ranges[1])
    if bias is None:
        return weight, None, w_scale
    b_scale = mx_quantize_scale(False, ranges[2], ranges[3])
    rescale = data_scale * w_scale / b_scale
    cap = torch.full_like(b_scale, 1073741824.0) / mx_max_abs(ranges[2], ranges[3]) / b_scale  # (INT32_MAX / 2)
    over = rescale > cap
    w_rescale = cap * b_scale / data_scale / w_scale
    weight = torch.where(over, mx_round_half_away(weight.float() * w_rescale).to(torch.int8), weight)
    w_scale = torch.where(over, w_scale * w_rescale, w_scale)
    rescale = torch.where(over, cap, rescale)
    return weight, mx_round_half_away(bias.float() * rescale).to(torch.int32), w_scale


def mx_int8_fully_connected(data, d_low, d_high, weight, bias, w_ranges, flatten, act, out_range):
    """MXNet's int8 ``_sg_mkldnn_fully_connected``: ``data`` quantized (its range ``d_low``/``d_high``); ``weight``
    and ``bias`` (None: no bias) int8 with ``w_ranges`` (weight and bias min/max: quantize_net's tensor-wise
    weights), or float32 with ``w_ranges`` None (channel-wise: quantized here per output channel, as the fused
    convolution's); ``act`` None or (kind, alpha) of the fused activation ('relu' with alpha the negative slope,
    'abs', 'clip' with alpha the upper bound); ``out_range`` (min, max, uint8) calibrated, 'float' (dequantize fused),
    or None (int32). oneDNN adds the int32 bias to the exact integer product in float32, scales by output scale /
    data scale / weight scale (with an activation: 1 / data scale, the output scale applied after it), rounds half to
    even and saturates. Returns (output, min, max), or the float32 output."""
    x = data.flatten(1) if flatten else data
    data_scale = mx_quantize_scale(data.dtype == torch.uint8, d_low, d_high)
    if w_ranges is None:
        weight, bias, w_scale = mx_int8_weights(weight, bias, data_scale)
    else:
        weight, bias, w_scale = mx_int8_dense_weights(weight, bias, w_ranges, data_scale)
    acc = torch.matmul(x.double(), weight.double().t())
    value = acc.float() if bias is None else acc.float() + bias.float()
    act_scale = None
    if out_range == "float" or (out_range is not None and act is not None):
        value = value * ((1.0 / data_scale.double()).float() / w_scale)
        if out_range != "float":
            act_scale = mx_quantize_scale(out_range[2], *(mx_range_constant(r, data) for r in out_range[:2]))
    elif out_range is not None:
        value = value * (mx_quantize_scale(out_range[2], *(mx_range_constant(r, data) for r in out_range[:2]))
                         / data_scale / w_scale)
    if act is not None:
        kind, alpha = act
        if kind == "relu":
            value = mx_relu(value, alpha)
        else:
            value = value.abs() if kind == "abs" else value.clamp(0.0, alpha)
        value = value if act_scale is None else value * act_scale
    if out_range == "float":
        return value
    if out_range is None:
        levels = (127.0, 255.0 if data.dtype == torch.uint8 else 127.0)
        return (mx_saturate(value, torch.int32),
                *mx_int8_product_range(d_low, d_high, *w_ranges[:2], *levels))
    low, high = mx_range_constant(out_range[0], data), mx_range_constant(out_range[1], data)
    return mx_saturate(value, torch.uint8 if out_range[2] else torch.int8), low, high


def _dense_act(node: OpNode, body: list) -> tuple | None:
    """The (kind, alpha) of the activation fused into a quantized FullyConnected (None: none)."""
    for inner in body:
        attrs = OpNode(inner["op"], node.name, inner.get("attrs", {}), [])
        if inner["op"] == "Activation" and attrs.attr("act_type") == "relu":
            return "relu", 0.0
        if inner["op"] == "LeakyReLU" and attrs.attr("act_type", "leaky") == "leaky":
            return "relu", float(attrs.attr("slope", 0.25))
        if inner["op"] == "abs":
            return "abs", 0.0
        if inner["op"] == "clip":
            return "clip", float(attrs.attr("a_max"))
        if inner["op"] not in ("null", "FullyConnected"):
            raise node.unsupported(f"an int8 fused FullyConnected with {inner['op']} "
                                   f"{attrs.attr('act_type', '')!s} (relu, leaky, abs and clip are translated; oneDNN "
                                   f"approximates the others)")
    return None


def _int8_dense(node: OpNode) -> str:
    """The quantized forms of MXNet's fused FullyConnected (inputs: data, weight, [bias], data min/max, and for
    tensor-wise weights their min/max and the bias's)."""
    body = node.subgraphs[0]["nodes"] if node.subgraphs else []
    fc = next((OpNode("FullyConnected", node.name, n.get("attrs", {}), []) for n in body
               if n["op"] == "FullyConnected"), None)
    if fc is None:
        raise node.unsupported("a fused FullyConnected without its subgraph")
    act = _dense_act(node, body)
    low, high = _calib(node)
    float_out = bool(node.attr("enable_float_output", False))
    channel_wise = bool(node.attr("channel_wise_quantize", False))
    if float_out and low is not None:
        raise node.unsupported("enable_float_output with a calibrated range (quantize_net writes one or the other)")
    if channel_wise and not float_out and low is None:
        raise node.unsupported("a channel-wise int8 FullyConnected without a calibrated range (MXNet 1.9.1 refuses "
                               "it too)")
    inputs = list(node.inputs)
    has_bias = not fc.attr("no_bias", False)
    data, weight = inputs.pop(0), inputs.pop(0)
    bias = inputs.pop(0) if has_bias else None
    d_low, d_high = inputs[:2]
    w_ranges = None if channel_wise else f"[{', '.join(inputs[2:6 if has_bias else 4])}]"
    uint8 = act is not None  # MXNet declares the calibrated output uint8 after any fused activation
    out_range = "'float'" if float_out else None if low is None else (low, high, uint8)
    return node.call(mx_int8_fully_connected, data, d_low, d_high, weight, bias, w_ranges,
                     bool(fc.attr("flatten", True)), act, out_range)


@register("_sg_mkldnn_fully_connected")
def _sg_mkldnn_fully_connected(node: OpNode) -> str:
    """The float fused FullyConnected (its subgraph written out) or its quantized forms."""
    if node.attr("quantized", False):
        return _int8_dense(node)
    return _fused_float(node)


def mx_int32_convolution(data, d_low, d_high, weight, bias, bn, residual, conv, act):
    """MXNet's uncalibrated int8 ``_sg_mkldnn_conv`` (arguments as ``mx_int8_convolution``'s): the weights (BatchNorm
    folded in first) quantized with one scale, 127.5 over their largest magnitude (no cap for the bias), the bias to
    int32 at weight scale times data scale, the integer convolution plus that bias in float32, ReLU, a residual sum
    scaled by data scale times weight scale over its own scale (one rounding), ReLU, saturated to int32. Returns
    (int32 output, min, max): the range MXNet gives the product of the weights' and the data's ranges."""
    if bn is not None:
        weight, bias = mx_fold_batch_norm(weight, bias, *bn)
    data_scale = mx_quantize_scale(data.dtype == torch.uint8, d_low, d_high)
    w_low, w_high = weight.detach().min().reshape(1), weight.detach().max().reshape(1)
    w_scale = mx_quantize_scale(False, w_low, w_high)
    acc = mx_integer_convolution(data, mx_saturate(weight * w_scale, torch.int8), *conv)
    channel = (1, -1) + (1,) * (acc.dim() - 2)
    value = acc.float()
    if bias is not None:
        value = value + mx_saturate(bias * (w_scale * data_scale), torch.int32).float().reshape(channel)
    if act[0] is not None:
        value = mx_relu(value, act[0])
    if residual is not None:
        sum_scale = data_scale * w_scale / mx_quantize_scale(residual[0].dtype == torch.uint8, residual[1], residual[2])
        value = (value.double() + sum_scale.double() * residual[0].double()).float()  # one rounding, as an FMA
    if act[1] is not None:
        value = mx_relu(value, act[1])
    levels = (127.0, 255.0 if data.dtype == torch.uint8 else 127.0)
    return mx_saturate(value, torch.int32), *mx_int8_product_range(w_low, w_high, d_low, d_high, *levels)


def _conv_act_slope(node: OpNode, calibrated: bool) -> float | None:
    """The negative slope of the activation fused into a quantized convolution (0.0: ReLU or none; a relu6 (clip),
    which MXNet drops: 0.0 where the calibrated uint8 output cuts it off, None where uncalibrated)."""
    body = node.subgraphs[0]["nodes"] if node.subgraphs else []
    if not any(inner["op"] == "Convolution" for inner in body):
        raise node.unsupported("a fused convolution without its subgraph")
    slope = 0.0
    for inner in body:
        attrs = OpNode(inner["op"], node.name, inner.get("attrs", {}), [])
        if inner["op"] == "LeakyReLU" and attrs.attr("act_type", "leaky") == "leaky":
            slope = float(attrs.attr("slope", 0.25))
        elif inner["op"] == "clip":
            slope = 0.0 if calibrated else None
        elif inner["op"] not in ("null", "Convolution", "BatchNorm", "elemwise_add") and not (
                inner["op"] == "Activation" and attrs.attr("act_type") == "relu"):
            raise node.unsupported(f"a fused convolution with {inner['op']} {attrs.attr('act_type', '')!s} (relu, "
                                   f"leaky and relu6 (clip) are translated; oneDNN approximates the others)")
    return slope


@register("_sg_mkldnn_conv")
def _sg_mkldnn_conv(node: OpNode) -> str:
    """The quantized forms of MXNet's fused convolution, calibrated (int8/uint8 output) or not (int32) (its inputs:
    data, weight, [bias], [gamma, beta, mean, var], [sum], data min/max, [sum min/max]; its subgraph gives the
    Convolution's, BatchNorm's and Activations' attributes)."""
    flags = {key: bool(node.attr(key, False)) for key in _FUSED_FLAGS}
    low, high = _calib(node)
    if not node.attr("quantized", False):
        return _fused_float(node)
    body = {n["op"]: n.get("attrs", {}) for n in node.subgraphs[0]["nodes"]} if node.subgraphs else {}
    slope = _conv_act_slope(node, low is not None)
    if slope is None:  # MXNet drops a fused relu6 (clip) of an uncalibrated quantized convolution
        flags["with_act"] = False
    inputs = list(node.inputs)
    data, weight = inputs.pop(0), inputs.pop(0)
    bias = None if OpNode("", "", body["Convolution"], []).attr("no_bias", False) else inputs.pop(0)
    bn = None
    if flags["with_bn"]:
        attrs = OpNode("BatchNorm", node.name, body.get("BatchNorm", {}), [])
        bn = f"({', '.join(inputs[:4])}, {float(attrs.attr('eps', 1e-3))}, {bool(attrs.attr('fix_gamma', True))})"
        inputs = inputs[4:]
    residual = inputs.pop(0) if flags["with_sum"] else None
    d_low, d_high = inputs[:2]
    residual = None if residual is None else f"({residual}, {inputs[2]}, {inputs[3]})"
    act = (slope if flags["with_act"] else None, slope if flags["with_postsum_act"] else None)
    if low is None:
        return node.call(mx_int32_convolution, data, d_low, d_high, weight, bias, bn, residual,
                         _conv_args(node, body["Convolution"]), act)
    uint8 = slope == 0 and ((flags["with_act"] and not flags["with_sum"]) or flags["with_postsum_act"])
    return node.call(mx_int8_convolution, data, d_low, d_high, weight, bias, bn, residual,
                     _conv_args(node, body["Convolution"]), act, (low, high, uint8))


def mx_quantize(x, low, high, out_type):
    """MXNet's quantize (the v1 op, oneDNN): ``x * scale`` in float32, rounded half to even and saturated, scale 255
    (uint8) or 127 (int8) over the largest bound of the range tensors ``low``/``high``. Returns (quantized, min,
    max): uint8 keeps the given range, int8 the symmetric one."""
    uint8 = out_type == "uint8"
    real = mx_max_abs(low, high)
    scale = torch.full_like(real, 255.0 if uint8 else 127.0) / real
    quantized = mx_saturate(x.float() * scale, torch.uint8 if uint8 else torch.int8)
    return (quantized, low, high) if uint8 else (quantized, -real, real)


def mx_quantize_asym(x, calib_min, calib_max):
    """MXNet's quantize_asym (oneDNN's RNN data reorder, 3-d input): uint8 of ``x * scale + shift`` (float32, two
    roundings), rounded half to even and saturated; scale 255 / (max - min), shift 255 - max * scale, the range the
    calibrated one or else x's own min and max. Returns (quantized, scale, shift)."""
    if calib_min is None:
        low, high = x.detach().min().float().reshape(1), x.detach().max().float().reshape(1)
    else:
        low, high = mx_range_constant(calib_min, x), mx_range_constant(calib_max, x)
    scale = torch.full_like(high, 255.0) / (high - low)
    shift = torch.full_like(high, 255.0) - high * scale
    return mx_saturate(x.float() * scale + shift, torch.uint8), scale, shift


def mx_quantized_elemwise_add(a, b, ranges, calib_min, calib_max):
    """MXNet's quantized_elemwise_add (oneDNN sum, ``ranges``: a and b min/max): each input times its scale in
    float32, summed in float32, rounded half to even and saturated. Calibrated: the output (int8, or uint8 for two
    uint8 inputs) at scale 127.5 or 255.5 over the calibrated range, an input's scale that over its own (127.5 or
    255.5 over its range); else int32 over the range -(|a| + |b|)..(|a| + |b|), an input's scale |its range| *
    2^31 / ((|a| + |b|) * its 127.5 or 255.5). Mixing int8 and uint8, MXNet first rescales the uint8 input to int8
    (rounded, saturated at 127) and adds it unscaled."""
    a_abs, b_abs = mx_max_abs(ranges[0], ranges[1]), mx_max_abs(ranges[2], ranges[3])
    levels = [torch.full_like(a_abs, 255.5 if q.dtype == torch.uint8 else 127.5) for q in (a, b)]
    if calib_min is None:
        out_dtype, high = torch.int32, a_abs + b_abs
        low = -high
        scales = [real * 2147483648.0 / (high * level) for real, level in zip((a_abs, b_abs), levels)]
    else:
        out_dtype = a.dtype if a.dtype == b.dtype else torch.int8
        low, high = mx_range_constant(calib_min, a), mx_range_constant(calib_max, a)
        out_scale = torch.full_like(a_abs, 255.5 if out_dtype == torch.uint8 else 127.5) / mx_max_abs(low, high)
        scales = [out_scale / (level / real) for real, level in zip((a_abs, b_abs), levels)]
    terms = []
    for q, scale in zip((a, b), scales):
        if a.dtype != b.dtype and q.dtype == torch.uint8:
            q, scale = mx_saturate(q.float() * scale, torch.int8), torch.ones_like(scale)
        terms.append(q.float() * scale)
    return mx_saturate(terms[0] + terms[1], out_dtype), low, high


def mx_quantized_elemwise_mul(a, b, ranges, calib_min, calib_max, float_output):
    """MXNet's quantized_elemwise_mul (its plain CPU loop over int8 inputs; ``ranges``: a and b min/max): the integer
    product times a float32 scale. ``float_output``: float32, scale 1 / a's scale / b's scale (in double, rounded to
    float32), an input's scale 127.5 over its range. Calibrated: int8 at scale (127.5 over the calibrated range) / a's
    scale / b's scale, truncated toward 0 to int32 (out of int32's range: INT32_MIN) and wrapped to 8 bits, as
    MXNet's ``static_cast`` does. Else the int32 product with the range of a product of int8 values."""
    product = a.float() * b.float()  # at most 2^14: exact
    a_scale, b_scale = (torch.full_like(ranges[0], 127.5) / mx_max_abs(ranges[0], ranges[1]),
                        torch.full_like(ranges[2], 127.5) / mx_max_abs(ranges[2], ranges[3]))
    if float_output:
        return product * (torch.ones_like(a_scale, dtype=torch.float64) / a_scale.double() / b_scale.double()).float()
    if calib_min is None:
        return product.to(torch.int32), *mx_int8_product_range(*ranges, 127.0, 127.0)
    low, high = mx_range_constant(calib_min, a), mx_range_constant(calib_max, a)
    value = (product * (torch.full_like(a_scale, 127.5) / mx_max_abs(low, high) / a_scale / b_scale)).double().trunc()
    value = torch.where(value.abs() < 2147483648.0, value, torch.full_like(value, -2147483648.0))
    return (torch.remainder(value + 128.0, 256.0) - 128.0).to(torch.int8), low, high


@register("_contrib_quantize")
def _quantize(node: OpNode) -> str:
    out_type = node.attr("out_type", "uint8")
    if out_type not in ("int8", "uint8"):
        raise node.unsupported(f"out_type {out_type!r}")
    return node.call(mx_quantize, *node.inputs[:3], repr(out_type))


@register("_contrib_quantize_asym")
def _quantize_asym(node: OpNode) -> str:
    shape = node.in_shapes[0] if node.in_shapes else None
    if shape is not None and len(shape) != 3:
        raise node.unsupported(f"a {len(shape)}-d input (MXNet 1.9.1's CPU build runs quantize_asym on 3-d data only "
                               f"and crashes on other shapes; reshape the data to 3-d before it)")
    return node.call(mx_quantize_asym, node.inputs[0], *_calib(node))


@register("_contrib_quantized_elemwise_add")
def _quantized_elemwise_add(node: OpNode) -> str:
    return node.call(mx_quantized_elemwise_add, *node.inputs[:2], f"[{', '.join(node.inputs[2:6])}]", *_calib(node))


@register("_contrib_quantized_elemwise_mul")
def _quantized_elemwise_mul(node: OpNode) -> str:
    return node.call(mx_quantized_elemwise_mul, *node.inputs[:2], f"[{', '.join(node.inputs[2:6])}]", *_calib(node),
                     bool(node.attr("enable_float_output", False)))
