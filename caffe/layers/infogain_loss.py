"""InfogainLoss: a softmax loss weighted by an "information gain" matrix H (C × C):
loss = −Σ_n Σ_k H[l_n, k]·log(max(p_nk, 1e-20)) / normalizer, p = softmax(x) along `axis`.
With H = I it is SoftmaxWithLoss. H comes from the BlobProto file infogain_loss_param.source
or, when given, from a third bottom (then it may change between iterations).

As BVLC Caffe since 2017, the softmax is taken inside (the input is scores, not
probabilities); ignore_label and loss_param.normalization (default VALID) apply as in
SoftmaxWithLoss; the optional second top is the probabilities. The gradient is
p·Σ_k H[l, k] − H[l, :] per position, times w/normalizer.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from caffe.errors import CaffeError
from caffe.layer import register_layer
from caffe.layers._labels import class_indices
from caffe.layers._loss import LossLayer

LOG_THRESHOLD = math.log(1e-20)  # probabilities are clamped at 1e-20 before the log


@register_layer("InfogainLoss")
class InfogainLossLayer(LossLayer):
    exact_num_bottom = -1
    min_bottom = 2
    max_bottom = 3
    exact_num_top = -1
    min_top = 1
    max_top = 2

    def allow_force_backward(self, bottom_index: int) -> bool:
        return bottom_index == 0  # neither the labels nor H

    def setup(self, bottom, top):
        lp = self.layer_param.loss_param
        if lp.HasField("normalize"):
            raise self.error('loss_param.normalize is deprecated; use "normalization"')
        self.mode = lp.normalization
        self.ignore_label = lp.ignore_label if lp.HasField("ignore_label") else None
        self._stored_h = None
        if len(bottom) < 3:
            self._stored_h = self._read_h(self.layer_param.infogain_loss_param.source)

    def _read_h(self, source: str) -> torch.Tensor:
        from caffe.formats.weights_io import read_blobproto

        if not source:
            raise self.error("infogain_loss_param.source must name the H matrix file when "
                             "there is no third bottom")  # fmt: skip
        try:
            blob = read_blobproto(source)
        except CaffeError as e:
            raise self.error(f"cannot read the infogain matrix: {e}") from None
        values = np.array(blob.data, dtype=np.float32)  # a copy: the reader's view is read-only
        return torch.from_numpy(values).to(self.device)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        shape = bottom[0].shape
        self.axis = bottom[0].canonical_axis(self.layer_param.infogain_loss_param.axis)
        self.outer_num = math.prod(shape[: self.axis])
        self.inner_num = math.prod(shape[self.axis + 1 :])
        self.num_labels = shape[self.axis]
        if self.outer_num * self.inner_num != bottom[1].count:
            raise self.error(
                f"number of labels must match number of predictions: predictions {shape} along "
                f"axis {self.axis} need {self.outer_num * self.inner_num} labels, got "
                f"{bottom[1].count}"
            )
        h_count = bottom[2].count if len(bottom) > 2 else self._stored_h.numel()
        if h_count != self.num_labels**2:
            raise self.error(f"the infogain matrix has {h_count} values; {self.num_labels} "
                             f"classes need {self.num_labels}x{self.num_labels}")  # fmt: skip
        if len(top) > 1:
            top[1].reshape(shape)

    def _h(self, bottom) -> torch.Tensor:
        h = bottom[2].data_tensor if len(bottom) > 2 else self._stored_h
        return h.reshape(self.num_labels, self.num_labels)

    def forward(self, bottom, top):
        scores = bottom[0].data_tensor.reshape(self.outer_num, self.num_labels, self.inner_num)
        log_prob = torch.log_softmax(scores, dim=1)
        labels = bottom[1].data_tensor.reshape(self.outer_num, self.inner_num)
        index, valid = class_indices(self, labels, self.num_labels, self.ignore_label)
        # rows[n, k, j] = H[label(n, j), k]: each position's row of H, laid out like the scores.
        rows = self._h(bottom)[index].permute(0, 2, 1)
        per_position = -(rows * torch.clamp(log_prob, min=LOG_THRESHOLD)).sum(dim=1)
        count = self.outer_num * self.inner_num
        if valid is not None:
            per_position = torch.where(valid, per_position, torch.zeros_like(per_position))
            count = int(valid.sum())
        self._norm = self.normalizer(self.mode, self.outer_num, self.inner_num, count)
        self._prob = log_prob.exp()
        self._index, self._valid = index, valid
        top[0].set_data(per_position.sum() / self._norm)
        if len(top) > 1:
            top[1].set_data(self._prob.view(bottom[0].shape_tuple))

    def backward(self, top, propagate_down, bottom):
        self.refuse_label_gradient(propagate_down)
        if len(propagate_down) > 2 and propagate_down[2]:
            raise self.error("InfogainLoss Layer cannot backpropagate into the infogain matrix.")
        if not propagate_down[0]:
            return
        h = self._h(bottom)
        row_sums = h.sum(dim=1)[self._index].unsqueeze(1)  # (outer, 1, inner)
        grad = self._prob * row_sums - h[self._index].permute(0, 2, 1)
        if self._valid is not None:
            grad = grad * self._valid.unsqueeze(1)
        grad = grad * (top[0].diff_tensor / self._norm)
        bottom[0].set_diff(grad.reshape(bottom[0].shape_tuple))
