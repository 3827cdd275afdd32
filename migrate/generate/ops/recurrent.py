"""Translators of MXNet's fused ``RNN`` op and of the nodes Gluon's ``rnn.LSTM``/``GRU``/``RNN`` build around it.

A hybridized ``gluon.rnn.LSTM`` writes: ``Reshape(-1)`` of each ``l0_i2h_weight``..., ``_rnn_param_concat`` of them
(or one packed ``..._rnn_param`` variable in older symbol files), ``_zeros`` initial states (``creation``) whose
batch axis is 0 (unknown until run time), ``RNN``, and ``SwapAxis`` around it for layout 'NTC'. The parameters stay
one torch parameter per MXNet parameter (``rnn.l0_i2h_weight``) and ``_rnn_param_concat`` becomes the list of the
pieces, which the helper ``mx_rnn`` hands to torch's LSTM/GRU/RNN kernel without concatenating them (so the ONNX export
``name_mapping`` reads shows each tensor feeding its own gate input). A packed vector is cut in the forward.
A batch-free ``_zeros`` state becomes None (the helper makes zeros of the batch it runs on); its own line in the
forward keeps the size inferred for the given input shapes and is not read.
"""
from __future__ import annotations

import math

import torch

from migrate.generate.registry import OpNode, register
from mxformats.symbol import FORCED_TRAINING

__all__ = ["mx_rnn"]


_MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _batch_free_zeros(op_attrs) -> bool:
    """Whether an input is a ``_zeros`` node whose shape leaves a dimension (the batch) to inference."""
    op, attrs = op_attrs
    return op == "_zeros" and 0 in OpNode(op, "", attrs, []).tuple_attr("shape")


@register("_rnn_param_concat")
def _rnn_param_concat(node: OpNode) -> str:
    if node.attr("dim", 0) != 0:
        raise node.unsupported(f"dim={node.attr('dim')}")
    return f"[{', '.join(node.inputs)}]"  # the RNN helper takes the pieces (each stays its own tensor in ONNX)


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
    return node.call(mx_rnn, *node.inputs[:2], *states, repr(mode), f"state_size={node.attr('state_size')}",
                     f"num_layers={node.attr('num_layers', 1)}",
                     f"bidirectional={bool(node.attr('bidirectional', False))}", f"p={node.attr('p', 0.0)}",
                     "training=True" if node.attr(FORCED_TRAINING, False) else "training=self.training")


def mx_rnn(x, params, state, state_cell, mode, state_size, num_layers, bidirectional, p, training):
    """MXNet's RNN op on ``x`` (T, N, C): returns (output (T, N, D * H), final h[, final c]) with D directions.

    ``params`` is MXNet's flat parameter vector, or the list of its pieces in that order (each flattened: Gluon's
    layers concatenate them, the generated code hands them over one by one so that each stays its own tensor);
    ``state``/``state_cell`` the initial states (L * D, N, H), None for zeros.
    ``mode`` is one of lstm, gru, rnn_tanh, rnn_relu; ``p`` the dropout between layers (in training)."""
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}[mode]
    dirs, hidden = 2 if bidirectional else 1, state_size
    shapes = []
    for layer in range(num_layers):
        width = x.shape[2] if layer == 0 else hidden * dirs
        shapes += [((gates * hidden, width), (gates * hidden, hidden))] * dirs
    sizes = [s for pair in shapes for s in pair] + [(gates * hidden,)] * (2 * len(shapes))
    if not isinstance(params, (list, tuple)):  # one packed vector: cut it into the pieces
        need = sum(math.prod(s) for s in sizes)
        if params.numel() != need:
            raise ValueError(f"the RNN parameter vector has {params.numel()} values; mode {mode} with {num_layers} "
                             f"layer(s), {dirs} direction(s), input width {x.shape[2]} and state size {hidden} "
                             f"needs {need}")
        params = torch.split(params, [math.prod(s) for s in sizes])
    pieces = [piece.reshape(size) for piece, size in zip(params, sizes)]
    weights, biases = pieces[:2 * len(shapes)], pieces[2 * len(shapes):]
    flat = []
    for k in range(len(shapes)):
        flat += [weights[2 * k], weights[2 * k + 1], biases[2 * k], biases[2 * k + 1]]
    zeros = (num_layers * dirs, x.shape[1], hidden)
    h = torch.zeros(zeros, dtype=x.dtype, device=x.device) if state is None else state
    dropout = float(p) if training else 0.0
    if mode == "lstm":
        c = torch.zeros(zeros, dtype=x.dtype, device=x.device) if state_cell is None else state_cell
        out, h_n, c_n = torch._VF.lstm(x, (h, c), flat, True, num_layers, dropout, training, bidirectional, False)
        return out, h_n, c_n
    out, h_n = getattr(torch._VF, mode)(x, h, flat, True, num_layers, dropout, training, bidirectional, False)
    return out, h_n
