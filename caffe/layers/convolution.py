"""Convolution: W (num_output, C/group, k...), b (num_output); N-D via PyTorch's conv ops.

out = floor((in + 2p - (d(k-1)+1)) / s) + 1 on every spatial axis. Several bottoms
share the weights and each produces its own top. The shared machinery (parameters,
shapes, forward and the explicit backward) lives in caffe.layers._base_conv.
"""

from __future__ import annotations

from caffe.conv_geometry import conv_output_size
from caffe.layer import register_layer
from caffe.layers._base_conv import BaseConvolutionLayer


@register_layer("Convolution")
class ConvolutionLayer(BaseConvolutionLayer):
    transposed = False

    def weight_shape(self) -> list[int]:
        return [self.num_output, self.channels // self.group, *self.kernel]

    def output_size(self, size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
        return conv_output_size(size, kernel, stride, pad, dilation)
