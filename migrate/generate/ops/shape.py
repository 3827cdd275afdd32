"""MXNet's shape ops: ``Reshape`` (its special codes), ``reshape_like``, ``transpose``, ``SwapAxis``,
``expand_dims``, ``squeeze``, ``slice``/``crop``, ``slice_axis``, ``slice_like``, ``split``/``SliceChannel``,
``_split_v2``, ``Concat``, ``stack``, ``broadcast_to``/``_like``/``_axis``, ``tile``, ``repeat``, ``reverse``,
``Pad``, ``Cast``, ``shape_array`` and ``size_array``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from migrate.generate.registry import OpNode, as_tuple, register

__all__ = ["mx_reshape", "mx_reshape_like", "mx_slice", "mx_slice_axis", "mx_slice_like", "mx_split", "mx_split_v2",
           "mx_broadcast_to", "mx_broadcast_like", "mx_broadcast_axis", "mx_pad"]


@register("Reshape", "reshape")
def _reshape(node: OpNode) -> str:
    shape = as_tuple(node.attr("shape"))
    if node.attr("target_shape") not in (None, ()) and not shape:
        raise node.unsupported("the deprecated target_shape")
    if all(d > 0 for d in shape) or (not node.attr("reverse", False) and all(d > 0 or d == -1 for d in shape)
                                     and list(shape).count(-1) <= 1):
        return f"{node.inputs[0]}.reshape{shape}"
    return node.call(mx_reshape, node.inputs[0], shape, node.attr("reverse", False))


def mx_reshape(x, shape, reverse=False):
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


@register("reshape_like")
def _reshape_like(node: OpNode) -> str:
    return node.call(mx_reshape_like, *node.inputs[:2], node.attr("lhs_begin"), node.attr("lhs_end"),
                     node.attr("rhs_begin"), node.attr("rhs_end"))


def mx_reshape_like(lhs, rhs, lhs_begin, lhs_end, rhs_begin, rhs_end):
    """MXNet's reshape_like: dims ``lhs_begin:lhs_end`` of ``lhs`` replaced by dims ``rhs_begin:rhs_end`` of
    ``rhs`` (None: the start or the end)."""
    lb, le = slice(lhs_begin, lhs_end).indices(lhs.dim())[:2]
    rb, re = slice(rhs_begin, rhs_end).indices(rhs.dim())[:2]
    return lhs.reshape(lhs.shape[:lb] + rhs.shape[rb:re] + lhs.shape[le:])


@register("transpose")
def _transpose(node: OpNode) -> str:
    axes = as_tuple(node.attr("axes") or ())
    if not axes:
        return f"{node.inputs[0]}.permute(*reversed(range({node.inputs[0]}.dim())))"
    return f"{node.inputs[0]}.permute{axes}"


@register("SwapAxis", "swapaxes")
def _swapaxes(node: OpNode) -> str:
    return f"{node.inputs[0]}.transpose({node.attr('dim1', 0)}, {node.attr('dim2', 0)})"


@register("expand_dims")
def _expand_dims(node: OpNode) -> str:
    return f"{node.inputs[0]}.unsqueeze({node.attr('axis')})"


@register("squeeze")
def _squeeze(node: OpNode) -> str:
    axis = node.attr("axis")
    return f"{node.inputs[0]}.squeeze()" if axis is None else f"{node.inputs[0]}.squeeze({axis})"


@register("slice", "crop")
def _slice(node: OpNode) -> str:
    step = node.attr("step") or None
    return node.call(mx_slice, node.inputs[0], as_tuple(node.attr("begin")), as_tuple(node.attr("end")),
                 None if step is None else as_tuple(step))


def mx_slice(x, begin, end, step):
    """MXNet's slice: per-axis ``begin:end:step`` for the leading axes (None: the default)."""
    index = [slice(b, e, s) for b, e, s in zip(begin, end, step or [None] * len(begin))]
    if any(s is not None and s < 0 for s in (step or [])):
        raise ValueError("negative slice steps are not supported")
    return x[tuple(index)]


@register("slice_axis")
def _slice_axis(node: OpNode) -> str:
    return node.call(mx_slice_axis, node.inputs[0], node.attr("axis"), node.attr("begin"), node.attr("end"))


def mx_slice_axis(x, axis, begin, end):
    """MXNet's slice_axis: ``x[begin:end]`` along ``axis`` (end None: to the end; negatives count from the end)."""
    index = [slice(None)] * x.dim()
    index[axis] = slice(begin, end)
    return x[tuple(index)]


@register("slice_like")
def _slice_like(node: OpNode) -> str:
    return node.call(mx_slice_like, *node.inputs[:2], node.tuple_attr("axes"))


def mx_slice_like(x, like, axes):
    """MXNet's slice_like: ``x`` cut to the size of ``like`` along ``axes`` (all axes when empty), from the start."""
    axes = range(like.dim()) if not axes else [a % x.dim() for a in axes]
    index = [slice(None)] * x.dim()
    for a in axes:
        index[a] = slice(0, like.shape[a])
    return x[tuple(index)]


@register("SliceChannel", "split")
def _split(node: OpNode) -> str:
    return node.call(mx_split, node.inputs[0], node.attr("num_outputs"), node.attr("axis", 1),
                 node.attr("squeeze_axis", False))


def mx_split(x, num_outputs, axis, squeeze_axis):
    """MXNet's split / SliceChannel: ``num_outputs`` equal parts along ``axis``, squeezed if asked."""
    parts = torch.chunk(x, num_outputs, axis)
    return tuple(p.squeeze(axis) for p in parts) if squeeze_axis else parts


@register("_split_v2")
def _split_v2(node: OpNode) -> str:
    """``split_v2``: the graph holds ``indices`` with a leading 0 (``(0, 2, 3)`` for Python's ``(2, 3)``) or
    ``sections``; one output per index or section (a lone output is the tensor itself, as MXNet's graph has it)."""
    indices, sections = node.tuple_attr("indices"), node.attr("sections", 0)
    count = len(indices) if indices else sections
    if count < 1:
        raise node.unsupported(f"indices {indices} with sections {sections} (one of them must give the parts)")
    expr = node.call(mx_split_v2, node.inputs[0], indices or None, sections, node.attr("axis", 0),
                     bool(node.attr("squeeze_axis", False)))
    return f"{expr}[0]" if count == 1 else expr


def mx_split_v2(x, indices, sections, axis, squeeze_axis):
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


@register("Concat", "concat")
def _concat(node: OpNode) -> str:
    return f"torch.cat([{', '.join(node.inputs)}], {node.attr('dim', 1)})"


@register("stack")
def _stack(node: OpNode) -> str:
    return f"torch.stack([{', '.join(node.inputs)}], {node.attr('axis', 0)})"


@register("broadcast_to")
def _broadcast_to(node: OpNode) -> str:
    return node.call(mx_broadcast_to, node.inputs[0], as_tuple(node.attr("shape")))


def mx_broadcast_to(x, shape):
    """MXNet's broadcast_to: 0 in ``shape`` keeps the input's dimension."""
    return x.expand([d if s == 0 else s for s, d in zip(shape, x.shape)])


@register("broadcast_like")
def _broadcast_like(node: OpNode) -> str:
    if node.attr("lhs_axes") in (None, ()):
        return f"{node.inputs[0]}.expand_as({node.inputs[1]})"
    return node.call(mx_broadcast_like, *node.inputs[:2], node.tuple_attr("lhs_axes"), node.tuple_attr("rhs_axes"))


def mx_broadcast_like(lhs, rhs, lhs_axes, rhs_axes):
    """MXNet's broadcast_like with axes: each ``lhs_axes`` axis of ``lhs`` (length 1) takes the length of the
    matching ``rhs_axes`` axis of ``rhs``."""
    shape = list(lhs.shape)
    for a, b in zip(lhs_axes, rhs_axes):
        shape[a % lhs.dim()] = rhs.shape[b]
    return lhs.expand(shape)


@register("broadcast_axis", "broadcast_axes")
def _broadcast_axis(node: OpNode) -> str:
    return node.call(mx_broadcast_axis, node.inputs[0], node.tuple_attr("axis"), node.tuple_attr("size"))


def mx_broadcast_axis(x, axis, size):
    """MXNet's broadcast_axis: each axis in ``axis`` (of length 1) repeated to ``size``."""
    shape = list(x.shape)
    for a, s in zip(axis, size):
        shape[a % x.dim()] = s
    return x.expand(shape)


@register("tile")
def _tile(node: OpNode) -> str:
    return f"torch.tile({node.inputs[0]}, {node.tuple_attr('reps')})"


@register("repeat")
def _repeat(node: OpNode) -> str:
    axis, repeats = node.attr("axis"), node.attr("repeats")
    if axis is None:
        return f"{node.inputs[0]}.reshape(-1).repeat_interleave({repeats})"
    return f"{node.inputs[0]}.repeat_interleave({repeats}, {axis})"


@register("reverse", "flip")
def _reverse(node: OpNode) -> str:
    return f"torch.flip({node.inputs[0]}, {node.tuple_attr('axis')})"


@register("Pad", "pad")
def _pad(node: OpNode) -> str:
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect"):
        raise node.unsupported(f"mode {mode!r} (known: constant, edge, reflect)")
    width = node.tuple_attr("pad_width")
    if any(width[:4]):
        raise node.unsupported(f"pad_width {width} (MXNet pads only the axes after the first two)")
    return node.call(mx_pad, node.inputs[0], repr(mode), width, float(node.attr("constant_value", 0.0)))


def mx_pad(x, mode, pad_width, constant_value):
    """MXNet's Pad: ``pad_width`` (before, after) per axis, axes 0 and 1 unpadded; modes constant, edge, reflect."""
    pads = [p for axis in reversed(range(2, x.dim())) for p in pad_width[2 * axis:2 * axis + 2]]
    if mode == "constant":
        return F.pad(x, pads, "constant", constant_value)
    return F.pad(x, pads, "replicate" if mode == "edge" else "reflect")


@register("Cast", "cast")
def _cast(node: OpNode) -> str:
    return f"{node.inputs[0]}.to(torch.{node.attr('dtype')})"


@register("shape_array", "size_array")
def _shape_array(node: OpNode) -> str:
    x = node.inputs[0]
    if node.op == "size_array":
        return f"torch.tensor([{x}.numel()], dtype=torch.int64, device={x}.device)"
    return f"torch.tensor({x}.shape, dtype=torch.int64, device={x}.device)"
