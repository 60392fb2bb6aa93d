"""Threshold: y = 1 if x > threshold else 0. Like Caffe, it has no backward."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("Threshold")
class ThresholdLayer(NeuronLayer):
    keeps_input = False

    def allow_force_backward(self, bottom_index: int) -> bool:
        return False  # no gradient to force

    def setup(self, bottom, top):
        self.threshold = float(self.layer_param.threshold_param.threshold)

    def activate(self, x, out):
        torch.gt(x, self.threshold, out=out)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error("Threshold has no backward (its gradient is 0 almost everywhere, "
                             "Caffe does not implement it); set propagate_down: false")  # fmt: skip
