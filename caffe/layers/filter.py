"""Filter: keep the items whose selector is nonzero.

Bottoms are K blobs to filter and, last, the selector: N values, shaped (N) or (N, 1, ...).
Top k holds the items n of bottom k with selector[n] != 0, in order, so its first axis is
the number S of selected items (every bottom's first axis must be N). As in Caffe, the
reshape at setup gives the tops all N items, because the selector holds no data yet; every
later reshape (each forward) sizes them to S.

Backward copies each top diff back to the selected items and zeroes the diff of the items
filtered out. The selector gets no gradient: asking for one is an error.
"""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer


@register_layer("Filter")
class FilterLayer(Layer):
    min_bottom = 2
    min_top = 1

    def setup(self, bottom, top):
        if len(top) != len(bottom) - 1:
            raise self.error(
                f"needs one top per filtered bottom: {len(bottom) - 1} filtered bottoms "
                f"(the last bottom is the selector) but {len(top)} tops"
            )
        self._first_reshape = True
        self._indices: torch.Tensor | None = None

    def reshape(self, bottom, top):
        selector = bottom[-1]
        shape = selector.shape
        if not shape or any(d != 1 for d in shape[1:]):
            raise self.error(
                f"Selector blob dimensions must be singletons (1), except the first; the "
                f"selector has shape {shape}"
            )
        for i, blob in enumerate(bottom[:-1]):
            if not blob.shape or blob.shape[0] != shape[0]:
                raise self.error(
                    f"Each bottom should have the same 0th dimension as the selector blob: "
                    f"bottom {i} has shape {blob.shape}, the selector {shape}"
                )
        self._indices = torch.nonzero(selector.data_tensor.reshape(-1)).reshape(-1)
        count = shape[0] if self._first_reshape else int(self._indices.numel())
        self._first_reshape = False
        for blob, source in zip(top, bottom):
            blob.reshape([count, *source.shape[1:]])

    def forward(self, bottom, top):
        for blob, source in zip(top, bottom):
            blob.set_data(source.data_tensor.index_select(0, self._indices))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[-1]:
            raise self.error("Filter Layer cannot backpropagate to filter index inputs")
        for blob, source, down in zip(top, bottom, propagate_down):
            if down:
                dx = torch.zeros_like(source.data_tensor)
                dx.index_copy_(0, self._indices, blob.diff_tensor)
                source.set_diff(dx)
