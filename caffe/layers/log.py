"""Log: y = log_base(shift + scale·x), base −1 meaning e; dy/dx = scale / (ln(base)·(shift +
scale·x)). The derivative needs the input: in place a copy of it is kept (Caffe would read
the overwritten values there)."""

from __future__ import annotations

import math

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("Log")
class LogLayer(NeuronLayer):
    def setup(self, bottom, top):
        p = self.layer_param.log_param
        if p.base != -1 and p.base <= 0:
            raise self.error(f"log_param.base must be strictly positive or -1 (for e), "
                             f"got {p.base}")  # fmt: skip
        self.base_scale = 1.0 if p.base == -1 else 1.0 / math.log(p.base)
        self.scale, self.shift = float(p.scale), float(p.shift)

    def _inner(self, x):
        return x * self.scale + self.shift if (self.scale, self.shift) != (1, 0) else x

    def activate(self, x, out):
        torch.log(self._inner(x), out=out)
        if self.base_scale != 1:
            out.mul_(self.base_scale)

    def gradient(self, x, y, dy, out):
        torch.div(dy * (self.scale * self.base_scale), self._inner(x), out=out)
