"""Accuracy: the fraction of positions whose true class is among the top_k scores along
`axis`. Caffe's rule, ties included: a position is correct iff fewer than top_k classes
other than the true one score ≥ the true class's score (so a tie counts against it).
Labels equal to ignore_label are skipped. The optional second top holds per-class accuracy
(0 for classes without examples). Accuracy has no gradient."""

from __future__ import annotations

import math

import torch

from caffe.layer import Layer, register_layer
from caffe.layers._labels import class_indices, gather_labels, operand_shapes


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
        self._shapes: tuple | None = None  # the bottom shapes the geometry is derived for

    def reshape(self, bottom, top):
        shapes = (bottom[0].shape_tuple, bottom[1].shape_tuple)
        if shapes != self._shapes:
            self._derive_geometry(bottom)
            self._shapes = shapes
        top[0].reshape(())
        if len(top) > 1:
            top[1].reshape((self.num_labels,))

    def _derive_geometry(self, bottom) -> None:
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
        scores, labels = operand_shapes(self.outer_num, self.num_labels, self.inner_num)
        self._scores_view = None if bottom[0].shape_tuple == scores else scores
        self._labels_view = None if bottom[1].shape_tuple == labels else labels

    def forward(self, bottom, top):
        outer, inner, classes = self.outer_num, self.inner_num, self.num_labels
        scores, labels = bottom[0].data_tensor, bottom[1].data_tensor
        if self._scores_view is not None:
            scores = scores.view(self._scores_view)
        if self._labels_view is not None:
            labels = labels.view(self._labels_view)
        if self.ignore_label is None and len(top) == 1:
            # Every position counts: no mask, no host sync (gather checks the labels).
            true_score = gather_labels(self, scores, labels.long(), classes)
            # Classes scoring at least the true one, the true class itself included.
            rivals = (scores >= true_score).sum(dim=1)
            correct = (rivals <= self.top_k).sum()
            torch.div(correct, max(1, outer * inner), out=top[0].data_tensor)
            return
        index, valid = class_indices(self, labels, classes, self.ignore_label)
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
            seen = torch.bincount(index[valid], minlength=classes)
            hits = torch.bincount(index[correct], minlength=classes)
            per_class = torch.where(seen > 0, hits / seen.clamp(min=1), 0.0)
            top[1].set_data(per_class.to(scores.dtype))

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("Accuracy has no backward; it cannot be part of a loss")
