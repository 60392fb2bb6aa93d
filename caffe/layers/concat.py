"""Concat: join the bottoms along `axis` (legacy name concat_dim); all other axes must agree."""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer


@register_layer("Concat")
class ConcatLayer(Layer):
    min_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.concat_param
        if p.HasField("axis") and p.HasField("concat_dim"):
            raise self.error("Either axis or concat_dim should be specified; not both.")
        self.axis_param = p.concat_dim if p.HasField("concat_dim") else p.axis

    def reshape(self, bottom, top):
        first = bottom[0].shape
        try:
            self.axis = bottom[0].canonical_axis(self.axis_param)
        except ValueError as exc:
            raise self.error(f"concat axis: {exc}") from None
        total = 0
        for i, blob in enumerate(bottom):
            shape = blob.shape
            others_agree = len(shape) == len(first) and all(
                a == b for j, (a, b) in enumerate(zip(shape, first)) if j != self.axis
            )
            if not others_agree:
                raise self.error(
                    f"All inputs must have the same shape, except at concat_axis {self.axis}: "
                    f"bottom[0] {first} vs bottom[{i}] {shape}"
                )
            total += shape[self.axis]
        self.sizes = [blob.shape[self.axis] for blob in bottom]
        top[0].reshape([*first[: self.axis], total, *first[self.axis + 1 :]])
        if len(bottom) == 1:  # one input: the bottom's memory, as Caffe does
            top[0].share_data(bottom[0])
            top[0].share_diff(bottom[0])

    def backward_reads_input(self) -> bool:
        return False  # its gradient does not depend on its input

    def forward(self, bottom, top):
        if len(bottom) == 1:
            return
        inputs = [blob.data_tensor for blob in bottom]
        torch.cat(inputs, dim=self.axis, out=top[0].data_tensor)

    def backward(self, top, propagate_down, bottom):
        if len(bottom) == 1:
            return
        pieces = torch.split(top[0].diff_tensor, self.sizes, dim=self.axis)
        for piece, down, blob in zip(pieces, propagate_down, bottom):
            if down:
                blob.set_diff(piece)
