"""LSTM: a long short-term memory layer over T timesteps of N streams, BVLC's LSTMLayer
(the "Learning to Execute" form, without peephole connections):

    [i', f', o', g']_t = W_xc·x_t + b_c (+ W_xc_static·x_static) + W_hc·(cont_t · h_{t-1})
    c_t, h_t = LSTMUnit(c_{t-1}, [i', f', o', g']_t, cont_t)

The top is h (T×N×num_output). Parameters, in BVLC's order: W_xc (4H×K), b_c (4H),
W_xc_static (4H×S, with a static input), W_hc (4H×H); the 4H rows are the i, f, o, g
gates in that order. Inputs, state and gradients: caffe/layers/_recurrent.py.
"""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._recurrent import RecurrentLayer
from caffe.layers.lstm_unit import lstm_unit


@register_layer("LSTM")
class LSTMLayer(RecurrentLayer):
    gates = 4
    state_names = ("h", "c")

    def step_param_shapes(self, num_output):
        return [([4 * num_output, num_output], "weight")]  # W_hc

    def unroll(self, x_proj, cont, static_proj, state, params):
        (w_hc,) = params
        h, c = state
        hs = []
        for t in range(x_proj.shape[0]):
            gates = (cont[t].unsqueeze(-1) * h) @ w_hc.t() + x_proj[t]
            if static_proj is not None:
                gates = gates + static_proj
            c, h = lstm_unit(c, gates, cont[t])
            hs.append(h)
        return torch.stack(hs), [h, c]
