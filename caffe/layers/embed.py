"""Embed: a lookup table. Each input value (an integer stored as float) in [0, input_dim)
selects a row of the weight W (input_dim × num_output); plus a bias if bias_term. The top
is the bottom's shape with num_output appended. Gradients go into the selected rows of W
(and the bias); the indices have none."""

from __future__ import annotations

import torch.nn.functional as F

from caffe.fillers import fill
from caffe.layer import Layer, register_layer


@register_layer("Embed")
class EmbedLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def allow_force_backward(self, bottom_index: int) -> bool:
        return False  # indices have no gradient

    def setup(self, bottom, top):
        p = self.layer_param.embed_param
        if p.num_output <= 0:
            raise self.error("embed_param.num_output must be positive")
        if p.input_dim <= 0:
            raise self.error("embed_param.input_dim must be positive")
        self.num_output, self.input_dim, self.bias_term = p.num_output, p.input_dim, p.bias_term
        expected = [[self.input_dim, self.num_output]]
        if self.bias_term:
            expected.append([self.num_output])
        if self.blobs:
            got = [b.shape for b in self.blobs]
            if got != expected:
                raise self.error(f"given blobs have shapes {got}, expected {expected}")
            return
        fill(self.blobs.add_blob(*expected[0]), p.weight_filler)
        if self.bias_term:
            fill(self.blobs.add_blob(self.num_output), p.bias_filler)

    def reshape(self, bottom, top):
        top[0].reshape([*bottom[0].shape, self.num_output])

    def forward(self, bottom, top):
        values = bottom[0].data_tensor.reshape(-1)
        index = values.long()
        bad = (index < 0) | (index >= self.input_dim) | (index.to(values.dtype) != values)
        if bool(bad.any()):
            raise self.error(f"input value {float(values[bad][0])} is not an integer in "
                             f"[0, {self.input_dim})")  # fmt: skip
        self._index = index
        y = F.embedding(index, self.blobs[0].data_tensor)
        if self.bias_term:
            y = y + self.blobs[1].data_tensor
        top[0].set_data(y.view(top[0].shape_tuple))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error("cannot backpropagate to the Embed layer's input (indices)")
        dy = top[0].diff_tensor.reshape(-1, self.num_output)
        if self.param_propagate_down[0]:
            self.blobs[0].diff_tensor.index_add_(0, self._index, dy)
        if self.bias_term and self.param_propagate_down[1]:
            self.blobs[1].diff_tensor.add_(dy.sum(dim=0))
