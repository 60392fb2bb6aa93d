"""Accuracy: the fraction of positions whose true class is among the top_k scores along
`axis`. Caffe's rule, ties included: a position is correct iff fewer than top_k classes
other than the true one score ≥ the true class's score (so a tie counts against it).
Labels equal to ignore_label are skipped. The optional second top holds per-class accuracy
(0 for classes without examples). Accuracy has no gradient."""

from __future__ import annotations

import math

import torch

from caffe.labels import class_indices
from caffe.layer import Layer, register_layer


@register_layer("Accuracy")
class AccuracyLayer(Layer):
    exact_num_bottom = 2
    min_top = 1
    max_top = 2

    def allow_force_backward(self, bottom_index: int) -> bool:
        return False  # no gradient to force

    def setup(self, bottom, top):
        p = self.layer_param.accuracy_param
        self.top_k = int(p.top_k)
        self.ignore_label = p.ignore_label if p.HasField("ignore_label") else None

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        try:
            self.axis = bottom[0].canonical_axis(self.layer_param.accuracy_param.axis)
        except ValueError as e:
            raise self.error(f"accuracy_param.axis: {e}") from None
        self.outer_num = math.prod(shape[: self.axis])
        self.inner_num = math.prod(shape[self.axis + 1 :])
        self.num_labels = shape[self.axis]
        if self.top_k > self.num_labels or self.top_k < 1:
            raise self.error(f"top_k ({self.top_k}) must be between 1 and the number of "
                             f"classes ({self.num_labels})")  # fmt: skip
        if self.outer_num * self.inner_num != bottom[1].count:
            raise self.error(
                f"number of labels must match number of predictions: predictions {shape} along "
                f"axis {self.axis} need {self.outer_num * self.inner_num} labels, got "
                f"{bottom[1].count}"
            )
        top[0].reshape([])
        if len(top) > 1:
            top[1].reshape([self.num_labels])

    def forward(self, bottom, top):
        scores = bottom[0].data_tensor.reshape(self.outer_num, self.num_labels, self.inner_num)
        labels = bottom[1].data_tensor.reshape(self.outer_num, self.inner_num)
        index, valid = class_indices(self, labels, self.num_labels, self.ignore_label)
        true_score = scores.gather(1, index.unsqueeze(1))
        # Classes scoring at least the true one, the true class itself excluded.
        rivals = (scores >= true_score).sum(dim=1) - 1
        correct = rivals < self.top_k
        if valid is None:
            valid = torch.ones_like(correct)
        correct = correct & valid
        count = valid.sum()
        accuracy = torch.where(count > 0, correct.sum() / count.clamp(min=1), 0.0)
        top[0].set_data(accuracy.to(scores.dtype))
        if len(top) > 1:
            seen = torch.bincount(index[valid], minlength=self.num_labels)
            hits = torch.bincount(index[correct], minlength=self.num_labels)
            per_class = torch.where(seen > 0, hits / seen.clamp(min=1), 0.0)
            top[1].set_data(per_class.to(scores.dtype))

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("Accuracy has no backward; it cannot be part of a loss")
