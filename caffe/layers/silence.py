"""Silence: consumes bottoms nobody else uses (no tops); its bottom gradients are zero."""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer


@register_layer("Silence")
class SilenceLayer(Layer):
    min_bottom = 1
    exact_num_top = 0

    def reshape(self, bottom, top):
        """No tops to shape."""

    def backward_reads_input(self) -> bool:
        return False  # its gradient does not depend on its input

    def forward(self, bottom, top):
        """Nothing to compute."""

    def backward(self, top, propagate_down, bottom):
        for blob, down in zip(bottom, propagate_down):
            if down:
                blob.set_diff(torch.zeros_like(blob.data_tensor))
