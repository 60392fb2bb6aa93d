"""LRN: local response normalization over (N, C, H, W), y = x · scale^(−β).

ACROSS_CHANNELS: scale = k + (α/n)·Σ x² over a window of n channels centred on the
channel (zero-padded at the ends).
WITHIN_CHANNEL: Caffe builds it from Power(2) → AVE pooling (kernel n, stride 1, pad
(n−1)/2) → Power(power −β, scale α, shift 1) → product with x, so
scale = 1 + (α/n²)·Σ x² over an n×n spatial window (zero-padded; k is not used).

Both are one "window mean" M (a zero-padded average pooling whose divisor is always n
or n², because the windows never pass the padding) and the same gradient:
    dx = dy·scale^(−β) − 2αβ · x · M(dy · y / scale),   y = x · scale^(−β)
(M is its own adjoint: the window is symmetric and the divisor constant).
As Caffe, ACROSS_CHANNELS reads y from the top's data at backward time - a later in-place
layer's values if one overwrote the blob (LRN → in-place ReLU) - while WITHIN_CHANNEL,
which Caffe composes from inner layers, uses its own y. x is the bottom's data; in place a
copy of it is kept (Caffe would read the overwritten values there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from caffe.layer import Layer, register_layer
from caffe.proto import caffe_pb2

Region = caffe_pb2.LRNParameter


@register_layer("LRN")
class LRNLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.lrn_param
        self.size = p.local_size
        if self.size <= 0 or self.size % 2 == 0:
            raise self.error(f"LRN only supports odd values for local_size (got {self.size})")
        self.alpha = p.alpha
        self.beta = p.beta
        self.across = p.norm_region == Region.ACROSS_CHANNELS
        # WITHIN_CHANNEL's Power layer shifts by 1, whatever k says.
        self.k = p.k if self.across else 1.0
        self._saved: tuple[torch.Tensor, ...] | None = None

    def flops(self, bottom, top, bottom_need, param_need) -> tuple[float, float]:
        # local_size (across channels) or local_size² (within a channel) + 5 per element
        # forward, twice the window + 6 backward.
        window = self.size if self.across else self.size**2
        count = top[0].count
        return (window + 5) * count, (2 * window + 6) * count if bottom_need[0] else 0

    def reshape(self, bottom, top):
        top[0].reshape(self.image_shape(bottom[0]))

    def _window_mean(self, t: torch.Tensor) -> torch.Tensor:
        half = (self.size - 1) // 2
        if self.across:
            n, c, h, w = t.shape
            # Channels become the pooled "height" of a single-plane image.
            planes = t.reshape(n, 1, c, h * w)
            pooled = F.avg_pool2d(planes, (self.size, 1), 1, (half, 0), False, True)
            return pooled.view(n, c, h, w)
        return F.avg_pool2d(t, self.size, 1, half, False, True)

    def _scale_and_power(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = self._window_mean(x * x).mul_(self.alpha).add_(self.k)
        return scale, scale.pow(-self.beta)

    def forward(self, bottom, top):
        x = bottom[0].data_tensor
        scale, power = self._scale_and_power(x)
        if not self.need_backward:
            self._saved = None
        else:
            # In place the write below overwrites x, which backward needs: keep a copy.
            self._saved = (x.clone() if top[0] is bottom[0] else x, scale, power)
        torch.mul(x, power, out=top[0].data_tensor)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self._saved is None:
            x = bottom[0].data_tensor
            self._saved = (x, *self._scale_and_power(x))
        x, scale, power = self._saved
        dy = top[0].diff_tensor
        y = top[0].data_tensor if self.across else x * power
        inner = self._window_mean(dy * y / scale)
        torch.addcmul(dy * power, x, inner, value=-2 * self.alpha * self.beta,
                      out=bottom[0].diff_tensor)  # fmt: skip
