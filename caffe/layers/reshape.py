"""Reshape: a new shape for the same memory (no copy).

reshape_param.shape replaces the bottom axes [axis, axis + num_axes) (num_axes -1:
through the last axis; a negative axis counts from the end, -1 being "after the last
axis"). In the new shape, 0 copies the bottom's size at that position and one -1 is
inferred from the element count.
"""

from __future__ import annotations

import math

from caffe.layer import Layer, register_layer


@register_layer("Reshape")
class ReshapeLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("Reshape layer does not allow in-place computation.")
        p = self.layer_param.reshape_param
        self.dims = list(p.shape.dim)
        if self.dims.count(-1) > 1:
            raise self.error(
                f"new shape {self.dims} contains multiple -1 dims; at most a single (1) value "
                f"of -1 may be specified"
            )
        if any(d < -1 for d in self.dims):
            raise self.error(f"new shape {self.dims}: -1 is the only negative size allowed")
        if p.num_axes < -1:
            raise self.error("num_axes must be >= 0, or -1 for all")

    def reshape(self, bottom, top):
        p = self.layer_param.reshape_param
        shape = bottom[0].shape
        n = len(shape)
        start = p.axis + n + 1 if p.axis < 0 else p.axis
        if not 0 <= start <= n:
            raise self.error(f"axis {p.axis} out of range for bottom {shape}")
        end = n if p.num_axes == -1 else start + p.num_axes
        if end > n:
            raise self.error(f"axis {p.axis} + num_axes {p.num_axes} exceeds bottom {shape}")
        new = list(self.dims)
        for i, d in enumerate(new):
            if d == 0:
                if start + i >= n:
                    raise self.error(
                        f"new shape contains a 0 at position {i}, but bottom {shape} has no "
                        f"axis {start + i} to copy"
                    )
                new[i] = shape[start + i]
        top_shape = [*shape[:start], *new, *shape[end:]]
        count = bottom[0].count
        if -1 in new:
            known = math.prod(d for d in top_shape if d != -1)
            if known == 0 or count % known:
                raise self.error(
                    f"bottom count ({count}) must be divisible by the product of the specified "
                    f"dimensions ({known}); bottom {shape}, shape {self.dims}"
                )
            top_shape[start + new.index(-1)] = count // known
        if math.prod(top_shape) != count:
            raise self.error(
                f"output count must match input count: bottom {shape} ({count}) reshaped to "
                f"{top_shape} ({math.prod(top_shape)})"
            )
        top[0].reshape(top_shape)
        top[0].share_data(bottom[0])  # one memory, as Caffe's ShareData/ShareDiff
        top[0].share_diff(bottom[0])

    def forward(self, bottom, top):
        """The top is the bottom's memory: nothing to compute."""

    def backward(self, top, propagate_down, bottom):
        """The top's diff is the bottom's: nothing to compute."""
