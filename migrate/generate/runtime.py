"""Helpers the generated modules call where an MXNet op has no one-line torch equivalent.

``generate_torch`` copies the source of the helpers a model uses into the generated file (which imports only
torch), so each helper here uses only ``torch``, ``F`` (``torch.nn.functional``) and ``math``, and is tested once,
here, against MXNet.
"""
import math  # noqa: F401 (the generated file imports it for the helpers)

import torch
import torch.nn.functional as F

__all__ = ["HELPERS"]


def _mx_batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps, fix_gamma,
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


def _mx_axes_dropout(x, p, axes, training):
    """MXNet's Dropout with ``axes``: one keep/drop draw shared along ``axes`` (variational dropout), kept values
    scaled by 1 / (1 - p); the identity outside training. Draws torch's random numbers, not MXNet's."""
    if not training or p == 0:
        return x
    shape = [1 if d in [a % x.dim() for a in axes] else s for d, s in enumerate(x.shape)]
    keep = torch.bernoulli(torch.full(shape, 1 - p, dtype=x.dtype, device=x.device))
    return x * keep / (1 - p)


def _mx_reshape(x, shape, reverse=False):
    """MXNet's Reshape with its special codes: 0 copy a dimension, -1 infer, -2 copy the rest, -3 merge two,
    -4 split one in two (the next two codes, one may be -1); ``reverse`` matches codes from the right."""
    dims, codes = list(x.shape), list(shape)
    if reverse:
        dims, codes = dims[::-1], codes[::-1]
    out, i, k = [], 0, 0
    while k < len(codes):
        code = codes[k]
        if code == 0:
            out.append(dims[i]); i += 1
        elif code == -1:
            out.append(-1); i += 1
        elif code == -2:
            out.extend(dims[i:]); i = len(dims)
        elif code == -3:
            out.append(dims[i] * dims[i + 1]); i += 2
        elif code == -4:
            a, b = codes[k + 1], codes[k + 2]
            a = dims[i] // b if a == -1 else a
            b = dims[i] // a if b == -1 else b
            out.extend([a, b]); i += 1; k += 2
        else:
            out.append(code); i += 1
        k += 1
    if reverse:
        out = out[::-1]
    return x.reshape(out)


def _mx_slice_axis(x, axis, begin, end):
    """MXNet's slice_axis: ``x[begin:end]`` along ``axis`` (end None: to the end; negatives count from the end)."""
    index = [slice(None)] * x.dim()
    index[axis] = slice(begin, end)
    return x[tuple(index)]


def _mx_slice(x, begin, end, step):
    """MXNet's slice: per-axis ``begin:end:step`` for the leading axes (None: the default)."""
    index = [slice(b, e, s) for b, e, s in zip(begin, end, step or [None] * len(begin))]
    if any(s is not None and s < 0 for s in (step or [])):
        raise ValueError("negative slice steps are not supported")
    return x[tuple(index)]


def _mx_split(x, num_outputs, axis, squeeze_axis):
    """MXNet's split / SliceChannel: ``num_outputs`` equal parts along ``axis``, squeezed if asked."""
    parts = torch.chunk(x, num_outputs, axis)
    return tuple(p.squeeze(axis) for p in parts) if squeeze_axis else parts


def _mx_split_v2(x, indices, sections, axis, squeeze_axis):
    """MXNet's split_v2: parts ``x[indices[i]:indices[i + 1]]`` along ``axis`` (the last to the end), or
    ``sections`` equal parts; ``squeeze_axis`` drops the axis (each part must then have length 1)."""
    size = x.shape[axis]
    if indices is None:
        if size % sections:
            raise ValueError(f"split_v2: axis {axis} of length {size} does not split into {sections} equal sections")
        indices = range(0, size, size // sections)
    bounds = list(indices) + [size]
    if any(b > e for b, e in zip(bounds, bounds[1:])):
        raise ValueError(f"split_v2: indices {list(indices)} must be sorted and at most the axis length {size}")
    parts = tuple(x.narrow(axis, b, e - b) for b, e in zip(bounds, bounds[1:]))
    if squeeze_axis:
        if any(p.shape[axis] != 1 for p in parts):
            raise ValueError(f"split_v2: squeeze_axis needs parts of length 1 along axis {axis}")
        return tuple(p.squeeze(axis) for p in parts)
    return parts


def _mx_gemm2(a, b, transpose_a, transpose_b, alpha, axis):
    """MXNet's linalg.gemm2: ``alpha * op(a) @ op(b)`` over the leading axes, the matrices' rows on ``axis`` and
    their columns on the last axis (a non-default ``axis`` is swapped with the second-last, and back)."""
    swap = axis % a.dim() != a.dim() - 2
    if swap:
        a, b = a.transpose(axis, -2), b.transpose(axis, -2)
    out = torch.matmul(a.transpose(-1, -2) if transpose_a else a, b.transpose(-1, -2) if transpose_b else b)
    out = out if alpha == 1.0 else out * alpha
    return out.transpose(axis, -2) if swap else out


def _mx_layer_norm(x, gamma, beta, axis, eps):
    """MXNet's LayerNorm over one axis (any axis; gamma and beta have that axis' length)."""
    x = x.movedim(axis, -1)
    y = F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
    return y.movedim(-1, axis)


def _mx_dot(a, b, transpose_a, transpose_b):
    """MXNet's dot: contracts the last axis of ``a`` with the first of ``b`` (transposes reverse all axes)."""
    if transpose_a:
        a = a.permute(*reversed(range(a.dim())))
    if transpose_b:
        b = b.permute(*reversed(range(b.dim())))
    return torch.tensordot(a, b, dims=1)


def _mx_softmax_output(x, multi_output):
    """The forward of MXNet's SoftmaxOutput loss head: softmax over axis 1 (multi_output) or over all but axis 0."""
    if multi_output:
        return torch.softmax(x, 1)
    return torch.softmax(x.reshape(x.shape[0], -1), 1).reshape(x.shape)


def _mx_broadcast_to(x, shape):
    """MXNet's broadcast_to: 0 in ``shape`` keeps the input's dimension."""
    return x.expand([d if s == 0 else s for s, d in zip(shape, x.shape)])


def _mx_pool_full(x, pool, kernel, stride, pad, count_include_pad, full=True):
    """MXNet's Pooling with pooling_convention='full': out = 1 + ceil((in + 2 pad - kernel) / stride), every window
    kept (torch's ceil_mode drops a last window that starts in the right padding). The average divides by the
    window's cells inside the padded input (count_include_pad) or inside the input, as MXNet does. With ``full``
    False, the 'valid' convention with the padding written out (torch refuses an input smaller than the kernel
    even where the padding makes up for it)."""
    n, spatial = len(kernel), x.shape[2:]
    extra = [max(0, math.ceil((size + 2 * p - k) / s) * s + k - size - 2 * p) if full else 0
             for size, k, s, p in zip(spatial, kernel, stride, pad)]
    both = [q for p in reversed(pad) for q in (p, p)]
    right = [v for e in reversed(extra) for v in (0, e)]
    if pool == "max":
        return getattr(F, f"max_pool{n}d")(F.pad(x, right, value=-math.inf), kernel, stride, pad)
    average = getattr(F, f"avg_pool{n}d")
    mask = torch.ones((1, 1) + tuple(spatial), dtype=x.dtype, device=x.device)
    mask = F.pad(F.pad(mask, both, value=1.0 if count_include_pad else 0.0), right, value=0.0)
    return average(F.pad(F.pad(x, both), right), kernel, stride) / average(mask, kernel, stride)


from migrate.generate.rnn_runtime import _mx_rnn  # noqa: E402 (its own module: the fused RNN op)
from migrate.generate.runtime_detection import DETECTION_HELPERS  # noqa: E402 (one module per op family)
from migrate.generate.runtime_sequence import SEQUENCE_HELPERS  # noqa: E402
from migrate.generate.runtime_tensor import TENSOR_HELPERS  # noqa: E402
from migrate.generate.runtime_vision import VISION_HELPERS  # noqa: E402

HELPERS = {fn.__name__: fn for fn in (_mx_rnn, _mx_batch_norm, _mx_axes_dropout, _mx_reshape, _mx_slice_axis,
                                      _mx_slice, _mx_split, _mx_split_v2, _mx_gemm2, _mx_layer_norm, _mx_dot,
                                      _mx_softmax_output, _mx_broadcast_to, _mx_pool_full, *TENSOR_HELPERS,
                                      *SEQUENCE_HELPERS, *VISION_HELPERS, *DETECTION_HELPERS)}
