"""ELU: y = x for x > 0, α·(e^x − 1) otherwise; dy/dx = 1 or y + α.

Backward reads as Caffe does: the sign test from the bottom's data, y from the top's data
at backward time (a later in-place layer's values if one overwrote it). In place, the
bottom is the top, so the test reads y too - the same for α ≥ 0, where y's sign is x's; a
negative α makes y > 0 possible for x ≤ 0, so a copy of x is kept then.
"""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("ELU")
class ELULayer(NeuronLayer):
    def setup(self, bottom, top):
        self.alpha = float(self.layer_param.elu_param.alpha)
        self.keeps_input = self.alpha < 0

    def activate(self, x, out):
        torch.where(x > 0, x, torch.expm1(x) * self.alpha, out=out)

    def gradient(self, x, y, dy, out):
        positive = (x if x is not None else y) > 0
        torch.where(positive, dy, dy * (y + self.alpha), out=out)
