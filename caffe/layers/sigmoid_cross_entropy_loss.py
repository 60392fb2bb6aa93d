"""SigmoidCrossEntropyLoss: −Σ [t·log σ(x) + (1 − t)·log(1 − σ(x))] / normalizer, computed
in the overflow-free form max(x, 0) − x·t + log(1 + e^−|x|). Targets equal to ignore_label
contribute nothing. Unlike the other losses, an unset normalization means BATCH_SIZE
(Caffe's historical behaviour for this layer); the gradient is (σ(x) − t)·w/normalizer."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from caffe.layer import register_layer
from caffe.layers._loss import LossLayer, Norm


@register_layer("SigmoidCrossEntropyLoss")
class SigmoidCrossEntropyLossLayer(LossLayer):
    def setup(self, bottom, top):
        lp = self.layer_param.loss_param
        self.ignore_label = lp.ignore_label if lp.HasField("ignore_label") else None
        if lp.HasField("normalization") or lp.HasField("normalize"):
            self.mode = self.normalization_mode()
        else:
            self.mode = Norm.BATCH_SIZE

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        if bottom[0].count != bottom[1].count:
            raise self.error(f"inputs must have the same count: {bottom[0].shape} vs "
                             f"{bottom[1].shape}")  # fmt: skip
        self.outer_num = bottom[0].shape[0]
        self.inner_num = bottom[0].count // max(self.outer_num, 1)

    def forward(self, bottom, top):
        x = bottom[0].data_tensor
        target = bottom[1].data_tensor.reshape(x.shape)
        losses = F.binary_cross_entropy_with_logits(x, target, reduction="none")
        valid = None
        valid_count = bottom[0].count
        if self.ignore_label is not None:
            valid = target != self.ignore_label
            losses = torch.where(valid, losses, torch.zeros_like(losses))
            valid_count = int(valid.sum())
        self._norm = self.normalizer(self.mode, self.outer_num, self.inner_num, valid_count)
        self._valid = valid
        top[0].set_data(losses.sum() / self._norm)

    def backward(self, top, propagate_down, bottom):
        self.refuse_label_gradient(propagate_down)
        if not propagate_down[0]:
            return
        x = bottom[0].data_tensor
        grad = torch.sigmoid(x) - bottom[1].data_tensor.reshape(x.shape)
        if self._valid is not None:
            grad = torch.where(self._valid, grad, torch.zeros_like(grad))
        bottom[0].set_diff(grad * (top[0].diff_tensor / self._norm))
