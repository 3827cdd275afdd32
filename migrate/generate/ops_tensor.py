"""Translators of MXNet's elementwise, creation, random and shape ops: comparisons and logical ops, ``mod``, the
rarer math functions, ``_arange``/``arange_like``, ``_ones``/``_full``, ``_random_normal``, ``_random_uniform``,
``_random_uniform_like``, ``_sample_multinomial``, ``where``, ``tile``, ``repeat``, ``reverse``, ``broadcast_axis``,
``slice_like``, ``shape_array``, ``reshape_like`` and ``Pad``.

MXNet's comparisons and logical ops return 0/1 in the dtype of their (first) input, not booleans, and have no
gradient; so do these translations. The random ops draw in eval mode too, as MXNet's do in inference, from torch's
generator (so never MXNet's numbers: the same distributions, shapes and dtypes). Each translator is a pure function
of the node (attributes, input expressions, inferred shapes) and imports no MXNet.
"""
from __future__ import annotations

from migrate.errors import UnsupportedOpError
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
          "size_array": "torch.tensor([{0}.numel()], dtype=torch.int64, device={0}.device)",
          "shape_array": "torch.tensor({0}.shape, dtype=torch.int64, device={0}.device)"}


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
    return f"torch.ones({_static_shape(node)}, dtype={_dtype(node)}, device=self._device())"


@register("_full", "full")
def _full(node: OpNode) -> str:
    return (f"torch.full({_static_shape(node)}, {float(node.attr('value'))}, dtype={_dtype(node)}, "
            f"device=self._device())")


def _sample_shape(node: OpNode) -> tuple:
    """A random op's ``shape``; where it is empty or has unknown (0) axes, the shape MXNet inferred from the
    node's consumers."""
    shape = node.tuple_attr("shape")
    if shape and 0 not in shape and -1 not in shape:
        return shape
    if node.out_shape is None:
        raise UnsupportedOpError(f"MXNet node {node.name!r} (op {node.op}) has shape {shape}, which only MXNet's "
                                 f"shape inference completes (from the node's consumers); install MXNet 1.9.1 "
                                 f"(Python <= 3.11, numpy < 1.24) for generate_torch to read it, or save the symbol "
                                 f"with the op's full shape")
    return tuple(node.out_shape)


@register("_random_normal")
def _random_normal(node: OpNode) -> str:
    return (f"torch.normal({float(node.attr('loc', 0.0))}, {float(node.attr('scale', 1.0))}, {_sample_shape(node)}, "
            f"dtype={_dtype(node)}, device=self._device())")


@register("_random_uniform")
def _random_uniform(node: OpNode) -> str:
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    return f"torch.empty({_sample_shape(node)}, dtype={_dtype(node)}, device=self._device()).uniform_({low}, {high})"


@register("_random_uniform_like")
def _random_uniform_like(node: OpNode) -> str:
    """The input's shape and dtype; no gradient reaches the input (MXNet gives it zeros)."""
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    return f"torch.empty_like({node.inputs[0]}).uniform_({low}, {high})"


@register("_sample_multinomial")
def _sample_multinomial(node: OpNode) -> str:
    return node.call("_mx_sample_multinomial", node.inputs[0], node.tuple_attr("shape"),
                     bool(node.attr("get_prob", False)), _dtype(node, "int32"))


@register("_arange", "arange")
def _arange(node: OpNode) -> str:
    if node.attr("infer_range", False):
        raise node.unsupported("infer_range=True")
    start, stop, step = float(node.attr("start", 0)), node.attr("stop"), float(node.attr("step", 1))
    if stop is None:
        start, stop = 0.0, start
    repeat = node.attr("repeat", 1)
    count = max(0, -int(-(float(stop) - start) // step))
    expr = f"(torch.arange({count}, dtype={_dtype(node)}, device=self._device()) * {step} + {start})"
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
