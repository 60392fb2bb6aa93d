"""Dropout: in the TRAIN phase y = x·mask/(1 − r) with mask ~ Bernoulli(1 − r); in TEST,
y = x. The phase is the layer's own (Caffe reads the layer phase, not the net's), and
backward applies the very mask drawn in forward, so it works in place too."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer
from caffe.proto import caffe_pb2


@register_layer("Dropout")
class DropoutLayer(NeuronLayer):
    keeps_input = False

    def setup(self, bottom, top):
        ratio = float(self.layer_param.dropout_param.dropout_ratio)
        if not 0.0 <= ratio < 1.0:
            raise self.error(f"dropout_param.dropout_ratio must be in [0, 1), got {ratio}")
        self.ratio = ratio
        self.scale = 1.0 / (1.0 - ratio)

    def backward_reads_input(self) -> bool:
        return False  # its gradient does not depend on its input

    @property
    def training(self) -> bool:
        return self.phase == caffe_pb2.TRAIN

    def activate(self, x, out):
        if not self.training:
            self._mask = None
            if out is not x:
                out.copy_(x)  # a copy, as Caffe: distinct blobs never share memory
            return
        # One fused kernel draws the mask (kept as bool) and scales the kept inputs.
        y, self._mask = torch.native_dropout(x, self.ratio, True)
        out.copy_(y)

    def gradient(self, x, y, dy, out):
        if self._mask is None:
            if out is not dy:
                out.copy_(dy)
            return
        out.copy_(torch.ops.aten.native_dropout_backward(dy, self._mask, self.scale))
