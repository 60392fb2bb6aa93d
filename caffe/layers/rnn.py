"""RNN: a simple (Elman) recurrent layer over T timesteps of N streams, BVLC's RNNLayer:

    h_t = tanh(W_hh·(cont_t · h_{t-1}) + W_xh·x_t + b_h (+ W_xh_static·x_static))
    o_t = tanh(W_ho·h_t + b_o)

The top is o (T×N×num_output). Parameters, in BVLC's order: W_xh (H×K), b_h (H),
W_xh_static (H×S, with a static input), W_hh (H×H), W_ho (H×H), b_o (H). Inputs, state
and gradients: caffe/layers/_recurrent.py.
"""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._recurrent import RecurrentLayer


@register_layer("RNN")
class RNNLayer(RecurrentLayer):
    gates = 1
    state_names = ("h",)

    def step_param_shapes(self, num_output):
        square = [num_output, num_output]
        return [(square, "weight"), (square, "weight"), ([num_output], "bias")]  # W_hh W_ho b_o

    def unroll(self, x_proj, cont, static_proj, state, params):
        w_hh, w_ho, b_o = params
        (h,) = state
        hs = []
        for t in range(x_proj.shape[0]):
            pre = (cont[t].unsqueeze(-1) * h) @ w_hh.t() + x_proj[t]
            if static_proj is not None:
                pre = pre + static_proj
            h = torch.tanh(pre)
            hs.append(h)
        output = torch.tanh(torch.matmul(torch.stack(hs), w_ho.t()) + b_o)
        return output, [h]
