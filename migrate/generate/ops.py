"""Translators of MXNet's core layer ops to torch expressions, registered by MXNet op name (see ``registry``);
the other families live in ``ops_tensor``, ``ops_indexing``, ``ops_sequence``, ``ops_vision``, ``ops_detection``
and ``rnn_ops``. Besides the layers: elementwise arithmetic, reductions, shape ops (``Reshape``, ``slice``,
``split``/``SliceChannel``/``_split_v2``, ...) and products (``dot``, ``batch_dot``, ``_linalg_gemm2``).

Each translator returns one Python expression over ``node.inputs``; the generated ``forward`` assigns it to a
local variable. Where MXNet's op has no one-line equivalent the expression calls a helper from ``runtime`` (and
records it in ``node.helpers``). Loss heads are treated as their forward op: ``SoftmaxOutput`` -> softmax (the label
input is dropped), ``LinearRegressionOutput``/``MAERegressionOutput``/``MakeLoss`` -> identity,
``LogisticRegressionOutput`` -> sigmoid.
"""
from __future__ import annotations

from migrate.generate.registry import OpNode, register

__all__ = []


def _call(node: OpNode, helper: str, *args) -> str:
    node.helpers.add(helper)
    return f"{helper}({', '.join(str(a) for a in args)})"


def _t(value) -> tuple:
    """An MXNet tuple attribute as a tuple (a bare int becomes a 1-tuple)."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _optional(node: OpNode, index: int):
    return node.inputs[index] if len(node.inputs) > index else None


@register("Convolution")
def _convolution(node: OpNode) -> str:
    kernel = _t(node.attr("kernel"))
    n = len(kernel)
    if node.attr("layout") not in (None, "NCW", "NCHW", "NCDHW"):
        raise node.unsupported(f"layout {node.attr('layout')!r} (channels-first layouts only)")
    stride, dilate, pad = (_t(node.attr(k) or (d,) * n) for k, d in (("stride", 1), ("dilate", 1), ("pad", 0)))
    bias = None if node.attr("no_bias", False) else _optional(node, 2)
    groups = node.attr("num_group", 1)
    return (f"F.conv{n}d({node.inputs[0]}, {node.inputs[1]}, {bias}, stride={stride}, padding={pad}, "
            f"dilation={dilate}, groups={groups})")


@register("Deconvolution")
def _deconvolution(node: OpNode) -> str:
    kernel = _t(node.attr("kernel"))
    n = len(kernel)
    if any(_t(node.attr("target_shape") or ())):
        raise node.unsupported("target_shape")
    stride, dilate, pad, adj = (_t(node.attr(k) or (d,) * n)
                                for k, d in (("stride", 1), ("dilate", 1), ("pad", 0), ("adj", 0)))
    bias = None if node.attr("no_bias", True) else _optional(node, 2)
    return (f"F.conv_transpose{n}d({node.inputs[0]}, {node.inputs[1]}, {bias}, {stride}, {pad}, {adj}, "
            f"{node.attr('num_group', 1)}, {dilate})")


@register("BatchNorm")
def _batch_norm(node: OpNode) -> str:
    x, gamma, beta, mean, var = node.inputs[:5]
    return _call(node, "_mx_batch_norm", x, gamma, beta, mean, var, "self.training",
                 f"momentum={node.attr('momentum', 0.9)}", f"eps={node.attr('eps', 1e-3)}",
                 f"fix_gamma={node.attr('fix_gamma', True)}",
                 f"use_global_stats={node.attr('use_global_stats', False)}", f"axis={node.attr('axis', 1)}")


@register("FullyConnected")
def _fully_connected(node: OpNode) -> str:
    x = f"{node.inputs[0]}.flatten(1)" if node.attr("flatten", True) else node.inputs[0]
    bias = None if node.attr("no_bias", False) else _optional(node, 2)
    return f"F.linear({x}, {node.inputs[1]}, {bias})"


_ACTIVATIONS = {"relu": "F.relu({})", "sigmoid": "torch.sigmoid({})", "tanh": "torch.tanh({})",
                "softrelu": "F.softplus({})", "softsign": "F.softsign({})", "log_sigmoid": "F.logsigmoid({})",
                "mish": "F.mish({})"}


@register("Activation")
def _activation(node: OpNode) -> str:
    kind = node.attr("act_type")
    if kind not in _ACTIVATIONS:
        raise node.unsupported(f"act_type {kind!r} (known: {sorted(_ACTIVATIONS)})")
    return _ACTIVATIONS[kind].format(node.inputs[0])


@register("LeakyReLU")
def _leaky_relu(node: OpNode) -> str:
    kind, x, slope = node.attr("act_type", "leaky"), node.inputs[0], node.attr("slope", 0.25)
    forms = {"leaky": f"F.leaky_relu({x}, {slope})", "elu": f"F.elu({x}, {slope})", "selu": f"F.selu({x})",
             "gelu": f"F.gelu({x})", "prelu": f"F.prelu({x}, {_optional(node, 1)})"}
    if kind not in forms:
        raise node.unsupported(f"act_type {kind!r} (known: {sorted(forms)}; rrelu is random)")
    return forms[kind]


@register("Pooling")
def _pooling(node: OpNode) -> str:
    x, pool = node.inputs[0], node.attr("pool_type", "max")
    if pool not in ("max", "avg", "sum"):
        raise node.unsupported(f"pool_type {pool!r}")
    n = len(node.in_shapes[0]) - 2 if node.in_shapes and node.in_shapes[0] else len(_t(node.attr("kernel")))
    dims = tuple(range(2, 2 + n))
    if node.attr("global_pool", False):
        form = {"max": f"{x}.amax({dims}, keepdim=True)", "avg": f"{x}.mean({dims}, keepdim=True)",
                "sum": f"{x}.sum({dims}, keepdim=True)"}
        return form[pool]
    kernel = _t(node.attr("kernel"))
    stride, pad = _t(node.attr("stride") or (1,) * n), _t(node.attr("pad") or (0,) * n)
    include = node.attr("count_include_pad", True)
    convention = node.attr("pooling_convention", "valid")
    if convention not in ("valid", "full"):
        raise node.unsupported(f"pooling_convention {convention!r}")
    size = 1
    for k in kernel:
        size *= k
    small = bool(node.in_shapes and node.in_shapes[0]) and any(s < k for s, k in zip(node.in_shapes[0][2:], kernel))
    if convention == "full" or (small and pool != "max"):  # torch's pools refuse an input smaller than the kernel
        expr = _call(node, "_mx_pool_full", x, repr("max" if pool == "max" else "avg"), kernel, stride, pad,
                     include or pool == "sum", convention == "full")
    elif pool == "max":
        expr = f"F.max_pool{n}d({x}, {kernel}, {stride}, {pad})"
    else:
        expr = f"F.avg_pool{n}d({x}, {kernel}, {stride}, {pad}, count_include_pad={include or pool == 'sum'})"
    return f"{expr} * {size}" if pool == "sum" else expr


@register("Flatten", "flatten")
def _flatten(node: OpNode) -> str:
    return f"{node.inputs[0]}.flatten(1)"


@register("Dropout")
def _dropout(node: OpNode) -> str:
    training = "True" if node.attr("mode", "training") == "always" else "self.training"
    if node.attr("axes") not in (None, ()):  # variational dropout: one mask shared along these axes
        return node.call("_mx_axes_dropout", node.inputs[0], node.attr("p", 0.5), node.tuple_attr("axes"), training)
    return f"F.dropout({node.inputs[0]}, {node.attr('p', 0.5)}, {training})"


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
    return node.call("_mx_div", *node.inputs[:2])


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


@register(*_UNARY)
def _unary(node: OpNode) -> str:
    return _UNARY[node.op].format(node.inputs[0])


@register("add_n", "ElementWiseSum")
def _add_n(node: OpNode) -> str:
    return "(" + " + ".join(node.inputs) + ")"


@register("clip")
def _clip(node: OpNode) -> str:
    return f"torch.clamp({node.inputs[0]}, {float(node.attr('a_min'))}, {float(node.attr('a_max'))})"


@register("Concat", "concat")
def _concat(node: OpNode) -> str:
    return f"torch.cat([{', '.join(node.inputs)}], {node.attr('dim', 1)})"


@register("stack")
def _stack(node: OpNode) -> str:
    return f"torch.stack([{', '.join(node.inputs)}], {node.attr('axis', 0)})"


@register("transpose")
def _transpose(node: OpNode) -> str:
    axes = _t(node.attr("axes") or ())
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


@register("slice_axis")
def _slice_axis(node: OpNode) -> str:
    return _call(node, "_mx_slice_axis", node.inputs[0], node.attr("axis"), node.attr("begin"), node.attr("end"))


@register("slice", "crop")
def _slice(node: OpNode) -> str:
    step = node.attr("step") or None
    return _call(node, "_mx_slice", node.inputs[0], _t(node.attr("begin")), _t(node.attr("end")),
                 None if step is None else _t(step))


@register("Reshape", "reshape")
def _reshape(node: OpNode) -> str:
    shape = _t(node.attr("shape"))
    if node.attr("target_shape") not in (None, ()) and not shape:
        raise node.unsupported("the deprecated target_shape")
    if all(d > 0 for d in shape) or (not node.attr("reverse", False) and all(d > 0 or d == -1 for d in shape)
                                     and list(shape).count(-1) <= 1):
        return f"{node.inputs[0]}.reshape{shape}"
    return _call(node, "_mx_reshape", node.inputs[0], shape, node.attr("reverse", False))


def _temperature(node: OpNode, x: str) -> str:
    t = node.attr("temperature")
    return x if t in (None, 1, 1.0) else f"{x} / {float(t)}"


@register("softmax")
def _softmax(node: OpNode) -> str:
    if node.attr("use_length", False):  # the masked softmax of GluonNLP's attention: entries past length are 0
        t = node.attr("temperature")
        return node.call("_mx_masked_softmax", *node.inputs[:2], node.attr("axis", -1),
                         None if t is None else float(t))
    return f"torch.softmax({_temperature(node, node.inputs[0])}, {node.attr('axis', -1)})"


@register("log_softmax")
def _log_softmax(node: OpNode) -> str:
    return f"torch.log_softmax({_temperature(node, node.inputs[0])}, {node.attr('axis', -1)})"


@register("SoftmaxActivation")
def _softmax_activation(node: OpNode) -> str:
    x = node.inputs[0]
    if node.attr("mode", "instance") == "channel":
        return f"torch.softmax({x}, 1)"
    return f"torch.softmax({x}.reshape({x}.shape[0], -1), 1).reshape({x}.shape)"


@register("SoftmaxOutput", "Softmax")
def _softmax_output(node: OpNode) -> str:
    return _call(node, "_mx_softmax_output", node.inputs[0], bool(node.attr("multi_output", False)))


@register("batch_dot")
def _batch_dot(node: OpNode) -> str:
    a, b = node.inputs[:2]
    a = f"{a}.transpose(-1, -2)" if node.attr("transpose_a", False) else a
    b = f"{b}.transpose(-1, -2)" if node.attr("transpose_b", False) else b
    return f"torch.matmul({a}, {b})"


@register("dot")
def _dot(node: OpNode) -> str:
    return _call(node, "_mx_dot", *node.inputs[:2], node.attr("transpose_a", False), node.attr("transpose_b", False))


@register("_linalg_gemm2")
def _linalg_gemm2(node: OpNode) -> str:
    return node.call("_mx_gemm2", *node.inputs[:2], bool(node.attr("transpose_a", False)),
                     bool(node.attr("transpose_b", False)), float(node.attr("alpha", 1.0)), node.attr("axis", -2))


@register("LayerNorm")
def _layer_norm(node: OpNode) -> str:
    x, gamma, beta = node.inputs[:3]
    axis, eps = node.attr("axis", -1), node.attr("eps", 1e-5)
    ndim = len(node.in_shapes[0]) if node.in_shapes and node.in_shapes[0] else None
    if axis == -1 or (ndim is not None and axis == ndim - 1):
        return f"F.layer_norm({x}, {gamma}.shape, {gamma}, {beta}, {eps})"
    return _call(node, "_mx_layer_norm", x, gamma, beta, axis, eps)


@register("Embedding")
def _embedding(node: OpNode) -> str:
    return f"F.embedding({node.inputs[0]}.long(), {node.inputs[1]})"


def _reduce(node: OpNode, fn: str) -> str:
    axis, keep = node.attr("axis"), node.attr("keepdims", False)
    if node.attr("exclude", False):
        raise node.unsupported("exclude=True")
    x = node.inputs[0]
    if axis in (None, ()):
        return f"{x}.{fn}(tuple(range({x}.dim())), keepdim=True)" if keep else f"{x}.{fn}().reshape(1)"
    return f"{node.inputs[0]}.{fn}({_t(axis)}, keepdim={bool(keep)})"


@register("mean")
def _mean(node: OpNode) -> str:
    return _reduce(node, "mean")


@register("sum", "sum_axis")
def _sum(node: OpNode) -> str:
    return _reduce(node, "sum")


@register("max")
def _max(node: OpNode) -> str:
    return _reduce(node, "amax")


@register("Cast", "cast")
def _cast(node: OpNode) -> str:
    return f"{node.inputs[0]}.to(torch.{node.attr('dtype')})"


@register("SliceChannel", "split")
def _split(node: OpNode) -> str:
    return _call(node, "_mx_split", node.inputs[0], node.attr("num_outputs"), node.attr("axis", 1),
                 node.attr("squeeze_axis", False))


@register("_split_v2")
def _split_v2(node: OpNode) -> str:
    """``split_v2``: the graph holds ``indices`` with a leading 0 (``(0, 2, 3)`` for Python's ``(2, 3)``) or
    ``sections``; one output per index or section (a lone output is the tensor itself, as MXNet's graph has it)."""
    indices, sections = node.tuple_attr("indices"), node.attr("sections", 0)
    count = len(indices) if indices else sections
    if count < 1:
        raise node.unsupported(f"indices {indices} with sections {sections} (one of them must give the parts)")
    expr = node.call("_mx_split_v2", node.inputs[0], indices or None, sections, node.attr("axis", 0),
                     bool(node.attr("squeeze_axis", False)))
    return f"{expr}[0]" if count == 1 else expr


@register("broadcast_to")
def _broadcast_to(node: OpNode) -> str:
    return _call(node, "_mx_broadcast_to", node.inputs[0], _t(node.attr("shape")))


@register("broadcast_like")
def _broadcast_like(node: OpNode) -> str:
    if node.attr("lhs_axes") in (None, ()):
        return f"{node.inputs[0]}.expand_as({node.inputs[1]})"
    return node.call("_mx_broadcast_like", *node.inputs[:2], node.tuple_attr("lhs_axes"), node.tuple_attr("rhs_axes"))


@register("_contrib_div_sqrt_dim")
def _div_sqrt_dim(node: OpNode) -> str:
    x = node.inputs[0]
    return f"({x} / math.sqrt({x}.shape[-1]))"


@register("_contrib_AdaptiveAvgPooling2D")
def _adaptive_avg_pool(node: OpNode) -> str:
    size = _t(node.attr("output_size") or (1,))
    return f"F.adaptive_avg_pool2d({node.inputs[0]}, {size if len(size) == 2 else (size[0], size[0])})"
