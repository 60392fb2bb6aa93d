"""MultinomialLogisticLoss: −Σ log(max(p[n, l_n], 1e-20)) / N for probabilities p (N × D)
that some earlier layer produced (e.g. Softmax); the gradient is −w/(N·max(p, 1e-20)) at
each true class and 0 elsewhere."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._labels import class_indices
from caffe.layers._loss import ClassLabelLossLayer

LOG_THRESHOLD = 1e-20  # probabilities are clamped here before the log, as Caffe


@register_layer("MultinomialLogisticLoss")
class MultinomialLogisticLossLayer(ClassLabelLossLayer):
    def forward(self, bottom, top):
        prob = bottom[0].data_tensor.reshape(self.num, self.dim)
        index, _ = class_indices(self, bottom[1].data_tensor.reshape(-1), self.dim)
        self._index = index.unsqueeze(1)
        self._picked = torch.clamp(prob.gather(1, self._index), min=LOG_THRESHOLD)
        top[0].set_data(-torch.log(self._picked).sum() / self.num)

    def backward(self, top, propagate_down, bottom):
        self.refuse_label_gradient(propagate_down)
        if not propagate_down[0]:
            return
        scale = top[0].diff_tensor / self.num
        grad = torch.zeros((self.num, self.dim), dtype=self._picked.dtype,
                           device=self._picked.device)  # fmt: skip
        grad.scatter_(1, self._index, -scale / self._picked)
        bottom[0].set_diff(grad.reshape(bottom[0].shape_tuple))
