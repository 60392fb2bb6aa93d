"""ELU: y = x for x > 0, α·(e^x − 1) otherwise; dy/dx = 1 or y + α.

For α ≥ 0 the output's sign is the input's, so backward reads only the output (in place
works without keeping x); a negative α makes y > 0 possible for x ≤ 0, so x is kept then.
"""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.neuron_layer import NeuronLayer


@register_layer("ELU")
class ELULayer(NeuronLayer):
    def setup(self, bottom, top):
        self.alpha = float(self.layer_param.elu_param.alpha)
        self.keeps_input = self.alpha < 0

    def activate(self, x):
        return torch.where(x > 0, x, torch.expm1(x) * self.alpha)

    def gradient(self, x, y, dy):
        positive = (x if x is not None else y) > 0
        return torch.where(positive, dy, dy * (y + self.alpha))
