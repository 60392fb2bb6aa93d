"""Pooling over (N, C, H, W): MAX, AVE and STOCHASTIC, with Caffe's shape rules.

Shapes: out = ceil((in + 2p - k) / s) + 1 (FLOOR with round_mode FLOOR); if there is
any padding, a last window starting at >= in + p is dropped (conv_geometry.pooled_sizes).
MAX ignores padded cells; its optional second top is the argmax as a flat index into
the H×W plane (a float, as Caffe stores its mask). AVE divides by the number of cells of
the window clipped to [-p, in + p), padded cells included, but sums only the cells
inside the image.

Two paths compute MAX and AVE. The native path is PyTorch's pooling kernels, whose
divisor and ceil rule equal Caffe's whenever their output shape is the same and
pad <= k/2 - true of every canonical model. The padded path covers the rest of what
Caffe accepts (pad up to k-1; unpadded ceil windows that start past the image, which
PyTorch drops): pad explicitly, pool without padding, and for AVE divide window sums
by Caffe's divisor. Backward is PyTorch's pooling backward in both paths.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from caffe.conv_geometry import pooled_sizes
from caffe.layer import Layer, register_layer
from caffe.layers._onednn_pooling import (
    OneDnnMaxPool,
    ave_include_padding,
    ave_pool_forward,
    usable,
)
from caffe.layers._stochastic_pooling import StochasticPooling
from caffe.proto import caffe_pb2

Pool = caffe_pb2.PoolingParameter
FLT_MAX = 3.4028234663852886e38
NO_DILATION = (1, 1)


def torch_pooled_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size (it always drops a ceil window starting past in + p)."""
    out = (size + 2 * pad - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


@register_layer("Pooling")
class PoolingLayer(Layer):
    exact_num_bottom = 1
    min_top = 1
    max_top = 2

    # ----- parameters -----------------------------------------------------------------
    def setup(self, bottom, top):
        p = self.layer_param.pooling_param
        self.method = p.pool
        if len(top) > 1 and self.method != Pool.MAX:
            raise self.error("only MAX pooling has a second top (the argmax mask)")
        self.global_pooling = p.global_pooling
        self.ceil_mode = p.round_mode == Pool.CEIL
        self.kernel = self._read_kernel(p)
        self.pad = self._read_pair(p, "pad", 0)
        self.stride = self._read_pair(p, "stride", 1)
        if min(self.stride) <= 0:
            raise self.error(f"Stride dimensions must be nonzero (got {list(self.stride)})")
        if self.global_pooling and (any(self.pad) or self.stride != (1, 1)):
            raise self.error("With Global_pooling: true; only pad = 0 and stride = 1")
        if any(self.pad):
            if self.method not in (Pool.AVE, Pool.MAX):
                raise self.error("Padding implemented only for average and max pooling.")
            if not self.global_pooling and any(pd >= k for pd, k in zip(self.pad, self.kernel)):
                raise self.error(
                    f"pad {list(self.pad)} must be smaller than the kernel {list(self.kernel)}"
                )
        self._stochastic: StochasticPooling | None = None
        self._argmax: torch.Tensor | None = None  # MAX: winners of the last forward
        self._onednn: OneDnnMaxPool | None = None  # MAX on CPU, native windows
        self._ave_include_padding: bool | None = None  # AVE through oneDNN (None: not)
        self._pooled_by_onednn = False  # the last forward went through self._onednn
        self._drawn: torch.Tensor | None = None  # STOCHASTIC TRAIN: the drawn elements

    def _read_kernel(self, p) -> tuple[int, int]:
        has_size, has_h, has_w = (p.HasField(f) for f in ("kernel_size", "kernel_h", "kernel_w"))
        if self.global_pooling:
            if has_size or has_h or has_w:
                raise self.error("With Global_pooling: true Filter size cannot specified")
            return (0, 0)  # set from the bottom in reshape
        if has_size and (has_h or has_w):
            raise self.error("Either kernel_size or kernel_h/w should be specified; not both.")
        if not has_size and not (has_h and has_w):
            raise self.error("For non-square filters both kernel_h and kernel_w are required.")
        kernel = (p.kernel_size,) * 2 if has_size else (p.kernel_h, p.kernel_w)
        if min(kernel) <= 0:
            raise self.error(f"Filter dimensions cannot be zero (got {list(kernel)})")
        return kernel

    def _read_pair(self, p, name: str, default: int) -> tuple[int, int]:
        has_one, has_h, has_w = (p.HasField(f) for f in (name, f"{name}_h", f"{name}_w"))
        if has_h or has_w:
            if has_one or not (has_h and has_w):
                raise self.error(f"{name} is {name} OR {name}_h and {name}_w are required.")
            return (getattr(p, f"{name}_h"), getattr(p, f"{name}_w"))
        return (getattr(p, name) if has_one else default,) * 2

    # ----- shapes -----------------------------------------------------------------------
    def flops(self, bottom, top, bottom_need, param_need) -> tuple[float, float]:
        # The window's elements per output element; backward routes each output's gradient
        # to its winner (MAX) or spreads it over the window (AVE).
        area = math.prod(self.kernel)
        out = top[0].count
        backward_per = 1 if self.method == Pool.MAX else area
        return area * out, backward_per * out if bottom_need[0] else 0

    def reshape(self, bottom, top):
        shape = self.image_shape(bottom[0])
        hw = tuple(shape[2:])
        if self.global_pooling:
            self.kernel = hw
        out = pooled_sizes(hw, self.kernel, self.stride, self.pad, self.ceil_mode)
        if min(out) <= 0:
            raise self.error(
                f"output would be empty: input {list(hw)} with kernel {list(self.kernel)}, "
                f"stride {list(self.stride)}, pad {list(self.pad)} gives {list(out)}"
            )
        self.out_hw = out
        native = all(
            pd <= k // 2 and torch_pooled_size(n, k, s, pd, self.ceil_mode) == o
            for n, k, s, pd, o in zip(hw, self.kernel, self.stride, self.pad, out)
        )
        # Explicit (left, right, top, bottom) padding for the padded path; a negative
        # right pad crops cells that no window reaches.
        geometry = zip(out, self.stride, self.kernel, hw, self.pad)
        right = [(o - 1) * s + k - n - pd for o, s, k, n, pd in geometry]
        self.explicit_pads = None if native else (self.pad[1], right[1], self.pad[0], right[0])
        if self.method == Pool.MAX and native and len(top) == 1:
            geometry = (self.kernel, self.stride, self.pad, self.ceil_mode)
            if self._onednn is None or self._onednn.made_for != geometry:
                self._onednn = OneDnnMaxPool(*geometry)
        else:
            self._onednn = None
        self._ave_include_padding = None
        if self.method == Pool.AVE and native:
            self._ave_include_padding = ave_include_padding(hw, out, self.kernel, self.stride,
                                                            self.pad)  # fmt: skip
        if self.method == Pool.STOCHASTIC:
            self._stochastic = StochasticPooling(shape, self.kernel, self.stride, out)
        for blob in top:
            blob.reshape([*shape[:2], *out])

    # ----- compute ------------------------------------------------------------------------
    def _pool_input(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int], bool]:
        """The tensor PyTorch pools, with the padding and ceil flag to pool it with."""
        if self.explicit_pads is None:
            return x, self.pad, self.ceil_mode
        fill = -float("inf") if self.method == Pool.MAX else 0.0
        return F.pad(x, self.explicit_pads, value=fill), (0, 0), False

    def forward(self, bottom, top):
        x = bottom[0].data_tensor
        if self.method == Pool.STOCHASTIC:
            if self.phase == caffe_pb2.TRAIN:
                y, self._drawn = self._stochastic.forward_train(x)
                top[0].set_data(y)
            else:
                top[0].set_data(self._stochastic.forward_test(x))
            return
        self._pooled_by_onednn = self._onednn is not None and usable(x)
        if self._pooled_by_onednn:
            self._onednn.forward(x, top[0], keep=self.need_backward and torch.is_grad_enabled())
            self._argmax = None  # found with PyTorch if backward comes without the workspace
            return
        x_in, pad, ceil_mode = self._pool_input(x)
        y = top[0].data_tensor
        if self.method == Pool.MAX:
            self._find_winners(x_in, pad, ceil_mode, y)
            if self.explicit_pads is not None:
                y.clamp_(min=-FLT_MAX)  # a window wholly outside the image: Caffe's -FLT_MAX
            if len(top) > 1:
                top[1].set_data(self._mask(x, x_in))
        elif self._ave_include_padding is not None and usable(x):
            ave_pool_forward(x, top[0], self.kernel, self.stride, self.pad, self.ceil_mode,
                             self._ave_include_padding)  # fmt: skip
        elif self.explicit_pads is None:
            torch.ops.aten.avg_pool2d.out(
                x_in, self.kernel, self.stride, pad, ceil_mode, True, None, out=y
            )
        else:
            sums = F.avg_pool2d(x_in, self.kernel, self.stride, 0, False, True, 1)
            top[0].set_data(sums / self._divisor(x))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].diff_tensor
        x = bottom[0].data_tensor
        drawing = self.method == Pool.STOCHASTIC and self.phase == caffe_pb2.TRAIN
        pooled = self._argmax is not None or self._pooled_by_onednn
        if (self.method == Pool.MAX and not pooled) or (drawing and self._drawn is None):
            raise self.error("backward called without a forward pass")
        if self.method == Pool.MAX and len(top) > 1:
            # BVLC routes by the mask top when there is one, not by its own record: a layer
            # that rewrote the mask in place between forward and backward is obeyed.
            bottom[0].set_diff(self._unpool_by_mask(dy, top[1].data_tensor, x.shape))
            return
        if self._pooled_by_onednn:
            if self._onednn.backward(dy, bottom[0]):
                return
            if self._argmax is None:  # no workspace kept: the winners, from PyTorch
                self._find_winners(x, self.pad, self.ceil_mode, torch.empty_like(dy))
        if self.method == Pool.STOCHASTIC:
            if self.phase == caffe_pb2.TRAIN:
                bottom[0].set_diff(self._stochastic.backward_train(dy, self._drawn))
            else:
                bottom[0].set_diff(self._stochastic.backward_test(dy, x))
            return
        x_in, pad, ceil_mode = self._pool_input(x)
        if self.explicit_pads is None:  # the usual case: straight into the bottom's diff
            dx = bottom[0].diff_tensor
            if self.method == Pool.MAX:
                torch.ops.aten.max_pool2d_with_indices_backward.grad_input(
                    dy, x, self.kernel, self.stride, pad, NO_DILATION, ceil_mode, self._argmax,
                    grad_input=dx,
                )  # fmt: skip
            else:
                torch.ops.aten.avg_pool2d_backward.grad_input(
                    dy, x, self.kernel, self.stride, pad, ceil_mode, True, None, grad_input=dx
                )
            return
        if self.method == Pool.MAX:
            dx = torch.ops.aten.max_pool2d_with_indices_backward(
                dy, x_in, self.kernel, self.stride, pad, NO_DILATION, ceil_mode, self._argmax
            )
        else:
            dx = torch.ops.aten.avg_pool2d_backward(
                dy / self._divisor(x), x_in, self.kernel, self.stride, (0, 0), False, True, 1
            )
        bottom[0].set_diff(F.pad(dx, [-v for v in self.explicit_pads]))

    def _find_winners(
        self, x_in: torch.Tensor, pad: tuple[int, int], ceil_mode: bool, y: torch.Tensor
    ) -> None:
        """MAX with PyTorch's kernel: the pooled values into `y`, the winners to _argmax."""
        argmax = self._argmax
        if argmax is None or argmax.shape != y.shape or argmax.device != y.device:
            self._argmax = argmax = torch.empty(y.shape, dtype=torch.long, device=y.device)
        torch.ops.aten.max_pool2d_with_indices.out(
            x_in, self.kernel, self.stride, pad, NO_DILATION, ceil_mode, out=y, indices=argmax
        )

    def _divisor(self, x: torch.Tensor) -> torch.Tensor:
        """Caffe's AVE divisor per output cell: the window clipped to [-p, in + p)."""
        lengths = []
        for n, k, s, pd, o in zip(x.shape[2:], self.kernel, self.stride, self.pad, self.out_hw):
            start = torch.arange(o, device=x.device) * s - pd
            end = torch.clamp(start + k, max=n + pd)
            # A window starting past the image (unpadded ceil) is empty; Caffe divides
            # 0 by 0 there. Dividing by 1 gives 0 instead.
            lengths.append((end - start).clamp(min=1).to(x.dtype))
        return lengths[0][:, None] * lengths[1][None, :]

    @staticmethod
    def _unpool_by_mask(dy: torch.Tensor, mask: torch.Tensor, in_shape) -> torch.Tensor:
        """Each output's gradient added into the input cell its mask names (flat h·W + w of
        its channel's plane; -1, a window with no cell, adds nothing), as BVLC's backward."""
        n, c = in_shape[:2]
        plane = math.prod(in_shape[2:])
        index = mask.reshape(n, c, -1).to(torch.long)
        valid = index >= 0
        grads = torch.where(valid, dy.reshape(n, c, -1), 0.0)
        dx = torch.zeros((n, c, plane), dtype=dy.dtype, device=dy.device)
        dx.scatter_add_(2, index.clamp(min=0, max=plane - 1), grads)
        return dx.view(in_shape)

    def _mask(self, x: torch.Tensor, x_in: torch.Tensor) -> torch.Tensor:
        """The argmax as a float flat index into the unpadded H×W plane (-1: none)."""
        if self.explicit_pads is None:
            return self._argmax.to(x.dtype)
        height, width = x.shape[2:]
        padded_width = x_in.shape[3]
        row = torch.div(self._argmax, padded_width, rounding_mode="floor") - self.pad[0]
        col = self._argmax % padded_width - self.pad[1]
        inside = (row >= 0) & (row < height) & (col >= 0) & (col < width)
        return torch.where(inside, row * width + col, -1).to(x.dtype)
