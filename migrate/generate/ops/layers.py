"""MXNet's layer ops that torch has layers for: ``Convolution``, ``Deconvolution``, ``FullyConnected``,
``Embedding``, ``Pooling``, ``_contrib_AdaptiveAvgPooling2D``, ``Flatten``, ``Dropout``; and ``Block``, the container
of the generated module tree (a Gluon block holding layers).

A translator here asks for a torch layer (``node.layer(nn.Conv2d, ...)``); where the node cannot hold one (its
parameters are not one Gluon block's, say), it writes the function call on the parameters instead
(``F.conv2d``): both compute the same numbers. Pooling conventions torch's pools lack (MXNet's 'full', inputs
smaller than the kernel) and variational dropout are helpers.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from migrate.generate.registry import OpNode, as_tuple, register

__all__ = ["Block", "MXNetNames", "Clip", "mx_pool_full", "mx_axes_dropout"]


class Block(nn.Module):
    """A Gluon block that holds layers, parameters and buffers: ``block.body`` by name, ``block[0]`` by number.

    Args:
        numbered: the children numbered 0, 1, ... in order (None where a number holds nothing).
        named: the children, parameters (``nn.Parameter``) and buffers (other tensors) by name.
    """

    def __init__(self, *numbered, **named):
        super().__init__()
        for name, value in [*((str(i), v) for i, v in enumerate(numbered)), *named.items()]:
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                self.register_buffer(name, value)
            elif value is not None:
                setattr(self, name, value)

    def __getitem__(self, index):
        return getattr(self, str(index))


class MXNetNames(nn.Module):
    """A torch layer holding its parameters and buffers under MXNet's names (``gamma`` where torch says
    ``weight``), so that its state_dict keys are MXNet's; torch's names read them (``layer.weight`` is
    ``layer.gamma``), as the tools that look for torch's layers expect."""

    def hold_as(self, **mx_names):
        """Move parameters and buffers to MXNet's names: ``hold_as(weight="gamma", bias="beta")``."""
        for torch_name, mx_name in mx_names.items():
            store = self._parameters if torch_name in self._parameters else self._buffers
            store[mx_name] = store.pop(torch_name)
        self.torch_names = {**self.__dict__.get("torch_names", {}), **mx_names}

    def __getattr__(self, name):
        return super().__getattr__(self.__dict__.get("torch_names", {}).get(name, name))


class Clip(nn.Hardtanh):
    """MXNet's clip as a layer (``Clip(0.0, 6.0)`` is ReLU6): values at the bounds pass their gradient, as MXNet's
    clip and ``torch.clamp`` pass it (``nn.Hardtanh`` does not)."""

    def forward(self, x):
        return torch.clamp(x, self.min_val, self.max_val)


def _size(values: tuple):
    """A layer's size argument as torch code writes it: one int where every axis has the same."""
    return values[0] if len(set(values)) == 1 else values


def _conv_options(stride: tuple, pad: tuple, dilate: tuple, groups: int) -> dict:
    """The keyword arguments of a torch convolution layer that differ from its defaults."""
    options = {"stride": _size(stride), "padding": _size(pad), "dilation": _size(dilate), "groups": groups}
    defaults = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1}
    return {k: v for k, v in options.items() if v != defaults[k]}


@register("Convolution")
def _convolution(node: OpNode) -> str:
    kernel = as_tuple(node.attr("kernel"))
    n = len(kernel)
    if node.attr("layout") not in (None, "NCW", "NCHW", "NCDHW"):
        raise node.unsupported(f"layout {node.attr('layout')!r} (channels-first layouts only)")
    stride, dilate, pad = (as_tuple(node.attr(k) or (d,) * n) for k, d in (("stride", 1), ("dilate", 1), ("pad", 0)))
    bias = None if node.attr("no_bias", False) else node.optional_input(2)
    groups = node.attr("num_group", 1)
    weight = node.in_shapes[1] if len(node.in_shapes) > 1 else None
    layer = weight and node.layer(getattr(nn, f"Conv{n}d"), weight[1] * groups, weight[0], _size(kernel),
                                  **_conv_options(stride, pad, dilate, groups), bias=bias is not None,
                                  params={"weight": 1, **({"bias": 2} if bias else {})})
    return layer or (f"F.conv{n}d({node.inputs[0]}, {node.inputs[1]}, {bias}, stride={stride}, padding={pad}, "
                     f"dilation={dilate}, groups={groups})")


@register("Deconvolution")
def _deconvolution(node: OpNode) -> str:
    kernel = as_tuple(node.attr("kernel"))
    n = len(kernel)
    if any(as_tuple(node.attr("target_shape") or ())):
        raise node.unsupported("target_shape")
    stride, dilate, pad, adj = (as_tuple(node.attr(k) or (d,) * n)
                                for k, d in (("stride", 1), ("dilate", 1), ("pad", 0), ("adj", 0)))
    bias = None if node.attr("no_bias", True) else node.optional_input(2)
    groups = node.attr("num_group", 1)
    weight = node.in_shapes[1] if len(node.in_shapes) > 1 else None
    options = _conv_options(stride, pad, dilate, groups)
    if any(adj):
        options["output_padding"] = _size(adj)
    params = {"weight": 1, **({"bias": 2} if bias else {})}
    layer = weight and node.layer(getattr(nn, f"ConvTranspose{n}d"), weight[0], weight[1] * groups, _size(kernel),
                                  **options, bias=bias is not None, params=params)
    return layer or (f"F.conv_transpose{n}d({node.inputs[0]}, {node.inputs[1]}, {bias}, {stride}, {pad}, {adj}, "
                     f"{groups}, {dilate})")


@register("FullyConnected")
def _fully_connected(node: OpNode) -> str:
    flat = node.attr("flatten", True) and not (node.in_shapes and node.in_shapes[0] and len(node.in_shapes[0]) == 2)
    x = f"{node.inputs[0]}.flatten(1)" if flat else node.inputs[0]
    bias = None if node.attr("no_bias", False) else node.optional_input(2)
    weight = node.in_shapes[1] if len(node.in_shapes) > 1 else None
    layer = weight and node.layer(nn.Linear, weight[1], weight[0], **({} if bias else {"bias": False}),
                                  params={"weight": 1, **({"bias": 2} if bias else {})}, call=(x,))
    return layer or f"F.linear({x}, {node.inputs[1]}, {bias})"


@register("Embedding")
def _embedding(node: OpNode) -> str:
    weight = node.in_shapes[1] if len(node.in_shapes) > 1 else None
    x = f"{node.inputs[0]}.long().clamp(0, {int(node.attr('input_dim')) - 1})"  # MXNet clips indices to the rows
    return (weight and node.layer(nn.Embedding, *weight, params={"weight": 1}, call=(x,))) or (
        f"F.embedding({x}, {node.inputs[1]})")


@register("Pooling")
def _pooling(node: OpNode) -> str:
    x, pool = node.inputs[0], node.attr("pool_type", "max")
    if pool not in ("max", "avg", "sum"):
        raise node.unsupported(f"pool_type {pool!r}")
    n = len(node.in_shapes[0]) - 2 if node.in_shapes and node.in_shapes[0] else len(as_tuple(node.attr("kernel")))
    dims = tuple(range(2, 2 + n))
    if node.attr("global_pool", False):
        form = {"max": f"{x}.amax({dims}, keepdim=True)", "avg": f"{x}.mean({dims}, keepdim=True)",
                "sum": f"{x}.sum({dims}, keepdim=True)"}
        return (pool == "avg" and n <= 3 and node.layer(getattr(nn, f"AdaptiveAvgPool{n}d"), 1)) or form[pool]
    kernel = as_tuple(node.attr("kernel"))
    stride, pad = as_tuple(node.attr("stride") or (1,) * n), as_tuple(node.attr("pad") or (0,) * n)
    include = node.attr("count_include_pad", True) or pool == "sum"
    convention = node.attr("pooling_convention", "valid")
    if convention not in ("valid", "full"):
        raise node.unsupported(f"pooling_convention {convention!r}")
    small = bool(node.in_shapes and node.in_shapes[0]) and any(s < k for s, k in zip(node.in_shapes[0][2:], kernel))
    if convention == "full" or (small and pool != "max"):  # torch's pools refuse an input smaller than the kernel
        expr = node.call(mx_pool_full, x, repr("max" if pool == "max" else "avg"), kernel, stride, pad, include,
                         convention == "full")
    elif pool == "sum":
        expr = f"F.avg_pool{n}d({x}, {kernel}, {stride}, {pad}, count_include_pad=True)"
    else:
        expr = _pool_layer(node, pool, n, kernel, stride, pad, include) or (
            f"F.max_pool{n}d({x}, {kernel}, {stride}, {pad})" if pool == "max" else
            f"F.avg_pool{n}d({x}, {kernel}, {stride}, {pad}, count_include_pad={include})")
    return f"{expr} * {math.prod(kernel)}" if pool == "sum" else expr


def _pool_layer(node: OpNode, pool: str, n: int, kernel: tuple, stride: tuple, pad: tuple, include: bool):
    """The call of a torch pooling layer (MXNet's stride defaults to 1, torch's to the kernel: written unless
    equal), or None."""
    options = {"stride": _size(stride)} if stride != kernel else {}
    options.update({"padding": _size(pad)} if any(pad) else {})
    if pool == "avg" and not include:
        options["count_include_pad"] = False
    cls = getattr(nn, f"{'Max' if pool == 'max' else 'Avg'}Pool{n}d", None)
    return cls and node.layer(cls, _size(kernel), **options)


def mx_pool_full(x, pool, kernel, stride, pad, count_include_pad, full=True):
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


@register("_contrib_AdaptiveAvgPooling2D")
def _adaptive_avg_pool(node: OpNode) -> str:
    size = as_tuple(node.attr("output_size") or (1,))
    size = size if len(size) == 2 else (size[0], size[0])
    return node.layer(nn.AdaptiveAvgPool2d, _size(size)) or f"F.adaptive_avg_pool2d({node.inputs[0]}, {size})"


@register("Flatten", "flatten")
def _flatten(node: OpNode) -> str:
    return node.layer(nn.Flatten) or f"{node.inputs[0]}.flatten(1)"


@register("Dropout")
def _dropout(node: OpNode) -> str:
    p = float(node.attr("p", 0.5))
    if node.attr("axes") not in (None, ()):  # variational dropout: one mask shared along these axes
        training = "True" if node.attr("mode", "training") == "always" else "self.training"
        return node.call(mx_axes_dropout, node.inputs[0], p, node.tuple_attr("axes"), training)
    if node.attr("mode", "training") == "always":
        return f"F.dropout({node.inputs[0]}, {p}, True)"
    return node.layer(nn.Dropout, p) or f"F.dropout({node.inputs[0]}, {p}, self.training)"


def mx_axes_dropout(x, p, axes, training):
    """MXNet's Dropout with ``axes``: one keep/drop draw shared along ``axes`` (variational dropout), kept values
    scaled by 1 / (1 - p); the identity outside training. Draws torch's random numbers, not MXNet's."""
    if not training or p == 0:
        return x
    shape = [1 if d in [a % x.dim() for a in axes] else s for d, s in enumerate(x.shape)]
    keep = torch.bernoulli(torch.full(shape, 1 - p, dtype=x.dtype, device=x.device))
    return x * keep / (1 - p)
