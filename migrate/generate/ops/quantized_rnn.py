"""MXNet's int8 LSTM, ``_contrib_quantized_rnn``, replayed as MXNet 1.9.1's CPU build (oneDNN 2.4's int8 LSTM on
AVX2 and AVX-512 processors without VNNI) computes it; one unidirectional layer, the one MXNet's ``quantize_net``
writes for a ``gluon.rnn.LSTM(num_layers=1)``.

Inputs: uint8 data (``_contrib_quantize_asym``: x * scale + shift, rounded), MXNet's float32 parameter vector, the
float32 initial states, and the data's float32 scale and shift. MXNet quantizes each gate row of both weight matrices
to int8 by 127 / its largest |w| (over the input and the recurrent weights), and the initial and every later hidden
state to uint8 with the data's scale and shift. The gate products are integer dot products whose adjacent pairs of
uint8 x int8 products are summed in int16 with saturation before the int32 sum (oneDNN's int8 GEMM without VNNI,
``vpmaddubsw``): with data near the top of its range and full-range weights the pairs saturate (the replay keeps it;
MXNet's int8 gates then differ from the float LSTM's). The int32 sums are scaled by 1 / (weight scale x data scale)
and added to the bias minus the shift's share (the weights' row sums times shift / (weight scale x data scale));
then the LSTM cell in float32: c = f c + i g (one rounding, as an FMA), h = o tanh(c), rounded to uint8 for the next
step and given out dequantized, (h_uint8 - shift) / scale. The final cell state is float32.

Exactness: the outputs and the final hidden state are MXNet's bits; the final cell state differs from MXNet's in its
last bits, because oneDNN's sigmoid and tanh are its own polynomial approximations (the replay rounds the exact
functions to float32): by less than MXNet's own cell state moves when its inputs move by one float32 ulp, which
``tests/migrate/generate/test_generate_ops.py`` measures beside the comparison. (MXNet 1.9.1 itself runs this op only
where oneDNN does not pick its AVX-512 VNNI kernels, whose weight reorder refuses MXNet's layout, "could not create a
primitive descriptor for a reorder primitive": there set ``DNNL_MAX_CPU_ISA=AVX512_CORE`` before MXNet starts; on
SSE4.1/AVX-only processors MXNet's cell state differs from the AVX2 one in its last bits.)
"""
from __future__ import annotations

import torch

from migrate.generate.ops.recurrent import _batch_free_zeros
from migrate.generate.registry import OpNode, register

__all__ = ["mx_rnn_int8_weights", "mx_int16_pair_dot", "mx_rnn_quantize_state", "mx_quantized_lstm"]


def mx_rnn_int8_weights(w_input, w_state):
    """MXNet's int8 LSTM weights (GetMKLDNNRnnWeightsQParams, one layer): per gate row the scale 127 / max |w| over
    both matrices (float32), each weight w * scale rounded half to even and saturated to int8. Returns (int8 input
    weights, int8 recurrent weights, float32 scales per row)."""
    top = torch.maximum(w_input.abs().amax(1), w_state.abs().amax(1))
    scales = torch.full_like(top, 127.0) / top

    def quantize(w):
        return torch.round((w * scales[:, None]).double()).clamp(-128, 127).to(torch.int8)
    return quantize(w_input), quantize(w_state), scales


def mx_int16_pair_dot(data, weight):
    """oneDNN's uint8 x int8 GEMM without VNNI: ``data`` (N, K) uint8, ``weight`` (M, K) int8 -> (N, M) int64, each
    adjacent pair of products (k = 2j, 2j + 1) summed and saturated to int16 (``vpmaddubsw``), the pairs summed
    exactly."""
    n, k = data.shape
    if k % 2:
        data = torch.cat([data, torch.zeros_like(data[:, :1])], 1)
        weight = torch.cat([weight, torch.zeros_like(weight[:, :1])], 1)
    u = data.to(torch.int32).reshape(n, 1, -1, 2)
    out = []
    rows = max(1, (1 << 24) // max(1, n * data.shape[1]))  # bound the (N, rows, K) products held at once
    for w in weight.to(torch.int32).split(rows):
        pairs = (u * w.reshape(1, w.shape[0], -1, 2)).sum(-1).clamp(-32768, 32767)
        out.append(pairs.sum(-1, dtype=torch.int64))
    return torch.cat(out, 1)


def mx_rnn_quantize_state(h, scale, shift):
    """A float32 hidden state to oneDNN's uint8: h * scale + shift (two roundings), clamped to [0, 255], rounded half
    to even."""
    return torch.round((h.float() * scale + shift).clamp(0.0, 255.0)).to(torch.uint8)


def mx_quantized_lstm(data, params, state, state_cell, scale, shift, state_size, state_outputs):
    """MXNet's ``_contrib_quantized_rnn`` (mode lstm, one unidirectional layer): ``data`` (T, N, C) uint8,
    ``params`` MXNet's float32 parameter vector (input weights, recurrent weights, input bias, recurrent bias) or the
    list of those pieces,
    ``state``/``state_cell`` (1, N, H) float32 or None (zeros), ``scale``/``shift`` the data's (float32, shape (1,)).
    Returns the output (T, N, H) float32, and with ``state_outputs`` also the final hidden and cell states (1, N,
    H)."""
    steps, batch, width = data.shape
    hidden, gates = state_size, 4 * state_size
    if isinstance(params, (list, tuple)):  # the pieces ``_rnn_param_concat`` hands over (Gluon's LSTM)
        params = torch.cat([piece.reshape(-1) for piece in params])
    params = params.detach().float().reshape(-1)
    w_input = params[:gates * width].reshape(gates, width)
    w_state = params[gates * width:gates * (width + hidden)].reshape(gates, hidden)
    bias = params[gates * (width + hidden):gates * (width + hidden + 1)] + params[gates * (width + hidden + 1):]
    q_input, q_state, w_scales = mx_rnn_int8_weights(w_input, w_state)
    scale, shift = scale.detach().float().reshape(()), shift.detach().float().reshape(())
    dequantize = w_scales * scale
    row_sums = q_state.sum(1, dtype=torch.int32).float() + q_input.sum(1, dtype=torch.int32).float()
    bias = bias - row_sums * shift / dequantize
    zeros = torch.zeros((batch, hidden), dtype=torch.float32, device=data.device)
    h = mx_rnn_quantize_state(zeros if state is None else state.detach()[0], scale, shift)
    c = zeros if state_cell is None else state_cell.detach()[0].float()
    outputs = []
    for step in range(steps):
        acc = mx_int16_pair_dot(data[step], q_input) + mx_int16_pair_dot(h, q_state)
        z = acc.to(torch.int32).float() / dequantize + bias
        i, f, g, o = z.double().chunk(4, 1)
        i, f, o = torch.sigmoid(i).float(), torch.sigmoid(f).float(), torch.sigmoid(o).float()
        c = (i.double() * torch.tanh(g).float().double() + (c * f).double()).float()
        h = mx_rnn_quantize_state(torch.tanh(c.double()).float() * o, scale, shift)
        outputs.append((h.float() - shift) / scale)
    out = torch.stack(outputs) if outputs else torch.empty((0, batch, hidden), device=data.device)
    if not state_outputs:
        return out
    last = (h.float() - shift) / scale
    return out, last[None], c[None]


@register("_contrib_quantized_rnn")
def _quantized_rnn(node: OpNode) -> str:
    if node.attr("mode") != "lstm":
        raise node.unsupported(f"mode {node.attr('mode')!r} (MXNet quantizes lstm only)")
    for key, off in (("num_layers", 1), ("bidirectional", False), ("projection_size", None),
                     ("lstm_state_clip_min", None), ("lstm_state_clip_max", None), ("use_sequence_length", False)):
        if node.attr(key, off) not in (off, "None"):
            raise node.unsupported(f"{key}={node.attrs[key]} (one unidirectional LSTM layer without projection, "
                                   f"clipping or sequence lengths is translated; quantize_net with exclude_layers "
                                   f"keeps the layer float)")
    states = []
    for k in (2, 3):
        free = node.in_ops and _batch_free_zeros(node.in_ops[k])
        states.append(None if free else node.inputs[k])
    return node.call(mx_quantized_lstm, *node.inputs[:2], *states, *node.inputs[4:6], int(node.attr("state_size")),
                     bool(node.attr("state_outputs", False)))
