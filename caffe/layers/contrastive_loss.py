"""ContrastiveLoss (Hadsell et al. 2006) on feature pairs a, b (N × C) with similarity y:
loss = Σ [y·d² + (1 − y)·max(margin − d, 0)²] / 2N, d = ‖a − b‖. legacy_version uses
max(margin − d², 0) for dissimilar pairs. A pair is similar iff int(y) ≠ 0 (Caffe casts).
The gradient of the non-legacy term divides by d + 1e-4, as Caffe, to stay finite at d = 0.
"""

from __future__ import annotations

import math

import torch

from caffe.layer import register_layer
from caffe.layers._loss import LossLayer


@register_layer("ContrastiveLoss")
class ContrastiveLossLayer(LossLayer):
    exact_num_bottom = 3

    def allow_force_backward(self, bottom_index: int) -> bool:
        return bottom_index != 2  # never into the similarity labels

    def setup(self, bottom, top):
        p = self.layer_param.contrastive_loss_param
        self.margin = float(p.margin)
        self.legacy = p.legacy_version

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.num = bottom[0].shape[0]
        self.dim = math.prod(bottom[0].shape[1:])
        if math.prod(bottom[1].shape[1:]) != self.dim:
            raise self.error(f"the two feature inputs differ: {bottom[0].shape} vs "
                             f"{bottom[1].shape}")  # fmt: skip
        if bottom[2].count != self.num:
            raise self.error(f"expected one similarity label per pair ({self.num}), got "
                             f"{bottom[2].count} (shape {bottom[2].shape})")  # fmt: skip

    def forward(self, bottom, top):
        a = bottom[0].data_tensor.reshape(self.num, self.dim)
        b = bottom[1].data_tensor.reshape(self.num, self.dim)
        self._diff = a - b
        self._dist_sq = self._diff.square().sum(dim=1)
        self._similar = bottom[2].data_tensor.reshape(-1).long() != 0
        if self.legacy:
            dissimilar = torch.clamp(self.margin - self._dist_sq, min=0)
        else:
            dissimilar = torch.clamp(self.margin - torch.sqrt(self._dist_sq), min=0).square()
        per_pair = torch.where(self._similar, self._dist_sq, dissimilar)
        top[0].set_data(per_pair.sum() / (2.0 * self.num))

    def backward(self, top, propagate_down, bottom):
        if len(propagate_down) > 2 and propagate_down[2]:
            raise self.error("ContrastiveLoss Layer cannot backpropagate to label inputs.")
        if not (propagate_down[0] or propagate_down[1]):
            return
        # d(loss)/da = coefficient · (a − b) per pair; d/db is its negative.
        if self.legacy:
            pushes = (self.margin - self._dist_sq) > 0
            dissimilar = pushes.to(self._diff.dtype).neg()
        else:
            dist = torch.sqrt(self._dist_sq)
            short = self.margin - dist
            dissimilar = torch.where(short > 0, -short / (dist + 1e-4), torch.zeros_like(dist))
        coefficient = torch.where(self._similar, torch.ones_like(dissimilar), dissimilar)
        grad = self._diff * (coefficient * (top[0].diff_tensor / self.num)).unsqueeze(1)
        for i, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[i]:
                bottom[i].set_diff((grad * sign).reshape(bottom[i].shape_tuple))
