"""BNLL (binomial normal log likelihood): y = log(1 + e^x), computed without overflow.

dy/dx = sigmoid(x) = 1 − e^−y, so backward needs only the output; expm1 keeps it exact
where sigmoid(x) is tiny (y ≈ e^x for very negative x).
"""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.neuron_layer import NeuronLayer


@register_layer("BNLL")
class BNLLLayer(NeuronLayer):
    keeps_input = False

    def activate(self, x):
        # logaddexp(x, 0) = max(x, 0) + log1p(e^−|x|): stable for any x.
        return torch.logaddexp(x, torch.zeros((), dtype=x.dtype, device=x.device))

    def gradient(self, x, y, dy):
        return dy * -torch.expm1(-y)
