"""Shared by the RNN and LSTM tests: the layer's prototxt, and plain float64 PyTorch
references written from BVLC's unrolled nets (one hand loop per type)."""

from __future__ import annotations

import numpy as np
import torch


def recurrent_text(type_name: str, num_output: int, expose_hidden: bool = False) -> str:
    """The layer with BVLC's test fillers (weights gaussian 0.2, biases gaussian 0.1)."""
    return f"""type: "{type_name}" recurrent_param {{ num_output: {num_output}
        expose_hidden: {str(expose_hidden).lower()}
        weight_filler {{ type: "gaussian" std: 0.2 }}
        bias_filler {{ type: "gaussian" std: 0.1 }} }}"""


def _t(array) -> torch.Tensor:
    return torch.as_tensor(np.asarray(array), dtype=torch.float64)


def _inputs(x, cont, x_static, states, num_output):
    x, cont = _t(x), _t(cont)
    steps, streams = cont.shape
    x = x.reshape(steps, streams, -1)
    xs = None if x_static is None else _t(x_static).reshape(streams, -1)
    zero = torch.zeros(streams, num_output, dtype=torch.float64)
    states = [zero if s is None else _t(s).reshape(streams, num_output) for s in states]
    return x, cont, xs, states


def rnn_reference(x, cont, params, x_static=None, h0=None):
    """(o T×N×H, h_T N×H). params: W_xh, b_h, [W_xh_static], W_hh, W_ho, b_o."""
    p = [_t(v) for v in params]
    w_xh, b_h = p[0], p[1]
    w_s = p[2] if x_static is not None else None
    w_hh, w_ho, b_o = p[-3:]
    x, cont, xs, (h,) = _inputs(x, cont, x_static, [h0], b_h.shape[0])
    outputs = []
    for t in range(cont.shape[0]):
        h_conted = cont[t][:, None] * h
        pre = h_conted @ w_hh.T + (x[t] @ w_xh.T + b_h)
        if w_s is not None:
            pre = pre + xs @ w_s.T
        h = torch.tanh(pre)
        outputs.append(torch.tanh(h @ w_ho.T + b_o))
    return torch.stack(outputs).numpy(), h.numpy()


def lstm_reference(x, cont, params, x_static=None, h0=None, c0=None):
    """(h T×N×H, h_T, c_T). params: W_xc, b_c, [W_xc_static], W_hc; gates i, f, o, g."""
    p = [_t(v) for v in params]
    w_xc, b_c, w_hc = p[0], p[1], p[-1]
    w_s = p[2] if x_static is not None else None
    hidden = w_hc.shape[1]
    x, cont, xs, (h, c) = _inputs(x, cont, x_static, [h0, c0], hidden)
    outputs = []
    for t in range(cont.shape[0]):
        a = (cont[t][:, None] * h) @ w_hc.T + (x[t] @ w_xc.T + b_c)
        if w_s is not None:
            a = a + xs @ w_s.T
        i, f, o, g = (a[:, k * hidden : (k + 1) * hidden] for k in range(4))
        i, o, g = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(g)
        f = cont[t][:, None] * torch.sigmoid(f)
        c = f * c + i * g
        h = o * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs).numpy(), h.numpy(), c.numpy()
