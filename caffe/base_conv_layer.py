"""What Convolution and Deconvolution share (Caffe's BaseConvolutionLayer).

Both read convolution_param the same way, keep W and b in the same order, accept
several bottoms that share the weights (one top per bottom), and treat the axes
before `axis` as batch axes and the axes after it as 1-3 spatial axes. They differ
only in the weight layout, the output-size formula and the `transposed` flag that
PyTorch's convolution ops take.

Forward is one `torch.convolution` call per bottom; backward is one
`aten.convolution_backward` call per bottom that computes exactly the gradients asked
for (bottom, weight, bias), so no autograd graph is built or kept.
"""

from __future__ import annotations

import math

import torch

from caffe.conv_geometry import conv_axes, conv_window
from caffe.fillers import fill
from caffe.layer import Layer
from caffe.sync_layout import CommShape

MAX_SPATIAL_AXES = 3  # PyTorch's convolution kernels cover 1-D, 2-D and 3-D.


class BaseConvolutionLayer(Layer):
    min_bottom = 1
    min_top = 1
    equal_num_bottom_top = True
    transposed = False

    # ----- what subclasses fill -----------------------------------------------------------
    def weight_shape(self) -> list[int]:
        raise NotImplementedError

    def output_size(self, size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
        raise NotImplementedError

    # ----- setup ----------------------------------------------------------------------------
    def setup(self, bottom, top):
        p = self.layer_param.convolution_param
        shape = bottom[0].shape
        self.channel_axis, self.num_spatial = conv_axes(bottom[0], p, self.error, MAX_SPATIAL_AXES)
        self._read_geometry(p)
        self.channels = shape[self.channel_axis]
        self.num_output = p.num_output
        self.group = p.group
        self.bias_term = p.bias_term
        if self.num_output <= 0:
            raise self.error("convolution_param.num_output must be positive")
        if self.group <= 0:
            raise self.error("convolution_param.group must be positive")
        if self.channels % self.group:
            raise self.error(
                f"the number of input channels ({self.channels}) must be a multiple of group "
                f"({self.group})"
            )
        if self.num_output % self.group:
            raise self.error(
                f"Number of output should be multiples of group (num_output {self.num_output}, "
                f"group {self.group})"
            )
        self._make_blobs(p)

    def _read_geometry(self, p) -> None:
        n, err = self.num_spatial, self.error
        self.kernel, self.stride, self.pad, self.dilation = conv_window(p, n, err)

    def _make_blobs(self, p) -> None:
        expected = [self.weight_shape()] + ([[self.num_output]] if self.bias_term else [])
        if self.blobs:
            if len(self.blobs) != len(expected):
                raise self.error(
                    f"Incorrect number of weight blobs: {len(self.blobs)} given, "
                    f"{len(expected)} expected (bias_term {str(self.bias_term).lower()})"
                )
            for blob, shape in zip(self.blobs, expected):
                if blob.shape != shape:
                    raise self.error(
                        f"Incorrect weight shape: expected shape {shape}; instead, shape was "
                        f"{blob.shape}"
                    )
            return
        fill(self.blobs.add_blob(*expected[0]), p.weight_filler)
        if self.bias_term:
            fill(self.blobs.add_blob(self.num_output), p.bias_filler)

    def comm_shape(self, bottom):
        shape = Layer.comm_shape(self, bottom)
        return CommShape("conv", shape.m, shape.n, shape.rows)

    # ----- shapes ---------------------------------------------------------------------------
    def reshape(self, bottom, top):
        shape = bottom[0].shape
        axis = self.channel_axis
        if len(shape) != axis + 1 + self.num_spatial:
            raise self.error(
                f"bottom num_axes may not change (was {axis + 1 + self.num_spatial}, "
                f"bottom {shape})"
            )
        if shape[axis] != self.channels:
            raise self.error(
                f"Input size incompatible with convolution kernel: bottom {shape} has "
                f"{shape[axis]} channels, the weights expect {self.channels}"
            )
        for i, blob in enumerate(bottom[1:], start=1):
            if blob.shape != shape:
                raise self.error(
                    f"shape mismatch - bottom[0]: {shape} vs. bottom[{i}]: {blob.shape}"
                )
        spatial = shape[axis + 1 :]
        out = [
            self.output_size(*dims)
            for dims in zip(spatial, self.kernel, self.stride, self.pad, self.dilation)
        ]
        if min(out) <= 0:
            raise self.error(
                f"output would be empty: bottom {shape} with kernel {list(self.kernel)}, "
                f"stride {list(self.stride)}, pad {list(self.pad)}, "
                f"dilation {list(self.dilation)} gives spatial size {out}"
            )
        num = math.prod(shape[:axis])
        self._bottom_view = (num, self.channels, *spatial)
        self._top_view = (num, self.num_output, *out)
        for blob in top:
            blob.reshape([*shape[:axis], self.num_output, *out])

    # ----- compute --------------------------------------------------------------------------
    def forward(self, bottom, top):
        weight = self.blobs[0].data_tensor
        bias = self.blobs[1].data_tensor if self.bias_term else None
        zeros = [0] * self.num_spatial
        for x_blob, y_blob in zip(bottom, top):
            y = torch.convolution(
                x_blob.data_tensor.view(self._bottom_view),
                weight,
                bias,
                self.stride,
                self.pad,
                self.dilation,
                self.transposed,
                zeros,
                self.group,
            )
            y_blob.set_data(y.view(y_blob.shape_tuple))

    def backward(self, top, propagate_down, bottom):
        weight = self.blobs[0].data_tensor
        need_weight = self.param_propagate_down[0]
        need_bias = self.bias_term and self.param_propagate_down[1]
        bias_sizes = [self.num_output] if self.bias_term else None
        zeros = [0] * self.num_spatial
        for y_blob, need_bottom, x_blob in zip(top, propagate_down, bottom):
            if not (need_bottom or need_weight or need_bias):
                continue
            dx, dw, db = torch.ops.aten.convolution_backward(
                y_blob.diff_tensor.view(self._top_view),
                x_blob.data_tensor.view(self._bottom_view),
                weight,
                bias_sizes,
                self.stride,
                self.pad,
                self.dilation,
                self.transposed,
                zeros,
                self.group,
                [bool(need_bottom), bool(need_weight), bool(need_bias)],
            )
            # Shared weights: every bottom adds its gradient; bottom gradients overwrite.
            if need_weight:
                self.blobs[0].diff_tensor.add_(dw)
            if need_bias:
                self.blobs[1].diff_tensor.add_(db)
            if need_bottom:
                x_blob.set_diff(dx.view(x_blob.shape_tuple))
