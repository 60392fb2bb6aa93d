"""NeuronLayer: the base of elementwise layers y = f(x) (one bottom, one top, same shape).

Neuron layers are commonly run in place (top = bottom): the blob then holds y once forward
returns, and a later in-place layer may already have replaced y by the time backward runs.
So forward keeps what backward needs as tensor references - the output y always (free: it
is the tensor the top adopted), the input x only when the derivative cannot be written
from y (`keeps_input`). Nothing in the engine writes a published tensor in place, so the
kept references still hold forward's values at backward time.

Subclasses write `activate(x) -> y` and `gradient(x, y, dy) -> dx` (x is None unless
`keeps_input`); `setup` reads their parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from caffe.blob import Blob
from caffe.layer import Layer


class NeuronLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1
    keeps_input = True  # whether gradient() needs x; False when dy/dx is a function of y

    def reshape(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        top[0].reshape(bottom[0].shape)

    def activate(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__}.activate")

    def gradient(self, x: torch.Tensor | None, y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__}.gradient")

    def forward(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        x = bottom[0].data_tensor
        y = self.activate(x)
        self._kept_input = x if self.keeps_input else None
        self._kept_output = y
        top[0].set_data(y)

    def backward(
        self, top: Sequence[Blob], propagate_down: Sequence[bool], bottom: Sequence[Blob]
    ) -> None:
        if not propagate_down[0]:
            return
        x, y = self.kept_tensors()
        bottom[0].set_diff(self.gradient(x, y, top[0].diff_tensor))

    def kept_tensors(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(x or None, y) of the last forward pass."""
        y = getattr(self, "_kept_output", None)
        if y is None:
            raise self.error("backward called without a forward pass")
        return self._kept_input, y
