"""Deconvolution (transposed convolution): W (C, num_output/group, k...), b (num_output).

out = s(in - 1) + d(k-1)+1 - 2p on every spatial axis: the shape that a Convolution
with the same parameters would map back to `in`. Forward is that convolution's
backward-data pass, which is what PyTorch's transposed convolution computes.
"""

from __future__ import annotations

from caffe.conv_geometry import deconv_output_size
from caffe.layer import register_layer
from caffe.layers._base_conv import BaseConvolutionLayer


@register_layer("Deconvolution")
class DeconvolutionLayer(BaseConvolutionLayer):
    transposed = True

    def weight_shape(self) -> list[int]:
        return [self.channels, self.num_output // self.group, *self.kernel]

    def output_size(self, size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
        return deconv_output_size(size, kernel, stride, pad, dilation)
