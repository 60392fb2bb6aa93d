"""SoftmaxWithLoss: −Σ log(max(p_label, FLT_MIN)) / normalizer, with ignore_label;
optional second top = the probabilities.

Forward keeps log p; backward writes p − onehot(label), scaled by the loss weight over
the normalizer, straight into the bottom's diff. Without ignore_label (the common case)
neither pass needs a mask or a host sync: the range of the labels is checked by the gather
itself (caffe/layers/_labels.py), and the normalizer is known from the shapes.
"""

from __future__ import annotations

import math

import torch

from caffe.layer import register_layer
from caffe.layers._labels import gather_labels, operand_shapes
from caffe.layers._loss import LossLayer

# log(FLT_MIN): Caffe clamps p_label at FLT_MIN before the log.
LOG_FLT_MIN = math.log(1.1754943508222875e-38)


@register_layer("SoftmaxWithLoss")
class SoftmaxWithLossLayer(LossLayer):
    exact_num_top = -1
    min_top = 1
    max_top = 2

    def setup(self, bottom, top):
        lp = self.layer_param.loss_param
        self.ignore_label = lp.ignore_label if lp.HasField("ignore_label") else None
        self.mode = self.normalization_mode()
        self._shapes: tuple | None = None  # the bottom shapes the geometry below is for

    def reshape(self, bottom, top):
        shapes = (bottom[0].shape_tuple, bottom[1].shape_tuple)
        if shapes != self._shapes:
            self._derive_geometry(bottom)
            self._shapes = shapes
        top[0].reshape(())
        if len(top) > 1:
            top[1].reshape(shapes[0])

    def _derive_geometry(self, bottom) -> None:
        self.axis = bottom[0].canonical_axis(self.layer_param.softmax_param.axis)
        shape = bottom[0].shape
        self.outer_num = math.prod(shape[: self.axis])
        self.inner_num = math.prod(shape[self.axis + 1 :])
        self.channels = shape[self.axis]
        if self.outer_num * self.inner_num != bottom[1].count:
            raise self.error(
                "Number of labels must match number of predictions; e.g., if softmax axis == 1 "
                "and prediction shape is (N, C, H, W), label count (number of labels) must be "
                f"N*H*W, with integer values in {{0, 1, ..., C-1}}. Got predictions {shape} and "
                f"{bottom[1].count} labels"
            )
        # Without ignore_label every position counts: the normalizer follows from the shapes.
        self._full_norm = self.normalizer(self.mode, self.outer_num, self.inner_num, -1)
        scores, labels = operand_shapes(self.outer_num, self.channels, self.inner_num)
        self._scores_view = None if bottom[0].shape_tuple == scores else scores
        self._labels_view = None if bottom[1].shape_tuple == labels else labels
        self._minus_ones = torch.full((scores[0], 1, *scores[2:]), -1.0, device=bottom[0].device)

    def forward(self, bottom, top):
        outer, channels, inner = self.outer_num, self.channels, self.inner_num
        scores, labels = bottom[0].data_tensor, bottom[1].data_tensor
        if self._scores_view is not None:
            scores = scores.view(self._scores_view)
        if self._labels_view is not None:
            labels = labels.view(self._labels_view)
        labels = labels.long()
        log_prob = torch.log_softmax(scores, dim=1)
        if self.ignore_label is None:
            valid = None
            self._norm = self._full_norm
            picked = gather_labels(self, log_prob, labels, channels)
            total = picked.clamp_min_(LOG_FLT_MIN).sum()
        else:
            valid = labels != self.ignore_label
            labels = torch.where(valid, labels, torch.zeros_like(labels))
            picked = gather_labels(self, log_prob, labels, channels).squeeze(1)
            self._norm = self.normalizer(self.mode, outer, inner, int(valid.sum()))
            total = (picked.clamp_min_(LOG_FLT_MIN) * valid).sum()
        torch.div(total, -self._norm, out=top[0].data_tensor)
        self._log_prob = log_prob
        self._valid = valid
        self._labels = labels
        if len(top) > 1:
            torch.exp(log_prob, out=top[1].data_tensor.view(log_prob.shape))

    def backward(self, top, propagate_down, bottom):
        self.refuse_label_gradient(propagate_down)
        if not propagate_down[0]:
            return
        grad = bottom[0].diff_tensor
        if self._scores_view is not None:
            grad = grad.view(self._scores_view)
        torch.exp(self._log_prob, out=grad)
        grad.scatter_add_(1, self._labels.unsqueeze(1), self._minus_ones)
        if self._valid is not None:
            grad.mul_(self._valid.unsqueeze(1))
        grad.mul_(top[0].diff_tensor / self._norm)
