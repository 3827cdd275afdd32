"""Translators of MXNet's elementwise, creation and shape ops: comparisons and logical ops, ``mod``, the rarer math
functions, ``_arange``/``arange_like``, ``_ones``/``_full``, ``where``, ``tile``, ``repeat``, ``reverse``,
``broadcast_axis``, ``slice_like``, ``shape_array``, ``reshape_like`` and ``Pad``.

MXNet's comparisons and logical ops return 0/1 in the dtype of their (first) input, not booleans, and have no
gradient; so do these translations. Each translator is a pure function of the node (attributes, input
expressions, inferred shapes) and imports no MXNet.
"""
from __future__ import annotations

from migrate.generate.registry import OpNode, register

__all__ = []

_COMPARE = {"equal": "==", "not_equal": "!=", "greater": ">", "greater_equal": ">=", "lesser": "<",
            "lesser_equal": "<="}
_LOGICAL = {"logical_and": "&", "logical_or": "|", "logical_xor": "^"}


def _kind(op: str) -> str:
    """``_greater_scalar`` / ``broadcast_greater`` / ``_greater`` -> ``greater``."""
    name = op[len("broadcast_"):] if op.startswith("broadcast_") else op.lstrip("_")
    return name[:-len("_scalar")] if name.endswith("_scalar") else name


def _as_input_dtype(expr: str, like: str) -> str:
    return f"({expr}).to({like}.dtype)"


@register(*[f"{prefix}{kind}" for kind in (*_COMPARE, *_LOGICAL) for prefix in ("_", "broadcast_")])
def _compare(node: OpNode) -> str:
    a, b = node.inputs[:2]
    kind = _kind(node.op)
    if kind in _COMPARE:
        return _as_input_dtype(f"{a} {_COMPARE[kind]} {b}", a)
    return _as_input_dtype(f"({a} != 0) {_LOGICAL[kind]} ({b} != 0)", a)


@register(*[f"_{kind}_scalar" for kind in (*_COMPARE, *_LOGICAL)])
def _compare_scalar(node: OpNode) -> str:
    x, s = node.inputs[0], float(node.attr("scalar"))
    kind = _kind(node.op)
    if kind in _COMPARE:
        return _as_input_dtype(f"{x} {_COMPARE[kind]} {s}", x)
    return _as_input_dtype(f"({x} != 0) {_LOGICAL[kind]} {s != 0}", x)


@register("logical_not")
def _logical_not(node: OpNode) -> str:
    return _as_input_dtype(f"{node.inputs[0]} == 0", node.inputs[0])


@register("_mod", "broadcast_mod")
def _mod(node: OpNode) -> str:
    return node.call("_mx_mod", *node.inputs[:2])


@register("_mod_scalar", "_rmod_scalar")
def _mod_scalar(node: OpNode) -> str:
    x, s = node.inputs[0], float(node.attr("scalar"))
    if node.op == "_mod_scalar":
        return node.call("_mx_mod", x, s)
    return node.call("_mx_mod", f"torch.full_like({x}, {s})", x)


_UNARY = {"log2": "torch.log2({})", "log10": "torch.log10({})", "log1p": "torch.log1p({})",
          "expm1": "torch.expm1({})", "sign": "torch.sign({})", "ceil": "torch.ceil({})", "trunc": "torch.trunc({})",
          "fix": "torch.trunc({})", "round": "(torch.sign({0}) * torch.floor(torch.abs({0}) + 0.5))",
          "rint": "torch.where({0} - torch.floor({0}) <= torch.ceil({0}) - {0}, torch.floor({0}), torch.ceil({0}))",
          "tan": "torch.tan({})", "arcsin": "torch.asin({})", "arccos": "torch.acos({})",
          "arctan": "torch.atan({})", "sinh": "torch.sinh({})", "cosh": "torch.cosh({})",
          "arcsinh": "torch.asinh({})", "arccosh": "torch.acosh({})", "arctanh": "torch.atanh({})",
          "cbrt": "(torch.sign({0}) * torch.abs({0}) ** (1.0 / 3))", "rcbrt": "(1.0 / torch.sign({0}) / "
          "torch.abs({0}) ** (1.0 / 3))", "gammaln": "torch.lgamma({})", "gamma": "torch.lgamma({0}).exp()",
          "erfinv": "torch.erfinv({})", "degrees": "torch.rad2deg({})", "radians": "torch.deg2rad({})",
          "size_array": "torch.tensor([{0}.numel()], dtype=torch.int64)",
          "shape_array": "torch.tensor({0}.shape, dtype=torch.int64)"}


@register(*_UNARY)
def _unary(node: OpNode) -> str:
    return _UNARY[node.op].format(node.inputs[0])


@register("hard_sigmoid")
def _hard_sigmoid(node: OpNode) -> str:
    return f"torch.clamp({node.inputs[0]} * {node.attr('alpha', 0.2)} + {node.attr('beta', 0.5)}, 0.0, 1.0)"


def _dtype(node: OpNode, default: str = "float32") -> str:
    return f"torch.{node.attr('dtype', default) or default}"


def _static_shape(node: OpNode) -> tuple:
    """The node's ``shape`` attribute with unknown (0) sizes taken from the shape MXNet inferred."""
    shape = node.tuple_attr("shape")
    if 0 in shape or -1 in shape:
        if node.out_shape is None:
            raise node.unsupported(f"shape {shape} whose unknown axes MXNet could not infer")
        shape = tuple(node.out_shape)
    return shape


@register("_ones", "ones")
def _ones(node: OpNode) -> str:
    return f"torch.ones({_static_shape(node)}, dtype={_dtype(node)})"


@register("_full", "full")
def _full(node: OpNode) -> str:
    return f"torch.full({_static_shape(node)}, {float(node.attr('value'))}, dtype={_dtype(node)})"


@register("_arange", "arange")
def _arange(node: OpNode) -> str:
    if node.attr("infer_range", False):
        raise node.unsupported("infer_range=True")
    start, stop, step = float(node.attr("start", 0)), node.attr("stop"), float(node.attr("step", 1))
    if stop is None:
        start, stop = 0.0, start
    repeat = node.attr("repeat", 1)
    count = max(0, -int(-(float(stop) - start) // step))
    expr = f"(torch.arange({count}, dtype={_dtype(node)}) * {step} + {start})"
    return f"{expr}.repeat_interleave({repeat})" if repeat > 1 else expr


@register("_contrib_arange_like")
def _arange_like(node: OpNode) -> str:
    return node.call("_mx_arange_like", node.inputs[0], float(node.attr("start", 0)), float(node.attr("step", 1)),
                     node.attr("repeat", 1), node.attr("axis"))


@register("where")
def _where(node: OpNode) -> str:
    return node.call("_mx_where", *node.inputs[:3])


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


@register("broadcast_axis", "broadcast_axes")
def _broadcast_axis(node: OpNode) -> str:
    return node.call("_mx_broadcast_axis", node.inputs[0], node.tuple_attr("axis"), node.tuple_attr("size"))


@register("slice_like")
def _slice_like(node: OpNode) -> str:
    return node.call("_mx_slice_like", *node.inputs[:2], node.tuple_attr("axes"))


@register("reshape_like")
def _reshape_like(node: OpNode) -> str:
    return node.call("_mx_reshape_like", *node.inputs[:2], node.attr("lhs_begin"), node.attr("lhs_end"),
                     node.attr("rhs_begin"), node.attr("rhs_end"))


@register("Pad", "pad")
def _pad(node: OpNode) -> str:
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect"):
        raise node.unsupported(f"mode {mode!r} (known: constant, edge, reflect)")
    width = node.tuple_attr("pad_width")
    if any(width[:4]):
        raise node.unsupported(f"pad_width {width} (MXNet pads only the axes after the first two)")
    return node.call("_mx_pad", node.inputs[0], repr(mode), width, float(node.attr("constant_value", 0.0)))
