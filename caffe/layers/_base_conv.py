"""What Convolution and Deconvolution share (Caffe's BaseConvolutionLayer).

Both read convolution_param the same way, keep W and b in the same order, accept
several bottoms that share the weights (one top per bottom), and treat the axes
before `axis` as batch axes and the axes after it as 1-3 spatial axes. They differ
only in the weight layout, the output-size formula and the `transposed` flag that
PyTorch's convolution ops take.

Forward is one `torch.convolution` call per bottom; backward is one
`aten.convolution_backward` call per bottom that computes exactly the gradients asked
for (bottom, weight, bias), so no autograd graph is built or kept. The top's data and the
bottom's diff take the kernels' outputs without a copy where nothing can tell (Note [taking
fresh tensors] in caffe/blob.py). On CPU a call covers at most WORKSPACE_BYTES of
activations, images at a time (Note [convolution workspace]), and some layers convolve
channels-last (Note [channels-last convolution on CPU]).
"""

from __future__ import annotations

import math

import torch

from caffe.conv_geometry import conv_axes, conv_window
from caffe.fillers import fill
from caffe.layer import Layer

MAX_SPATIAL_AXES = 3  # PyTorch's convolution kernels cover 1-D, 2-D and 3-D.
NHWC = torch.channels_last

# Note [convolution workspace]
# BVLC convolves one image at a time, through a col buffer of one image. PyTorch's CPU
# kernels (oneDNN) take the whole batch, and every call allocates its output and copies its
# operands into blocked layouts: about three times the activations it is given, on top of
# the net's blobs. For VGG19 at batch 8 that is ~300 MB in conv1_2's backward, the peak of
# a training step. So on CPU one call covers at most WORKSPACE_BYTES of bottom and top
# activations, whole images (at least one); a chunk's output is copied into its rows of the
# blob, and the weight and bias gradients add up over the chunks, as gradients accumulate
# anyway. The small nets' batches fit in one call. On CUDA the batch is what keeps the GPU
# busy, and cuDNN's workspace is its own: one call per bottom.
WORKSPACE_BYTES = 32 << 20

# Note [channels-last convolution on CPU]
# On CPU PyTorch hands an NCHW convolution to oneDNN, which reorders the input, the output
# and their gradients into blocks of 16 channels (AVX-512; 8 on AVX2) and back, padding a
# channel count that is not a multiple of the block: LeNet's conv2 spends more time in
# those padded reorders than in the convolution (ONEDNN_VERBOSE=1 shows them). On NHWC
# tensors oneDNN runs its brgemm kernels on the memory as it is. Blobs stay NCHW (Caffe's
# layout, seen through numpy), so channels-last costs a transpose in and out of each call;
# bench/conv_layouts.py measured when that pays (docs/benchmarks.md): with input channels
# above 8 and not a multiple of 16 it ran 0.94-1.48x as fast as NCHW, median 1.15x (20 -> 50
# channels, as LeNet's conv2: 1.39x at 12x12, 1.31x at 24x24); with the others it was mostly
# slower (3 -> 32: 0.74x, 8 -> 64: 0.72x). So 2-D, ungrouped, non-transposed CPU
# convolutions whose input channels are above 8 and not a multiple of 16 convolve
# channels-last; the others NCHW.
# The two orders of summation differ in the last bits, as any two kernels do; the choice
# depends on the shapes alone, so a net computes the same on every run.
NHWC_BLOCK = 16


def prefers_channels_last(channels: int, spatial_axes: int, group: int, transposed: bool) -> bool:
    """Note [channels-last convolution on CPU]: whether a CPU convolution runs NHWC."""
    return (
        spatial_axes == 2
        and group == 1
        and not transposed
        and channels > 8
        and bool(channels % NHWC_BLOCK)
    )


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
        self._shape_seen: tuple[int, ...] | None = None  # the bottom shape reshape derived from
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
        self._channels_last = self.device.type == "cpu" and prefers_channels_last(
            self.channels, self.num_spatial, self.group, self.transposed
        )
        self._make_blobs(p)

    def _read_geometry(self, p) -> None:
        n, err = self.num_spatial, self.error
        self.kernel, self.stride, self.pad, self.dilation = conv_window(p, n, err)
        self._output_padding = [0] * n

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

    def gemm_flops(self, bottom, top) -> float:
        """The GEMM's FLOPs for one bottom/top pair."""
        weight = self.blobs[0].count
        if self.transposed:  # every input element is scattered to (Cout/group)·kernel outputs
            return 2.0 * bottom.count * (weight // self.channels)
        return 2.0 * top.count * (weight // self.num_output)  # a dot over (Cin/group)·kernel

    def flops(self, bottom, top, bottom_need, param_need) -> tuple[float, float]:
        # Backward: a dX GEMM where the bottom needs a gradient (never for a net's first
        # convolution) and a dW GEMM where the weight learns, each as large as forward's,
        # and the bias sum (one add per output element).
        forward = backward = 0.0
        for b, t, need_dx in zip(bottom, top, bottom_need):
            gemm = self.gemm_flops(b, t)
            bias = t.count if self.bias_term else 0
            forward += gemm + bias
            backward += (gemm if need_dx else 0) + (gemm if param_need[0] else 0)
            if self.bias_term and param_need[1]:
                backward += bias
        return forward, backward

    def comm_shape(self, bottom):
        _, m, n, rows = Layer.comm_shape(self, bottom)
        return ("conv", m, n, rows)

    # ----- shapes ---------------------------------------------------------------------------
    def reshape(self, bottom, top):
        # A blob keeps its shape tuple until the shape changes: derive the geometry once.
        if bottom[0].shape_tuple is not self._shape_seen or len(bottom) > 1:
            self._derive_geometry(bottom)
        for blob in top:
            blob.reshape(self._top_shape)

    def _derive_geometry(self, bottom) -> None:
        shape = list(bottom[0].shape_tuple)
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
        image_bytes = 4 * (self.channels * math.prod(spatial) + self.num_output * math.prod(out))
        rows = num if self.device.type != "cpu" else max(1, WORKSPACE_BYTES // image_bytes)
        # Row ranges of the batch, one per call; None: the whole batch in one call.
        self._chunks = (
            None if rows >= num else [(i, min(i + rows, num)) for i in range(0, num, rows)]
        )
        self._top_shape = (*shape[:axis], self.num_output, *out)
        self._shape_seen = bottom[0].shape_tuple

    # ----- compute --------------------------------------------------------------------------
    def forward(self, bottom, top):
        for x_blob, y_blob in zip(bottom, top):
            x = x_blob.data_tensor.view(self._bottom_view)
            if self._chunks is None:
                y_blob.take_data(self._convolve(x).view(y_blob.shape_tuple))
                continue
            y = y_blob.data_tensor.view(self._top_view)
            for start, end in self._chunks:
                y[start:end] = self._convolve(x[start:end])

    def _convolve(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.blobs[1].data_tensor if self.bias_term else None
        weight = self.blobs[0].data_tensor
        if self._channels_last:
            x, weight = x.contiguous(memory_format=NHWC), weight.contiguous(memory_format=NHWC)
        y = torch.convolution(x, weight, bias, self.stride, self.pad, self.dilation,
                              self.transposed, self._output_padding, self.group)  # fmt: skip
        return y.contiguous() if self._channels_last else y

    def backward(self, top, propagate_down, bottom):
        need_weight = self.param_propagate_down[0]
        need_bias = self.bias_term and self.param_propagate_down[1]
        for y_blob, need_bottom, x_blob in zip(top, propagate_down, bottom):
            if not (need_bottom or need_weight or need_bias):
                continue
            mask = [bool(need_bottom), bool(need_weight), bool(need_bias)]
            dy = y_blob.diff_tensor.view(self._top_view)
            x = x_blob.data_tensor.view(self._bottom_view)
            if self._chunks is None:
                dx = self._backward_chunk(dy, x, mask)
                if need_bottom:
                    x_blob.take_diff(dx.view(x_blob.shape_tuple))
                continue
            dx_rows = x_blob.diff_tensor.view(self._bottom_view) if need_bottom else None
            for start, end in self._chunks:
                dx = self._backward_chunk(dy[start:end], x[start:end], mask)
                if dx_rows is not None:
                    dx_rows[start:end] = dx

    def _backward_chunk(self, dy: torch.Tensor, x: torch.Tensor, mask: list[bool]) -> torch.Tensor:
        """One convolution_backward call: adds the weight and bias gradients (shared weights:
        every bottom adds its own; chunks add up) and returns the bottom's (to overwrite)."""
        weight = self.blobs[0].data_tensor
        if self._channels_last:
            dy, x, weight = (t.contiguous(memory_format=NHWC) for t in (dy, x, weight))
        dx, dw, db = torch.ops.aten.convolution_backward(
            dy, x, weight, [self.num_output] if self.bias_term else None,
            self.stride, self.pad, self.dilation, self.transposed, self._output_padding,
            self.group, mask,
        )  # fmt: skip
        if self._channels_last and dx is not None:
            dx = dx.contiguous()
        if mask[1]:
            self.blobs[0].diff_tensor.add_(dw)
        if mask[2]:
            self.blobs[1].diff_tensor.add_(db)
        return dx
