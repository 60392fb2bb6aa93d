"""Bias: y = x + b, with b broadcast over bottom[0] from `axis` on. b is a learnable blob of
shape bottom[0].shape[axis : axis + num_axes] (num_axes −1: to the end; filler default 0),
or a second bottom of any shape matching bottom[0] there (then it gets the gradient).

`broadcast_geometry` is shared with Scale, which applies its factor the same way.
"""

from __future__ import annotations

import math

import torch

from caffe.blob import Blob
from caffe.fillers import fill
from caffe.layer import Layer, register_layer


def operand_shape(layer: Layer, bottom: Blob, axis: int, num_axes: int) -> list[int]:
    """Shape of a learnable operand applied from `axis` over `num_axes` axes (−1: the rest)."""
    if num_axes < -1:
        raise layer.error(f"num_axes must be non-negative, or -1 to extend to the end of "
                          f"bottom[0], got {num_axes}")  # fmt: skip
    try:
        start = bottom.canonical_axis(axis)
    except ValueError as e:
        raise layer.error(f"axis: {e}") from None
    if num_axes == -1:
        return bottom.shape[start:]
    if bottom.num_axes < start + num_axes:
        raise layer.error(f"the operand's shape extends past bottom[0]'s shape {bottom.shape} "
                          f"when applied from axis {start} over {num_axes} axes")  # fmt: skip
    return bottom.shape[start : start + num_axes]


def broadcast_geometry(
    layer: Layer, bottom: Blob, operand: list[int], axis: int
) -> tuple[int, int, int]:
    """(outer, dim, inner): bottom viewed as outer × dim × inner with the operand over dim."""
    try:
        start = 0 if not operand else bottom.canonical_axis(axis)
    except ValueError as e:
        raise layer.error(f"axis: {e}") from None
    shape = bottom.shape
    covered = shape[start : start + len(operand)]
    if covered != operand:
        raise layer.error(f"operand shape {operand} does not match bottom[0] shape {shape} "
                          f"from axis {start}")  # fmt: skip
    return (math.prod(shape[:start]), math.prod(operand),
            math.prod(shape[start + len(operand) :]))  # fmt: skip


@register_layer("Bias")
class BiasLayer(Layer):
    min_bottom = 1
    max_bottom = 2
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.bias_param
        if len(bottom) > 1:
            return
        shape = operand_shape(self, bottom[0], p.axis, p.num_axes)
        if self.blobs:
            if len(self.blobs) != 1 or self.blobs[0].shape != shape:
                got = [b.shape for b in self.blobs]
                raise self.error(f"given blobs have shapes {got}, expected [{shape}]")
            return
        fill(self.blobs.add_blob(*shape), p.filler)

    def _operand(self, bottom) -> Blob:
        return bottom[1] if len(bottom) > 1 else self.blobs[0]

    def reshape(self, bottom, top):
        self.geometry = broadcast_geometry(self, bottom[0], self._operand(bottom).shape,
                                           self.layer_param.bias_param.axis)  # fmt: skip
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        outer, dim, inner = self.geometry
        x = bottom[0].data_tensor.view(outer, dim, inner)
        b = self._operand(bottom).data_tensor.reshape(1, dim, 1)
        torch.add(x, b, out=top[0].data_tensor.view(outer, dim, inner))

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff_tensor
        two_bottoms = len(bottom) > 1
        if propagate_down[1] if two_bottoms else self.param_propagate_down[0]:
            outer, dim, inner = self.geometry
            grad = dy.reshape(outer, dim, inner).sum(dim=(0, 2))
            if two_bottoms:
                bottom[1].set_diff(grad.reshape(bottom[1].shape_tuple))
            else:
                self.blobs[0].diff_tensor.add_(grad.reshape(self.blobs[0].shape_tuple))
        if propagate_down[0]:
            bottom[0].set_diff(dy)  # a copy (in place: the same memory, nothing to do)
