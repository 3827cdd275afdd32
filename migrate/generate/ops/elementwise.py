"""MXNet's elementwise ops: arithmetic (``elemwise_*``, ``broadcast_*``, ``_plus`` ..., the ``*_scalar`` forms,
``add_n``), math functions, ``clip``, comparisons and logical ops, ``mod``, ``where`` and
``_contrib_div_sqrt_dim``. The loss heads without a softmax are their forward op (``LinearRegressionOutput``,
``MAERegressionOutput``, ``MakeLoss``: identity; ``LogisticRegressionOutput``: sigmoid).

MXNet's comparisons and logical ops return 0/1 in the dtype of their (first) input, not booleans, and have no
gradient; so do these translations. MXNet divides integer arrays as C does (truncating).
"""
from __future__ import annotations

import torch

from migrate.generate.ops.layers import Clip
from migrate.generate.registry import OpNode, register

__all__ = ["mx_div", "mx_mod", "mx_where"]


_BINARY = {"elemwise_add": "{} + {}", "elemwise_sub": "{} - {}", "elemwise_mul": "{} * {}",
           "_plus": "{} + {}", "_Plus": "{} + {}", "_minus": "{} - {}",
           "_Minus": "{} - {}", "_mul": "{} * {}", "_Mul": "{} * {}",
           "broadcast_add": "{} + {}", "broadcast_plus": "{} + {}", "broadcast_sub": "{} - {}",
           "broadcast_minus": "{} - {}", "broadcast_mul": "{} * {}",
           "broadcast_maximum": "torch.maximum({}, {})", "broadcast_minimum": "torch.minimum({}, {})",
           "broadcast_power": "torch.pow({}, {})", "_maximum": "torch.maximum({}, {})",
           "_minimum": "torch.minimum({}, {})", "_power": "torch.pow({}, {})"}


@register(*_BINARY)
def _binary(node: OpNode) -> str:
    return "(" + _BINARY[node.op].format(*node.inputs[:2]) + ")"


@register("elemwise_div", "_div", "_Div", "broadcast_div")
def _div(node: OpNode) -> str:
    """MXNet divides integer arrays as C does (truncating): shape arithmetic such as CenterNet's decoder needs it."""
    return node.call(mx_div, *node.inputs[:2])


def mx_div(a, b):
    """MXNet's division: integer arrays divide with truncation (as C's ``/``), floats as usual."""
    if not a.is_floating_point() and not b.is_floating_point():
        return torch.div(a, b, rounding_mode="trunc")
    return a / b


_SCALAR = {"_plus_scalar": "{x} + {s}", "_minus_scalar": "{x} - {s}", "_rminus_scalar": "{s} - {x}",
           "_mul_scalar": "{x} * {s}", "_div_scalar": "{x} / {s}", "_rdiv_scalar": "{s} / {x}",
           "_power_scalar": "{x} ** {s}", "_rpower_scalar": "{s} ** {x}",
           "_maximum_scalar": "torch.clamp({x}, min={s})", "_minimum_scalar": "torch.clamp({x}, max={s})"}


@register(*_SCALAR)
def _scalar(node: OpNode) -> str:
    return "(" + _SCALAR[node.op].format(x=node.inputs[0], s=float(node.attr("scalar"))) + ")"


_UNARY = {"relu": "F.relu({})", "sigmoid": "torch.sigmoid({})", "tanh": "torch.tanh({})", "exp": "torch.exp({})",
          "log": "torch.log({})", "sqrt": "torch.sqrt({})", "rsqrt": "torch.rsqrt({})", "square": "torch.square({})",
          "negative": "(-{})", "abs": "torch.abs({})", "erf": "torch.erf({})", "reciprocal": "(1.0 / {})",
          "_copy": "{}", "identity": "{}", "BlockGrad": "{}.detach()", "stop_gradient": "{}.detach()",
          "softsign": "F.softsign({})", "LinearRegressionOutput": "{}", "MAERegressionOutput": "{}",
          "MakeLoss": "{}", "make_loss": "{}", "LogisticRegressionOutput": "torch.sigmoid({})",
          "zeros_like": "torch.zeros_like({})", "ones_like": "torch.ones_like({})", "sin": "torch.sin({})",
          "cos": "torch.cos({})", "floor": "torch.floor({})", "log_sigmoid": "F.logsigmoid({})"}


_MATH = {"log2": "torch.log2({})", "log10": "torch.log10({})", "log1p": "torch.log1p({})",
         "expm1": "torch.expm1({})", "sign": "torch.sign({})", "ceil": "torch.ceil({})", "trunc": "torch.trunc({})",
         "fix": "torch.trunc({})", "round": "(torch.sign({0}) * torch.floor(torch.abs({0}) + 0.5))",
         "rint": "torch.where({0} - torch.floor({0}) <= torch.ceil({0}) - {0}, torch.floor({0}), torch.ceil({0}))",
         "tan": "torch.tan({})", "arcsin": "torch.asin({})", "arccos": "torch.acos({})",
         "arctan": "torch.atan({})", "sinh": "torch.sinh({})", "cosh": "torch.cosh({})",
         "arcsinh": "torch.asinh({})", "arccosh": "torch.acosh({})", "arctanh": "torch.atanh({})",
         "cbrt": "(torch.sign({0}) * torch.abs({0}) ** (1.0 / 3))", "rcbrt": "(1.0 / torch.sign({0}) / "
         "torch.abs({0}) ** (1.0 / 3))", "gammaln": "torch.lgamma({})", "gamma": "torch.lgamma({0}).exp()",
         "erfinv": "torch.erfinv({})", "degrees": "torch.rad2deg({})", "radians": "torch.deg2rad({})"}


@register(*_UNARY, *_MATH)
def _unary(node: OpNode) -> str:
    return {**_UNARY, **_MATH}[node.op].format(node.inputs[0])


@register("add_n", "ElementWiseSum")
def _add_n(node: OpNode) -> str:
    return "(" + " + ".join(node.inputs) + ")"


@register("clip")
def _clip(node: OpNode) -> str:
    low, high = float(node.attr("a_min")), float(node.attr("a_max"))
    return node.layer(Clip, low, high) or f"torch.clamp({node.inputs[0]}, {low}, {high})"


@register("_contrib_div_sqrt_dim")
def _div_sqrt_dim(node: OpNode) -> str:
    x = node.inputs[0]
    return f"({x} / math.sqrt({x}.shape[-1]))"


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
    return node.call(mx_mod, *node.inputs[:2])


@register("_mod_scalar", "_rmod_scalar")
def _mod_scalar(node: OpNode) -> str:
    x, s = node.inputs[0], float(node.attr("scalar"))
    if node.op == "_mod_scalar":
        return node.call(mx_mod, x, s)
    return node.call(mx_mod, f"torch.full_like({x}, {s})", x)


def mx_mod(a, b):
    """MXNet's mod: the remainder takes the divisor's sign (Python's %), and x mod 0 is 0."""
    b = torch.as_tensor(b, dtype=a.dtype, device=a.device) if not torch.is_tensor(b) else b
    r = torch.fmod(a, b)
    r = torch.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
    return torch.where(b == 0, torch.zeros_like(r), r)


@register("where")
def _where(node: OpNode) -> str:
    return node.call(mx_where, *node.inputs[:3])


def mx_where(condition, x, y):
    """MXNet's where: ``x`` where ``condition`` is non-zero, else ``y``; a 1-D condition selects whole rows."""
    if condition.dim() == 1 and x.dim() > 1:
        condition = condition.reshape((-1,) + (1,) * (x.dim() - 1))
    return torch.where(condition != 0, x, y)
