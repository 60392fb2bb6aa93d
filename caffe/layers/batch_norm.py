"""BatchNorm: y = (x − mean) / sqrt(var + eps) per channel (axis 1), Caffe's way.

Three stored blobs - running mean sum (C), running variance sum (C), and the moving-average
factor (1) - are statistics, not weights: setup pins their lr_mult to 0, as Caffe does, so
no solver ever changes them. No γ/β here; nets follow BatchNorm with a Scale layer.

- Batch statistics (use_global_stats false; the default in the TRAIN phase): normalise by
  the batch mean and biased variance over N × spatial (m values per channel), and update
  factor ← factor·maf + 1, mean_sum ← batch_mean + maf·mean_sum,
  var_sum ← m/(m−1)·batch_var + maf·var_sum (no correction when m = 1).
- Global statistics (the default in TEST): mean = mean_sum/factor, var = var_sum/factor
  (both 0 when factor is 0).

The blobs are parameter blobs (views into the net's flat buffer), so the update writes
their tensors in place. Backward keeps the input (a copy when run in place, where the output
overwrites it) and per-channel statistics; like Caffe's x_norm_ cache it never reads the
top, which a following in-place Scale overwrites.
"""

from __future__ import annotations

import logging

import torch

from caffe.layer import Layer, register_layer
from caffe.proto import caffe_pb2

_log = logging.getLogger("caffe")


@register_layer("BatchNorm")
class BatchNormLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.batch_norm_param
        self.moving_average_fraction = float(p.moving_average_fraction)
        self.use_global_stats = (
            p.use_global_stats if p.HasField("use_global_stats") else self.phase == caffe_pb2.TEST
        )
        self.eps = float(p.eps)
        if bottom[0].num_axes < 1:
            raise self.error("bottom must have at least 1 axis (N, C, ...)")
        self.channels = bottom[0].shape[1] if bottom[0].num_axes > 1 else 1
        expected = [[self.channels], [self.channels], [1]]
        if self.blobs:
            got = [b.shape for b in self.blobs]
            if got != expected:
                raise self.error(f"given blobs have shapes {got}, expected {expected}")
        else:
            for shape in expected:
                self.blobs.add_blob(*shape)  # zeros
        self._pin_statistics()

    def _pin_statistics(self) -> None:
        """Statistics are no parameters: lr_mult 0 for all three (Caffe's LayerSetUp rule)."""
        specs = self.layer_param.param
        for i, spec in enumerate(specs[: len(self.blobs)]):
            if spec.lr_mult != 0:
                raise self.error(
                    f"param {i} has lr_mult {spec.lr_mult}: cannot configure batch "
                    "normalization statistics as layer parameters (lr_mult must be 0)"
                )
        added = list(range(len(specs), len(self.blobs)))
        for _ in added:
            specs.add().lr_mult = 0.0
        if added:
            _log.info("Layer %s: lr_mult 0 for statistics blobs %s", self.name, added)

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        channels = shape[1] if len(shape) > 1 else 1
        if channels != self.channels:
            raise self.error(f"bottom shape {shape} has {channels} channels, the statistics "
                             f"have {self.channels}")  # fmt: skip
        top[0].reshape(shape)

    def _as_3d(self, tensor: torch.Tensor) -> torch.Tensor:
        """(N, C, spatial): statistics reduce over dims 0 and 2."""
        return tensor.reshape(tensor.shape[0], self.channels, -1)

    def forward(self, bottom, top):
        x = self._as_3d(bottom[0].data_tensor)
        if self.use_global_stats:
            factor = self.blobs[2].data_tensor
            scale = torch.where(factor == 0, torch.zeros_like(factor), 1.0 / factor)
            mean = self.blobs[0].data_tensor * scale
            var = self.blobs[1].data_tensor * scale
        else:
            var, mean = torch.var_mean(x, dim=(0, 2), correction=0)
            self._update_statistics(mean, var, x.shape[0] * x.shape[2])
        inv_std = torch.rsqrt(var + self.eps)
        if top[0] is bottom[0] and self.need_backward and not self.use_global_stats:
            x_kept = x.clone()  # in place the write below overwrites x, which backward needs
        else:
            x_kept = x
        self._saved = (x_kept, mean, inv_std, self.use_global_stats)
        y = self._as_3d(top[0].data_tensor)
        torch.sub(x, mean[:, None], out=y).mul_(inv_std[:, None])

    def _update_statistics(self, mean: torch.Tensor, var: torch.Tensor, m: int) -> None:
        maf = self.moving_average_fraction
        correction = m / (m - 1) if m > 1 else 1.0
        self.blobs[2].data_tensor.mul_(maf).add_(1.0)
        self.blobs[0].data_tensor.mul_(maf).add_(mean)
        self.blobs[1].data_tensor.mul_(maf).add_(var, alpha=correction)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        saved = getattr(self, "_saved", None)
        if saved is None:
            raise self.error("backward called without a forward pass")
        x, mean, inv_std, global_stats = saved
        dy = self._as_3d(top[0].diff_tensor)
        if global_stats:
            dx = dy * inv_std[:, None]  # the statistics are constants
        else:
            # dx = inv_std·(dy − mean(dy) − x̂·mean(dy·x̂)), the means per channel.
            dx = torch.ops.aten.native_batch_norm_backward(
                dy, x, None, None, None, mean, inv_std, True, self.eps, [True, False, False]
            )[0]
        bottom[0].set_diff(dx.reshape(bottom[0].shape_tuple))
