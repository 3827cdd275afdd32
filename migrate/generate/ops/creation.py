"""MXNet's ops that create tensors: ``_zeros``, ``_ones``, ``_full``, ``_eye``, ``_arange``, ``_linspace``,
``_contrib_arange_like``,
``_random_normal``, ``_random_uniform`` and ``_random_uniform_like`` (the ``_sample_*`` ops are ``sampling``'s).

Created tensors go to the device of the module's weights (``self._device()``). A ``_zeros`` whose batch axis MXNet
leaves to inference (Gluon's RNN begin states) takes the size inferred for the given input shapes; the RNN
translator (``recurrent``) reads None instead. The random ops draw in eval mode too, as MXNet's do in inference, from
torch's generator (so never MXNet's numbers: the same distributions, shapes and dtypes).
"""
from __future__ import annotations

import torch

from migrate.errors import UnsupportedOpError
from migrate.generate.registry import OpNode, register

__all__ = ["mx_arange_like"]


def _static_shape(node: OpNode) -> tuple:
    """The node's ``shape`` attribute with unknown (0) sizes taken from the shape MXNet inferred."""
    shape = node.tuple_attr("shape")
    if 0 in shape or -1 in shape:
        if node.out_shape is None:
            raise node.unsupported(f"shape {shape} whose unknown axes MXNet could not infer")
        shape = tuple(node.out_shape)
    return shape


@register("_zeros", "zeros")
def _zeros(node: OpNode) -> str:
    shape = node.tuple_attr("shape")
    if 0 in shape:  # the size MXNet inferred for these input shapes; the RNN translator reads None instead
        if node.out_shape is None:
            raise node.unsupported(f"zeros of shape {shape} whose unknown axes MXNet could not infer")
        shape = tuple(node.out_shape)
    return f"torch.zeros({shape}, dtype=torch.{node.attr('dtype', 'float32')}, device=self._device())"


@register("_ones", "ones")
def _ones(node: OpNode) -> str:
    return f"torch.ones({_static_shape(node)}, dtype={node.torch_dtype()}, device=self._device())"


@register("_full", "full")
def _full(node: OpNode) -> str:
    return (f"torch.full({_static_shape(node)}, {float(node.attr('value'))}, dtype={node.torch_dtype()}, "
            f"device=self._device())")


@register("_eye")
def _eye(node: OpNode) -> str:
    """N x M (M = 0: N) with ones on diagonal ``k``."""
    n, k = int(node.attr("N")), int(node.attr("k", 0))
    m = int(node.attr("M", 0)) or n
    return f"torch.ones(({n}, {m}), dtype={node.torch_dtype()}, device=self._device()).tril({k}).triu({k})"


@register("_linspace")
def _linspace(node: OpNode) -> str:
    """``num`` values from ``start``, each ``start + i * step`` computed in float64 and cast, as MXNet's kernel does
    (``step`` reaches ``stop`` at the last value, or one step past it without ``endpoint``)."""
    start, stop, num = float(node.attr("start")), float(node.attr("stop")), int(node.attr("num"))
    endpoint = bool(node.attr("endpoint", True))
    step = (stop - start) / max(1, num - 1 if endpoint else num)
    return (f"(torch.arange({num}, dtype=torch.float64, device=self._device()) * {step} + {start})"
            f".to({node.torch_dtype()})")


@register("_arange", "arange")
def _arange(node: OpNode) -> str:
    if node.attr("infer_range", False):
        raise node.unsupported("infer_range=True")
    start, stop, step = float(node.attr("start", 0)), node.attr("stop"), float(node.attr("step", 1))
    if stop is None:
        start, stop = 0.0, start
    repeat = node.attr("repeat", 1)
    count = max(0, -int(-(float(stop) - start) // step))
    expr = f"(torch.arange({count}, dtype={node.torch_dtype()}, device=self._device()) * {step} + {start})"
    return f"{expr}.repeat_interleave({repeat})" if repeat > 1 else expr


@register("_contrib_arange_like")
def _arange_like(node: OpNode) -> str:
    return node.call(mx_arange_like, node.inputs[0], float(node.attr("start", 0)), float(node.attr("step", 1)),
                     node.attr("repeat", 1), node.attr("axis"))


def mx_arange_like(x, start, step, repeat, axis):
    """MXNet's contrib.arange_like: start, start + step, ... (each ``repeat`` times) shaped like ``x`` (axis None)
    or as long as ``x``'s ``axis``."""
    size = x.numel() if axis is None else x.shape[axis]
    count = -(-size // repeat)
    out = torch.arange(count, dtype=x.dtype, device=x.device) * step + start
    out = out.repeat_interleave(repeat)[:size] if repeat > 1 else out
    return out.reshape(x.shape) if axis is None else out


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
            f"dtype={node.torch_dtype()}, device=self._device())")


@register("_random_uniform")
def _random_uniform(node: OpNode) -> str:
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    return (f"torch.empty({_sample_shape(node)}, dtype={node.torch_dtype()}, device=self._device())"
            f".uniform_({low}, {high})")


@register("_random_uniform_like")
def _random_uniform_like(node: OpNode) -> str:
    """The input's shape and dtype; no gradient reaches the input (MXNet gives it zeros)."""
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    return f"torch.empty_like({node.inputs[0]}).uniform_({low}, {high})"
