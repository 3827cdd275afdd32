"""MXNet's activation and softmax ops: ``Activation``, ``LeakyReLU`` (leaky, elu, selu, gelu, prelu),
``hard_sigmoid``, ``softmax`` (with ``use_length``: GluonNLP's masked softmax), ``log_softmax``,
``SoftmaxActivation`` and the loss head ``SoftmaxOutput`` (its forward: a softmax; the label input is dropped).
"""
from __future__ import annotations

import torch
from torch import nn

from migrate.generate.ops.layers import MXNetNames
from migrate.generate.registry import OpNode, register

__all__ = ["PReLU", "mx_masked_softmax", "mx_softmax_output"]


_ACTIVATIONS = {"relu": (nn.ReLU, "F.relu({})"), "sigmoid": (nn.Sigmoid, "torch.sigmoid({})"),
                "tanh": (nn.Tanh, "torch.tanh({})"), "softrelu": (nn.Softplus, "F.softplus({})"),
                "softsign": (nn.Softsign, "F.softsign({})"), "log_sigmoid": (nn.LogSigmoid, "F.logsigmoid({})"),
                "mish": (nn.Mish, "F.mish({})")}


# ops whose backward does not read their output: a ReLU may overwrite it when nothing else reads it (torchvision's
# ReLU(inplace=True) after its batch norms and residual additions)
_IN_PLACE_AFTER = {"Convolution", "Deconvolution", "FullyConnected", "BatchNorm", "_contrib_SyncBatchNorm",
                   "elemwise_add", "_plus", "_Plus", "broadcast_add", "broadcast_plus"}


@register("Activation")
def _activation(node: OpNode) -> str:
    kind = node.attr("act_type")
    if kind not in _ACTIVATIONS:
        raise node.unsupported(f"act_type {kind!r} (known: {sorted(_ACTIVATIONS)})")
    layer, form = _ACTIVATIONS[kind]
    if kind == "relu" and node.last_read[:1] == [True] and node.in_ops[0][0] in _IN_PLACE_AFTER:
        return node.layer(nn.ReLU, inplace=True) or f"F.relu({node.inputs[0]}, inplace=True)"
    return node.layer(layer) or form.format(node.inputs[0])


@register("LeakyReLU")
def _leaky_relu(node: OpNode) -> str:
    kind, x, slope = node.attr("act_type", "leaky"), node.inputs[0], float(node.attr("slope", 0.25))
    forms = {"leaky": (nn.LeakyReLU, (slope,), f"F.leaky_relu({x}, {slope})"),
             "elu": (nn.ELU, (slope,), f"F.elu({x}, {slope})"), "selu": (nn.SELU, (), f"F.selu({x})"),
             "gelu": (nn.GELU, (), f"F.gelu({x})"), "prelu": (None, (), f"F.prelu({x}, {node.optional_input(1)})")}
    if kind not in forms:
        raise node.unsupported(f"act_type {kind!r} (known: {sorted(forms)}; rrelu is random)")
    layer, args, form = forms[kind]
    if kind == "prelu":
        alpha = node.in_shapes[1] if len(node.in_shapes) > 1 else None
        name = (node.param_keys[1] or "").rsplit(".", 1)[-1] if len(node.param_keys) > 1 else ""
        return (alpha and name.isidentifier() and node.layer(
            PReLU, *([] if alpha == (1,) else [alpha[0]]), **({} if name == "alpha" else {"name": name}),
            params={name: 1})) or form
    return node.layer(layer, *args) or form


class PReLU(MXNetNames, nn.PReLU):
    """torch's PReLU holding its slopes under MXNet's name (Gluon's ``alpha``; the symbol API's ``gamma``), which
    ``weight`` reads."""

    def __init__(self, num_parameters=1, name="alpha", dtype=None):
        super().__init__(num_parameters, dtype=dtype)
        self.hold_as(weight=name)


@register("hard_sigmoid")
def _hard_sigmoid(node: OpNode) -> str:
    return f"torch.clamp({node.inputs[0]} * {node.attr('alpha', 0.2)} + {node.attr('beta', 0.5)}, 0.0, 1.0)"


def _temperature(node: OpNode, x: str) -> str:
    t = node.attr("temperature")
    return x if t in (None, 1, 1.0) else f"{x} / {float(t)}"


@register("softmax")
def _softmax(node: OpNode) -> str:
    if node.attr("use_length", False):  # the masked softmax of GluonNLP's attention: entries past length are 0
        t = node.attr("temperature")
        return node.call(mx_masked_softmax, *node.inputs[:2], node.attr("axis", -1),
                         None if t is None else float(t))
    return f"torch.softmax({_temperature(node, node.inputs[0])}, {node.attr('axis', -1)})"


def mx_masked_softmax(x, length, axis, temperature):
    """MXNet's softmax with ``use_length``: softmax over the first ``length`` entries along ``axis``, 0 after them
    (``length`` has ``x``'s shape without ``axis``)."""
    axis = axis % x.dim()
    position = torch.arange(x.shape[axis], device=x.device).reshape([-1] + [1] * (x.dim() - 1 - axis))
    keep = position < length.long().unsqueeze(axis)
    if temperature is not None and temperature != 1.0:
        x = x / temperature
    masked = x.masked_fill(~keep, torch.finfo(x.dtype).min)
    return torch.softmax(masked, axis).masked_fill(~keep, 0.0)


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
    return node.call(mx_softmax_output, node.inputs[0], bool(node.attr("multi_output", False)))


def mx_softmax_output(x, multi_output):
    """The forward of MXNet's SoftmaxOutput loss head: softmax over axis 1 (multi_output) or over all but axis 0."""
    if multi_output:
        return torch.softmax(x, 1)
    return torch.softmax(x.reshape(x.shape[0], -1), 1).reshape(x.shape)
