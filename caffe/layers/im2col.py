"""Im2col: every kernel-sized patch of the input as a column, the input of a convolution GEMM.

convolution_param gives axis (the channel axis; the axes before it are batch axes, the rest
spatial), kernel, stride, pad and dilation in Caffe's forms (conv_geometry.conv_window);
num_output, bias and fillers are not used. For C channels and kernel k1×…×kn the top has
C·k1·…·kn channels, ordered channel-major then kernel offset (c, i1, …, in), and each spatial
axis has the convolution's size floor((in + 2p − d(k−1) − 1)/s) + 1. Cells of a patch that
fall in the zero padding read 0. force_nd_im2col only picks a kernel in Caffe; both give this.

Forward pads with zeros and takes strided windows per spatial axis (Tensor.unfold), which
works for any number of spatial axes; backward is the adjoint (col2im: overlapping patches
sum), taken by autograd over the same few view operations.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from caffe.conv_geometry import conv_axes, conv_output_size, conv_window, kernel_extent
from caffe.layer import AutogradLayer, register_layer


def im2col(
    x: torch.Tensor,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dilation: tuple[int, ...],
) -> torch.Tensor:
    """(num, C, *spatial) -> (num, C·∏kernel, *out): Caffe's im2col for each of num images."""
    n = len(kernel)
    pads = [v for p in reversed(pad) for v in (p, p)]  # F.pad lists the last axis first
    cols = F.pad(x, pads) if any(pad) else x
    for axis in range(n):
        extent = kernel_extent(kernel[axis], dilation[axis])
        # New last axis: the window of `extent` cells; keep every dilation-th one.
        cols = cols.unfold(2 + axis, extent, stride[axis])[..., :: dilation[axis]]
    # (num, C, *out, *kernel) -> (num, C, *kernel, *out)
    order = [0, 1, *range(2 + n, 2 + 2 * n), *range(2, 2 + n)]
    cols = cols.permute(order)
    num, channels = x.shape[:2]
    return cols.reshape(num, channels * math.prod(kernel), *cols.shape[2 + n :])


@register_layer("Im2col")
class Im2colLayer(AutogradLayer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.convolution_param
        self.channel_axis, self.num_spatial = conv_axes(bottom[0], p, self.error)
        n, err = self.num_spatial, self.error
        self.kernel, self.stride, self.pad, self.dilation = conv_window(p, n, err)

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        axis = self.channel_axis
        if len(shape) != axis + 1 + self.num_spatial:
            raise self.error(
                f"bottom num_axes may not change (was {axis + 1 + self.num_spatial}, "
                f"bottom {shape})"
            )
        out = [
            conv_output_size(*dims)
            for dims in zip(shape[axis + 1 :], self.kernel, self.stride, self.pad, self.dilation)
        ]
        if min(out) <= 0:
            raise self.error(
                f"output would be empty: bottom {shape} with kernel {list(self.kernel)}, "
                f"stride {list(self.stride)}, pad {list(self.pad)}, "
                f"dilation {list(self.dilation)} gives spatial size {out}"
            )
        top[0].reshape([*shape[:axis], shape[axis] * math.prod(self.kernel), *out])

    def compute(self, bottoms, params):
        x = bottoms[0]
        axis = self.channel_axis
        images = x.reshape(math.prod(x.shape[:axis]), *x.shape[axis:])
        cols = im2col(images, self.kernel, self.stride, self.pad, self.dilation)
        return [cols.reshape(*x.shape[:axis], *cols.shape[1:])]
