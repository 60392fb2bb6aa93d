"""Slice: cut the bottom along `axis` (legacy slice_dim) into the tops.

slice_point gives the cut positions (one fewer than the tops, strictly increasing,
inside the axis); without it the axis is split into equal parts.
"""

from __future__ import annotations

from itertools import pairwise

import torch

from caffe.layer import Layer, register_layer


@register_layer("Slice")
class SliceLayer(Layer):
    exact_num_bottom = 1
    min_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.slice_param
        if p.HasField("axis") and p.HasField("slice_dim"):
            raise self.error("Either axis or slice_dim should be specified; not both.")
        self.axis_param = p.slice_dim if p.HasField("slice_dim") else p.axis
        self.slice_points = list(p.slice_point)

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        try:
            self.axis = bottom[0].canonical_axis(self.axis_param)
        except ValueError as exc:
            raise self.error(f"slice axis: {exc}") from None
        length = shape[self.axis]
        if self.slice_points:
            if len(self.slice_points) != len(top) - 1:
                raise self.error(
                    f"{len(self.slice_points)} slice_point values for {len(top)} tops: give "
                    f"one fewer slice_point than tops"
                )
            bounds = [0, *self.slice_points, length]
            if any(a >= b for a, b in pairwise(bounds)):
                raise self.error(
                    f"slice_point {self.slice_points} must be strictly increasing and inside "
                    f"(0, {length}) for axis {self.axis} of bottom {shape}"
                )
            self.sizes = [b - a for a, b in pairwise(bounds)]
        else:
            if length % len(top):
                raise self.error(
                    f"Number of top blobs ({len(top)}) should evenly divide input slice axis "
                    f"({length}) of bottom {shape}"
                )
            self.sizes = [length // len(top)] * len(top)
        for blob, size in zip(top, self.sizes):
            blob.reshape([*shape[: self.axis], size, *shape[self.axis + 1 :]])
        if len(top) == 1:  # one output: the bottom's memory, as Caffe does
            top[0].share_data(bottom[0])
            top[0].share_diff(bottom[0])

    def backward_reads_input(self) -> bool:
        return False  # its gradient does not depend on its input

    def forward(self, bottom, top):
        if len(top) == 1:
            return
        pieces = torch.split(bottom[0].data_tensor, self.sizes, dim=self.axis)
        for blob, piece in zip(top, pieces):
            blob.set_data(piece)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0] or len(top) == 1:
            return
        diffs = [blob.diff_tensor for blob in top]
        torch.cat(diffs, dim=self.axis, out=bottom[0].diff_tensor)
