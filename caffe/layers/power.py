"""Power: y = (shift + scale·x)^power; dy/dx = scale·power·(shift + scale·x)^(power − 1).

Backward computes the derivative as Caffe does: for power 2 from the input alone, for any
other real power as diff_scale·y / (shift + scale·x) with y the top's data at backward
time (a later in-place layer's values if one overwrote it). Where the base is 0 Caffe's
quotient is 0/0; there the closed form (shift + scale·x)^(power − 1) is used instead.
In place, a copy of the input is kept (Caffe would read the overwritten values).
"""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("Power")
class PowerLayer(NeuronLayer):
    def setup(self, bottom, top):
        p = self.layer_param.power_param
        self.power, self.scale, self.shift = float(p.power), float(p.scale), float(p.shift)
        self.diff_scale = self.power * self.scale
        # A constant output (power 0 or scale 0) or a linear one needs no input in backward.
        self.keeps_input = self.diff_scale != 0 and self.power != 1

    def _base(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if (self.scale, self.shift) == (1, 0):
            return x
        base = torch.mul(x, self.scale, out=out) if out is not None else x * self.scale
        return base.add_(self.shift)

    def activate(self, x, out):
        if self.diff_scale == 0:
            # Caffe fills the constant directly (so 0·inf never makes a NaN).
            out.fill_(1.0 if self.power == 0 else self.shift**self.power)
            return
        base = self._base(x, out)
        if self.power != 1:
            torch.pow(base, self.power, out=out)
        elif base is not out:
            out.copy_(base)

    def gradient(self, x, y, dy, out):
        if self.diff_scale == 0:
            out.zero_()
            return
        if self.power == 1:
            torch.mul(dy, self.scale, out=out)
            return
        base = self._base(x)
        if self.power == 2:
            derivative = base * self.diff_scale
        else:
            quotient = torch.where(base != 0, y / base, torch.pow(base, self.power - 1))
            derivative = quotient.mul_(self.diff_scale)
        torch.mul(dy, derivative, out=out)
