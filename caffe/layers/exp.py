"""Exp: y = base^(shift + scale·x), base −1 meaning e; dy/dx = y·scale·ln(base), y read from
the top at backward time (as Caffe: a later in-place layer's values if one overwrote it)."""

from __future__ import annotations

import math

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("Exp")
class ExpLayer(NeuronLayer):
    keeps_input = False

    def setup(self, bottom, top):
        p = self.layer_param.exp_param
        if p.base != -1 and p.base <= 0:
            raise self.error(f"exp_param.base must be strictly positive or -1 (for e), "
                             f"got {p.base}")  # fmt: skip
        log_base = 1.0 if p.base == -1 else math.log(p.base)
        # y = outer · e^(inner·x): the shift becomes a constant factor.
        self.inner_scale = log_base * p.scale
        self.outer_scale = 1.0 if p.shift == 0 else math.exp(log_base * p.shift)

    def activate(self, x, out):
        if self.inner_scale != 1:
            torch.mul(x, self.inner_scale, out=out)
            out.exp_()
        else:
            torch.exp(x, out=out)
        if self.outer_scale != 1:
            out.mul_(self.outer_scale)

    def gradient(self, x, y, dy, out):
        torch.mul(dy, y, out=out)
        if self.inner_scale != 1:
            out.mul_(self.inner_scale)
