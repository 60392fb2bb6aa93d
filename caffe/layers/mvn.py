"""MVN (mean-variance normalization): per item and channel - or per item across channels -
subtract the mean and, if normalize_variance, divide by (std + eps), std the biased
standard deviation. Note eps is added to the std, not the variance (Caffe's choice).

Backward, as Caffe: dx = (dy − mean(dy) − y·mean(dy·y)) / (std + eps) - the exact gradient
of (x − mean)/std, with eps only in the divisor - or dx = dy − mean(dy) without variance
normalization. std is kept from forward; y is the top's data at backward time, as Caffe
reads it (a later in-place layer's values if one overwrote the blob)."""

from __future__ import annotations

import math

import torch

from caffe.layer import Layer, register_layer


@register_layer("MVN")
class MVNLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.mvn_param
        self.normalize_variance = p.normalize_variance
        self.across_channels = p.across_channels
        self.eps = float(p.eps)

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        if not shape:
            raise self.error("bottom must have at least 1 axis")
        # Each row is normalized on its own: one per item, or per item and channel.
        rows = shape[0] if self.across_channels or len(shape) < 2 else shape[0] * shape[1]
        self._rows = rows
        self._row_size = math.prod(shape) // rows if rows else 0
        top[0].reshape(shape)

    def forward(self, bottom, top):
        x = bottom[0].data_tensor.reshape(self._rows, self._row_size)
        if self.normalize_variance:
            var, mean = torch.var_mean(x, dim=1, keepdim=True, correction=0)
            self._std = torch.sqrt(var) + self.eps
            y = (x - mean) / self._std
        else:
            y = x - x.mean(dim=1, keepdim=True)
        top[0].set_data(y.view(bottom[0].shape_tuple))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].diff_tensor.reshape(self._rows, self._row_size)
        centered = dy - dy.mean(dim=1, keepdim=True)
        if self.normalize_variance:
            y = top[0].data_tensor.reshape(self._rows, self._row_size)
            dx = (centered - y * (dy * y).mean(dim=1, keepdim=True)) / self._std
        else:
            dx = centered
        bottom[0].set_diff(dx.view(bottom[0].shape_tuple))
