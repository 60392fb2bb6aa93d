"""AbsVal: y = |x|; dy/dx = sign(x) (0 at 0, as Caffe's caffe_cpu_sign).

Caffe refuses in-place AbsVal; here a copy of the input is kept, so in place works too.
"""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("AbsVal")
class AbsValLayer(NeuronLayer):
    def activate(self, x, out):
        torch.abs(x, out=out)

    def gradient(self, x, y, dy, out):
        torch.mul(dy, torch.sign(x), out=out)
