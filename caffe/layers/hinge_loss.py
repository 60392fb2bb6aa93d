"""HingeLoss: for scores x (N × D) and labels l, t = −x at the true class and x elsewhere;
loss = Σ max(0, 1 + t) / N (L1) or Σ max(0, 1 + t)² / N (L2). One-vs-all SVM loss."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._labels import class_indices
from caffe.layers._loss import ClassLabelLossLayer
from caffe.proto import caffe_pb2

L1, L2 = caffe_pb2.HingeLossParameter.L1, caffe_pb2.HingeLossParameter.L2


@register_layer("HingeLoss")
class HingeLossLayer(ClassLabelLossLayer):
    def setup(self, bottom, top):
        self.norm = self.layer_param.hinge_loss_param.norm
        if self.norm not in (L1, L2):
            raise self.error(f"unknown hinge_loss_param.norm {self.norm}")

    def forward(self, bottom, top):
        x = bottom[0].data_tensor.reshape(self.num, self.dim)
        index, _ = class_indices(self, bottom[1].data_tensor.reshape(-1), self.dim)
        # −1 at each item's true class, +1 elsewhere.
        self._sign = torch.ones_like(x).scatter_(1, index.unsqueeze(1), -1.0)
        self._margin = torch.clamp(x * self._sign + 1.0, min=0)
        total = self._margin.sum() if self.norm == L1 else self._margin.square().sum()
        top[0].set_data(total / self.num)

    def backward(self, top, propagate_down, bottom):
        self.refuse_label_gradient(propagate_down)
        if not propagate_down[0]:
            return
        if self.norm == L1:
            grad = (self._margin > 0) * self._sign  # sign of the margin: 0 where it is 0
        else:
            grad = self._margin * self._sign * 2.0
        grad = grad * (top[0].diff_tensor / self.num)
        bottom[0].set_diff(grad.reshape(bottom[0].shape_tuple))
