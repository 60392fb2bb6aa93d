"""Split: one bottom feeding several consumers (inserted automatically by the Net)."""

from __future__ import annotations

from caffe.layer import Layer, register_layer


@register_layer("Split")
class SplitLayer(Layer):
    exact_num_bottom = 1
    min_top = 1

    def reshape(self, bottom, top):
        for blob in top:
            blob.reshape(bottom[0].shape)

    def forward(self, bottom, top):
        data = bottom[0].data_tensor
        for blob in top:
            blob.set_data(data)  # every top aliases the bottom's data, as Caffe's ShareData

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        total = top[0].diff_tensor.clone()
        for blob in top[1:]:
            total += blob.diff_tensor
        bottom[0].set_diff(total)
