"""Translators of MXNet's fused ``RNN`` op and of the nodes Gluon's ``rnn.LSTM``/``GRU``/``RNN`` build around it.

A hybridized ``gluon.rnn.LSTM`` writes: ``Reshape(-1)`` of each ``l0_i2h_weight``..., ``_rnn_param_concat`` of them
(or one packed ``..._rnn_param`` variable in older symbol files), ``_zeros`` initial states whose batch axis is 0
(unknown until run time), ``RNN``, and ``SwapAxis`` around it for layout 'NTC'. The parameters stay one torch
parameter per MXNet parameter (``rnn.l0_i2h_weight``) and ``_rnn_param_concat`` becomes the list of the pieces,
which the helper ``_mx_rnn`` hands to torch's LSTM/GRU/RNN kernel without concatenating them (so the ONNX export
``name_mapping`` reads shows each tensor feeding its own gate input). A packed vector is cut in the forward.
A batch-free ``_zeros`` state becomes None (the helper makes zeros of the batch it runs on); its own line in the
forward keeps the size inferred for the given input shapes and is not read.
"""
from __future__ import annotations

from migrate.generate.registry import OpNode, register

__all__ = []

_MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _batch_free_zeros(op_attrs) -> bool:
    """Whether an input is a ``_zeros`` node whose shape leaves a dimension (the batch) to inference."""
    op, attrs = op_attrs
    return op == "_zeros" and 0 in _shape(attrs.get("shape", "()"))


def _shape(text) -> tuple:
    node = OpNode("_zeros", "", {"shape": text}, [])
    value = node.attr("shape", ())
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


@register("_rnn_param_concat")
def _rnn_param_concat(node: OpNode) -> str:
    if node.attr("dim", 0) != 0:
        raise node.unsupported(f"dim={node.attr('dim')}")
    return f"[{', '.join(node.inputs)}]"  # the RNN helper takes the pieces (each stays its own tensor in ONNX)


@register("_zeros", "zeros")
def _zeros(node: OpNode) -> str:
    shape = _shape(node.attrs.get("shape", "()"))
    if 0 in shape:  # the size MXNet inferred for these input shapes; the RNN translator reads None instead
        if node.out_shape is None:
            raise node.unsupported(f"zeros of shape {shape} whose unknown axes MXNet could not infer")
        shape = tuple(node.out_shape)
    return f"torch.zeros({shape}, dtype=torch.{node.attr('dtype', 'float32')}, device=self._device())"


@register("RNN")
def _rnn(node: OpNode) -> str:
    mode = node.attr("mode")
    if mode not in _MODES:
        raise node.unsupported(f"mode {mode!r} (known: {list(_MODES)})")
    for key, off in (("projection_size", None), ("lstm_state_clip_min", None), ("lstm_state_clip_max", None),
                     ("use_sequence_length", False)):
        if node.attr(key, off) not in (off, "None"):
            raise node.unsupported(f"{key}={node.attrs[key]}")
    states = []
    for k in (2, 3) if mode == "lstm" else (2,):
        given = len(node.inputs) > k and not _batch_free_zeros(node.in_ops[k] if node.in_ops else ("", {}))
        states.append(node.inputs[k] if given else None)
    if mode != "lstm":
        states.append(None)
    node.helpers.add("_mx_rnn")
    return (f"_mx_rnn({node.inputs[0]}, {node.inputs[1]}, {states[0]}, {states[1]}, {mode!r}, "
            f"state_size={node.attr('state_size')}, num_layers={node.attr('num_layers', 1)}, "
            f"bidirectional={bool(node.attr('bidirectional', False))}, p={node.attr('p', 0.0)}, "
            f"training=self.training)")
