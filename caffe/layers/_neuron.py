"""NeuronLayer: the base of elementwise layers y = f(x) (one bottom, one top, same shape).

Forward writes y into the top's memory and backward writes dx into the bottom's diff
memory (blobs keep their memory, caffe/blob.py). What backward reads is what BVLC's
reads, at backward time:
- y is the top's data *now*: when a later in-place layer has overwritten the blob
  (LRN → in-place ReLU, Sigmoid → in-place Scale), the gradient is computed from the
  values it left there, as in BVLC (docs/engine.md, "In-place layers").
- x is the bottom's data, which no later layer overwrites - unless this layer runs in
  place, where forward itself overwrites x with y. A layer whose gradient needs x
  (`keeps_input`) then keeps a private copy, as BVLC's PReLU does; for BNLL, Log, Clip
  and Power BVLC reads the overwritten buffer instead, which is not their gradient (and
  refuses AbsVal in place).

Subclasses write `activate(x, out)` and `gradient(x, y, dy, out)`; `out` may be the very
tensor x (or dy) when the layer runs in place, so they compute elementwise, or finish
reading their inputs before writing out. x is None when the layer runs in place and
does not keep it. `setup` reads their parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from caffe.blob import Blob
from caffe.layer import Layer


class NeuronLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1
    keeps_input = True  # whether gradient() needs x when the layer runs in place

    def reshape(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        top[0].reshape(bottom[0].shape_tuple)

    def activate(self, x: torch.Tensor, out: torch.Tensor) -> None:
        raise NotImplementedError(f"{type(self).__name__}.activate")

    def gradient(
        self, x: torch.Tensor | None, y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__}.gradient")

    def forward(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        x = bottom[0].data_tensor
        if top[0] is not bottom[0]:
            self._kept_input: torch.Tensor | None = x  # the bottom's memory: stays x
        elif self.keeps_input and self.need_backward:
            self._kept_input = x.clone()  # forward overwrites x with y just below
        else:
            self._kept_input = None
        self._forwarded = True
        self.activate(x, top[0].data_tensor)

    def backward(
        self, top: Sequence[Blob], propagate_down: Sequence[bool], bottom: Sequence[Blob]
    ) -> None:
        if not propagate_down[0]:
            return
        x, y = self.kept_tensors(top)
        self.gradient(x, y, top[0].diff_tensor, bottom[0].diff_tensor)

    def kept_tensors(self, top: Sequence[Blob]) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(x or None, y): the input of the last forward pass and the top's data now."""
        if not getattr(self, "_forwarded", False):
            raise self.error("backward called without a forward pass")
        return self._kept_input, top[0].data_tensor
