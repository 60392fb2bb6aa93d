"""Power: y = (shift + scale·x)^power; dy/dx = scale·power·(shift + scale·x)^(power − 1)."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.neuron_layer import NeuronLayer


@register_layer("Power")
class PowerLayer(NeuronLayer):
    def setup(self, bottom, top):
        p = self.layer_param.power_param
        self.power, self.scale, self.shift = float(p.power), float(p.scale), float(p.shift)
        self.diff_scale = self.power * self.scale
        # A constant output (power 0 or scale 0) or a linear one needs no input in backward.
        self.keeps_input = self.diff_scale != 0 and self.power != 1

    def activate(self, x):
        if self.diff_scale == 0:
            # Caffe fills the constant directly (so 0·inf never makes a NaN).
            value = 1.0 if self.power == 0 else self.shift**self.power
            return torch.full_like(x, value)
        base = x * self.scale + self.shift if (self.scale, self.shift) != (1, 0) else x
        return base if self.power == 1 else torch.pow(base, self.power)

    def gradient(self, x, y, dy):
        if self.diff_scale == 0:
            return torch.zeros_like(dy)
        if self.power == 1:
            return dy * self.scale
        base = x * self.scale + self.shift
        if self.power == 2:
            return dy * base * self.diff_scale
        return dy * torch.pow(base, self.power - 1) * self.diff_scale
