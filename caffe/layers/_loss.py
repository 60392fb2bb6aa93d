"""Shared behaviour of loss layers: an anonymous top if none is declared, a default
loss_weight of 1, no gradient to the label input, and Caffe's normalization modes.
ClassLabelLossLayer adds the shape contract of losses over N items with one class label each.
"""

from __future__ import annotations

import math

from caffe.layer import Layer
from caffe.proto import caffe_pb2

Norm = caffe_pb2.LossParameter


class LossLayer(Layer):
    exact_num_bottom = 2
    exact_num_top = 1
    auto_top_blobs = True
    is_loss = True

    def allow_force_backward(self, bottom_index: int) -> bool:
        return bottom_index != 1  # never into labels

    def reshape(self, bottom, top):
        if bottom[0].shape[0] != bottom[1].shape[0]:
            raise self.error(
                f"the data and label should have the same first dimension "
                f"({bottom[0].shape} vs {bottom[1].shape})"
            )
        top[0].reshape([])  # the loss is a scalar (0-axis blob)

    def normalization_mode(self) -> int:
        p = self.layer_param.loss_param
        if p.HasField("normalization"):
            return p.normalization
        if p.HasField("normalize"):
            return Norm.VALID if p.normalize else Norm.BATCH_SIZE
        return Norm.VALID

    @staticmethod
    def normalizer(mode: int, outer_num: int, inner_num: int, valid_count: int) -> float:
        """Divisor of the summed loss; never below 1 (Caffe's get_normalizer)."""
        if mode == Norm.FULL:
            value = outer_num * inner_num
        elif mode == Norm.VALID:
            value = outer_num * inner_num if valid_count < 0 else valid_count
        elif mode == Norm.BATCH_SIZE:
            value = outer_num
        else:
            value = 1
        return max(1.0, float(value))

    def refuse_label_gradient(self, propagate_down) -> None:
        if len(propagate_down) > 1 and propagate_down[1]:
            raise self.error(f"{self.type} Layer cannot backpropagate to label inputs.")


class ClassLabelLossLayer(LossLayer):
    """A loss over N items of D values (scores or probabilities) with one class label per
    item (HingeLoss, MultinomialLogisticLoss). reshape sets self.num (N) and self.dim (D)."""

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.num = bottom[0].shape[0]
        self.dim = math.prod(bottom[0].shape[1:])
        if bottom[1].count != self.num:
            raise self.error(f"expected one label per item ({self.num}), got {bottom[1].count} "
                             f"(label shape {bottom[1].shape})")  # fmt: skip
