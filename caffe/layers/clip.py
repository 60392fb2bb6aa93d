"""Clip: y = min(max(x, min), max); the gradient passes where min ≤ x ≤ max (bounds
included, as Caffe). The input is needed: the output cannot tell a clipped x from a bound
(in place, a copy is kept; Caffe would read the clipped values there)."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("Clip")
class ClipLayer(NeuronLayer):
    def setup(self, bottom, top):
        p = self.layer_param.clip_param
        if not (self.layer_param.HasField("clip_param") and p.HasField("min")
                and p.HasField("max")):  # fmt: skip
            raise self.error("clip_param.min and clip_param.max are required")
        if p.min > p.max:
            raise self.error(f"clip_param.min ({p.min}) must not exceed max ({p.max})")
        self.min, self.max = float(p.min), float(p.max)

    def activate(self, x, out):
        torch.clamp(x, self.min, self.max, out=out)

    def gradient(self, x, y, dy, out):
        inside = (x >= self.min) & (x <= self.max)
        torch.mul(dy, inside, out=out)
