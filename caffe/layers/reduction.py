"""Reduction: SUM, ASUM (Σ|x|), SUMSQ (Σx²) or MEAN over all axes from `axis` on, times
coeff; the top keeps the leading axes (a scalar for axis 0)."""

from __future__ import annotations

import math

import torch

from caffe.layer import Layer, register_layer
from caffe.proto import caffe_pb2

Op = caffe_pb2.ReductionParameter


@register_layer("Reduction")
class ReductionLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.reduction_param
        if p.operation not in (Op.SUM, Op.ASUM, Op.SUMSQ, Op.MEAN):
            raise self.error(f"unknown reduction_param.operation {p.operation}")
        self.operation = p.operation

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        try:
            self.axis = bottom[0].canonical_axis(self.layer_param.reduction_param.axis)
        except ValueError as e:
            raise self.error(f"reduction_param.axis: {e}") from None
        self.num = math.prod(shape[: self.axis])
        self.dim = math.prod(shape[self.axis :])
        self.coeff = float(self.layer_param.reduction_param.coeff)
        if self.operation == Op.MEAN and self.dim:
            self.coeff /= self.dim
        top[0].reshape(shape[: self.axis])

    def forward(self, bottom, top):
        x = bottom[0].data_tensor.reshape(self.num, self.dim)
        self._input = x
        if self.operation == Op.ASUM:
            x = x.abs()
        elif self.operation == Op.SUMSQ:
            x = x.square()
        top[0].set_data((x.sum(dim=1) * self.coeff).reshape(top[0].shape_tuple))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = (top[0].diff_tensor.reshape(self.num, 1)) * self.coeff
        if self.operation == Op.ASUM:
            dx = torch.sign(self._input) * dy
        elif self.operation == Op.SUMSQ:
            dx = self._input * (dy * 2.0)
        else:
            dx = dy.expand(self.num, self.dim)
        bottom[0].set_diff(dx.reshape(bottom[0].shape_tuple))
