"""Split: one bottom feeding several consumers (inserted automatically by the Net)."""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer


@register_layer("Split")
class SplitLayer(Layer):
    exact_num_bottom = 1
    min_top = 1

    def reshape(self, bottom, top):
        for blob in top:
            if not blob.shares_data_with(bottom[0]):  # done already, unless the shape changed
                blob.reshape(bottom[0].shape_tuple)
                blob.share_data(bottom[0])  # every top is the bottom's data (Caffe's ShareData)

    def forward(self, bottom, top):
        """The tops are the bottom's memory: nothing to compute."""

    def flops(self, bottom, top, bottom_need, param_need) -> tuple[float, float]:
        # Backward sums the tops' gradients: (tops - 1) adds per element.
        return 0.0, (len(top) - 1) * bottom[0].count if bottom_need[0] else 0

    def backward_reads_input(self) -> bool:
        return False

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].diff_tensor
        # A top that no consumer sends a gradient (Accuracy, a layer that needs no backward)
        # has no diff memory: it adds zeros, so it is left out rather than allocated.
        diffs = [blob.diff_tensor for blob in top if blob.has_diff]
        if not diffs:
            dx.zero_()
        elif len(diffs) == 1:
            dx.copy_(diffs[0])
        else:
            torch.add(diffs[0], diffs[1], out=dx)
            for diff in diffs[2:]:
                dx.add_(diff)
