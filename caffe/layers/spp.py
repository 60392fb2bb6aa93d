"""SPP: spatial pyramid pooling over (N, C, H, W), a fixed-length output for any H × W.

Level l = 0 … pyramid_height−1 pools the image into about 2^l × 2^l bins with one Pooling
layer (spp_param.pool: MAX, AVE or STOCHASTIC) whose geometry Caffe derives from the input:
    kernel = ceil(H / 2^l),  pad = (kernel·2^l − H + 1) // 2,  stride = kernel
(and likewise for W). Pooling's own shape rules then apply, so a level may have fewer bins
than 2^l when the input is small, and a pad that reaches the kernel is Pooling's error.
With pyramid_height 1 the top is that one pooling's (N, C, 1, 1) output; otherwise each
level is flattened to (N, C·bins) and the levels are concatenated: (N, Σ C·bins), level 0
first. Backward sums the levels' pooling gradients.

The levels are real PoolingLayer instances, rebuilt when the input's shape changes, so
every pooling rule (ceil rounding, AVE divisor with padding, MAX ties) is Pooling's. As in
Caffe, they are built without the net's phase, i.e. in TRAIN: STOCHASTIC samples in TEST too.
"""

from __future__ import annotations

import math

import torch

from caffe.blob import Blob
from caffe.errors import LayerError
from caffe.layer import Layer, register_layer
from caffe.layers.pooling import PoolingLayer
from caffe.proto import caffe_pb2

SPP = caffe_pb2.SPPParameter
_POOL_METHODS = {
    SPP.MAX: caffe_pb2.PoolingParameter.MAX,
    SPP.AVE: caffe_pb2.PoolingParameter.AVE,
    SPP.STOCHASTIC: caffe_pb2.PoolingParameter.STOCHASTIC,
}


def level_geometry(level: int, height: int, width: int) -> tuple[int, int, int, int]:
    """(kernel_h, kernel_w, pad_h, pad_w) of pyramid level `level` for an H × W input;
    the stride equals the kernel."""
    bins = 2**level
    kernel_h, kernel_w = -(-height // bins), -(-width // bins)
    pad_h = (kernel_h * bins - height + 1) // 2
    pad_w = (kernel_w * bins - width + 1) // 2
    return kernel_h, kernel_w, pad_h, pad_w


@register_layer("SPP")
class SPPLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.spp_param
        self.pyramid_height = p.pyramid_height
        if self.pyramid_height <= 0:
            raise self.error("spp_param.pyramid_height must be positive")
        if p.pool not in _POOL_METHODS:
            raise self.error(f"Unknown pooling method {p.pool}.")
        self.pool = _POOL_METHODS[p.pool]
        self._levels_for: list[int] | None = None  # the bottom shape the levels were built for
        self.levels: list[tuple[PoolingLayer, Blob, Blob]] = []  # (pooling, its bottom, its top)

    def _build_levels(self, shape: list[int]) -> None:
        height, width = shape[2:]
        if height <= 0 or width <= 0:
            raise self.error(f"Input dimensions cannot be zero (bottom {shape}).")
        self.levels = []
        for level in range(self.pyramid_height):
            kernel_h, kernel_w, pad_h, pad_w = level_geometry(level, height, width)
            param = caffe_pb2.LayerParameter(name=f"{self.name}/level{level}", type="Pooling")
            pp = param.pooling_param
            pp.pool = self.pool
            pp.kernel_h, pp.kernel_w = kernel_h, kernel_w
            pp.stride_h, pp.stride_w = kernel_h, kernel_w
            pp.pad_h, pp.pad_w = pad_h, pad_w
            pooling = PoolingLayer(param, device=self.device)
            level_bottom, level_top = Blob(shape, self.device), Blob(device=self.device)
            try:
                pooling.run_setup([level_bottom], [level_top])
            except LayerError as exc:
                raise self.error(
                    f"pyramid level {level} of {self.pyramid_height} cannot pool a {height}×"
                    f"{width} input (kernel {kernel_h}×{kernel_w}, pad {pad_h}×{pad_w}): {exc}"
                ) from None
            self.levels.append((pooling, level_bottom, level_top))
        self._levels_for = list(shape)

    def reshape(self, bottom, top):
        shape = self.image_shape(bottom[0])
        if shape != self._levels_for:
            self._build_levels(shape)
        if self.pyramid_height == 1:
            top[0].reshape(self.levels[0][2].shape)
        else:
            top[0].reshape(shape[0], sum(out.count // shape[0] for _, _, out in self.levels))

    def forward(self, bottom, top):
        x = bottom[0].data_tensor
        outputs = []
        for pooling, level_bottom, level_top in self.levels:
            level_bottom.set_data(x)
            pooling.forward([level_bottom], [level_top])
            outputs.append(level_top.data_tensor)
        if self.pyramid_height == 1:
            top[0].set_data(outputs[0])
        else:
            top[0].set_data(torch.cat([y.reshape(x.shape[0], -1) for y in outputs], dim=1))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].diff_tensor.reshape(bottom[0].shape[0], -1)
        dx = None
        offset = 0
        for pooling, level_bottom, level_top in self.levels:
            width = math.prod(level_top.shape[1:])
            level_top.set_diff(dy[:, offset : offset + width].reshape(level_top.shape_tuple))
            offset += width
            pooling.backward([level_top], [True], [level_bottom])
            grad = level_bottom.diff_tensor
            dx = grad.clone() if dx is None else dx.add_(grad)
        bottom[0].set_diff(dx)
