"""Crop: cut bottom[0] to the shape of bottom[1] on the axes from `axis` on.

Axes before `axis` keep bottom[0]'s size; every later axis i takes bottom[1]'s size,
starting at an offset (crop_param.offset: none = 0, one value = the same for every
cropped axis, else one value per cropped axis). bottom[1] only supplies the shape and
gets no gradient.
"""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer


@register_layer("Crop")
class CropLayer(Layer):
    exact_num_bottom = 2
    exact_num_top = 1

    def reshape(self, bottom, top):
        p = self.layer_param.crop_param
        source, reference = bottom[0].shape, bottom[1].shape
        if len(source) != len(reference):
            raise self.error(
                f"bottoms must have the same number of axes: {source} vs reference {reference}"
            )
        try:
            axis = bottom[0].canonical_axis(p.axis)
        except ValueError as exc:
            raise self.error(f"crop_param.axis: {exc}") from None
        cropped = len(source) - axis
        offsets = list(p.offset)
        if len(offsets) > 1 and len(offsets) != cropped:
            raise self.error(
                f"number of offset values specified must be equal to the number of dimensions "
                f"following axis ({len(offsets)} offsets for {cropped} cropped axes)"
            )
        offsets = offsets * cropped if len(offsets) == 1 else offsets or [0] * cropped
        shape = list(source)
        for i, offset in enumerate(offsets, start=axis):
            if offset + reference[i] > source[i]:
                raise self.error(
                    f"invalid crop parameters in dimension {i}: offset {offset} + size "
                    f"{reference[i]} exceeds the input size {source[i]} (bottom {source})"
                )
            shape[i] = reference[i]
        self.window = tuple(
            slice(None) if i < axis else slice(offsets[i - axis], offsets[i - axis] + shape[i])
            for i in range(len(source))
        )
        top[0].reshape(shape)

    def forward(self, bottom, top):
        top[0].set_data(bottom[0].data_tensor[self.window])

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            dx = torch.zeros_like(bottom[0].data_tensor)
            dx[self.window] = top[0].diff_tensor
            bottom[0].set_diff(dx)
        if len(propagate_down) > 1 and propagate_down[1]:
            bottom[1].set_diff(torch.zeros_like(bottom[1].data_tensor))
