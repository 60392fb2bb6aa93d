"""Scale: y = x·s (+ b), with s broadcast over bottom[0] from `axis` on, as Bias does.

s is a learnable blob of shape bottom[0].shape[axis : axis + num_axes] (filler default
constant 1), or the second bottom, which then receives the gradient Σ dy·x. With
bias_term, a learnable bias follows (blob 1, or blob 0 when s is a bottom) with
bias_filler (default 0) - Caffe's fused Scale + Bias, as after BatchNorm. The input is kept
from forward for the scale gradient, so in place works.
"""

from __future__ import annotations

import torch

from caffe.fillers import fill
from caffe.layer import Layer, register_layer
from caffe.layers.bias import broadcast_geometry, operand_shape
from caffe.proto import caffe_pb2


@register_layer("Scale")
class ScaleLayer(Layer):
    min_bottom = 1
    max_bottom = 2
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.scale_param
        self.two_bottoms = len(bottom) > 1
        self.bias_term = p.bias_term
        self.bias_index = 0 if self.two_bottoms else 1
        expected = [] if self.two_bottoms else [operand_shape(self, bottom[0], p.axis, p.num_axes)]
        if self.bias_term:
            # The bias spans what the scale spans: bottom[1]'s axes, or num_axes.
            bias_axes = bottom[1].num_axes if self.two_bottoms else p.num_axes
            expected.append(operand_shape(self, bottom[0], p.axis, bias_axes))
        if self.blobs:
            got = [b.shape for b in self.blobs]
            if got != expected:
                raise self.error(f"given blobs have shapes {got}, expected {expected}")
            return
        if not self.two_bottoms:
            filler = p.filler
            if not p.HasField("filler"):
                filler = caffe_pb2.FillerParameter(type="constant", value=1.0)
            fill(self.blobs.add_blob(*expected[0]), filler)
        if self.bias_term:
            fill(self.blobs.add_blob(*expected[-1]), p.bias_filler)

    def _scale(self, bottom):
        return bottom[1] if self.two_bottoms else self.blobs[0]

    def reshape(self, bottom, top):
        axis = self.layer_param.scale_param.axis
        self.geometry = broadcast_geometry(self, bottom[0], self._scale(bottom).shape, axis)
        if self.bias_term:
            self.bias_geometry = broadcast_geometry(
                self, bottom[0], self.blobs[self.bias_index].shape, axis
            )
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        outer, dim, inner = self.geometry
        x = bottom[0].data_tensor
        # The scale's gradient needs x; in place the write below overwrites it (Caffe keeps
        # a copy in temp_ for the same reason).
        self._input = x.clone() if top[0] is bottom[0] and self.need_backward else x
        scale = self._scale(bottom).data_tensor.reshape(1, dim, 1)
        x3 = x.reshape(outer, dim, inner)
        y3 = top[0].data_tensor.reshape(outer, dim, inner)
        if not self.bias_term:
            torch.mul(x3, scale, out=y3)
        elif self.bias_geometry == self.geometry:  # the usual case: one fused x·s + b
            bias = self.blobs[self.bias_index].data_tensor.reshape(1, dim, 1)
            torch.addcmul(bias, x3, scale, out=y3)
        else:
            torch.mul(x3, scale, out=y3)
            outer, dim, inner = self.bias_geometry
            bias = self.blobs[self.bias_index].data_tensor.reshape(1, dim, 1)
            y3.view(outer, dim, inner).add_(bias)

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff_tensor
        if self.bias_term and self.param_propagate_down[self.bias_index]:
            outer, dim, inner = self.bias_geometry
            grad = dy.reshape(outer, dim, inner).sum(dim=(0, 2))
            bias = self.blobs[self.bias_index]
            bias.diff_tensor.add_(grad.reshape(bias.shape_tuple))
        outer, dim, inner = self.geometry
        scale = self._scale(bottom)
        if propagate_down[1] if self.two_bottoms else self.param_propagate_down[0]:
            grad = (dy * self._input).reshape(outer, dim, inner).sum(dim=(0, 2))
            if self.two_bottoms:
                scale.set_diff(grad.reshape(scale.shape_tuple))
            else:
                scale.diff_tensor.add_(grad.reshape(scale.shape_tuple))
        if propagate_down[0]:
            dx = dy.reshape(outer, dim, inner) * scale.data_tensor.reshape(1, dim, 1)
            bottom[0].set_diff(dx.reshape(bottom[0].shape_tuple))
