"""The runtime helper of MXNet's fused ``RNN`` op (copied into generated files like those in ``runtime``).

MXNet packs the parameters of all layers and directions into one flat vector: first every weight (for layer 0
forward, layer 0 backward, layer 1 forward, ...: the input-to-hidden then the hidden-to-hidden matrix), then every
bias in the same order (input-to-hidden, hidden-to-hidden). The gate order (LSTM i, f, g, o; GRU r, z, n) and the
GRU's ``r * (W_hn h + b_hn)`` equal torch's, so the vector is cut into torch's per-layer tensors and run by the
kernel ``torch.nn.LSTM``/``GRU``/``RNN`` use.
"""
import math

import torch


def _mx_rnn(x, params, state, state_cell, mode, state_size, num_layers, bidirectional, p, training):
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
