"""SoftmaxWithLoss: −Σ log(max(p_label, FLT_MIN)) / normalizer, with ignore_label;
optional second top = the probabilities."""

from __future__ import annotations

import math

import torch

from caffe.layer import register_layer
from caffe.loss_layer import LossLayer

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

    def reshape(self, bottom, top):
        self.axis = bottom[0].canonical_axis(self.layer_param.softmax_param.axis)
        shape = bottom[0].shape
        self.outer_num = math.prod(shape[: self.axis])
        self.inner_num = math.prod(shape[self.axis + 1 :])
        if self.outer_num * self.inner_num != bottom[1].count:
            raise self.error(
                "Number of labels must match number of predictions; e.g., if softmax axis == 1 "
                "and prediction shape is (N, C, H, W), label count (number of labels) must be "
                f"N*H*W, with integer values in {{0, 1, ..., C-1}}. Got predictions {shape} and "
                f"{bottom[1].count} labels"
            )
        top[0].reshape([])
        if len(top) > 1:
            top[1].reshape(shape)

    def _flat(self, bottom):
        channels = bottom[0].shape[self.axis]
        scores = bottom[0].data_tensor.reshape(self.outer_num, channels, self.inner_num)
        labels = bottom[1].data_tensor.reshape(self.outer_num, self.inner_num).long()
        return scores, labels, channels

    def forward(self, bottom, top):
        scores, labels, channels = self._flat(bottom)
        log_prob = torch.log_softmax(scores, dim=1)
        valid = torch.ones_like(labels, dtype=torch.bool)
        if self.ignore_label is not None:
            valid = labels != self.ignore_label
        safe = torch.where(valid, labels, torch.zeros_like(labels))
        if bool(((safe < 0) | (safe >= channels)).any()):
            bad = int(safe[(safe < 0) | (safe >= channels)][0])
            raise self.error(f"label {bad} outside [0, {channels}) for {channels} classes")
        picked = log_prob.gather(1, safe.unsqueeze(1)).squeeze(1).clamp(min=LOG_FLT_MIN)
        valid_count = int(valid.sum()) if self.ignore_label is not None else -1
        self._norm = self.normalizer(self.mode, self.outer_num, self.inner_num, valid_count)
        loss = -(picked * valid).sum() / self._norm
        top[0].set_data(loss.reshape(()))
        self._prob = log_prob.exp()
        self._valid = valid
        self._labels = safe
        if len(top) > 1:
            top[1].set_data(self._prob.view(bottom[0].shape_tuple))

    def backward(self, top, propagate_down, bottom):
        self.refuse_label_gradient(propagate_down)
        if not propagate_down[0]:
            return
        grad = self._prob.clone()
        grad.scatter_add_(1, self._labels.unsqueeze(1), torch.full_like(grad[:, :1, :], -1.0))
        grad *= self._valid.unsqueeze(1)
        grad *= top[0].diff_tensor / self._norm
        bottom[0].set_diff(grad.view(bottom[0].shape_tuple))
