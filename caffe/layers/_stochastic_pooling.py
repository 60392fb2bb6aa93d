"""STOCHASTIC pooling (Zeiler & Fergus 2013), as Caffe's Pooling layer defines it.

TRAIN: each window outputs one of its elements, drawn with probability proportional
to its activation (activations are expected to be non-negative, e.g. after ReLU):
with t = U(0,1)·Σwindow, the first element whose running sum reaches t. The gradient
goes to the drawn element only.
TEST: the probability-weighted average Σx² / (FLT_MIN + Σx).

Windows start at (i·stride) and are clipped to the image (no padding). Every window
is materialized with `unfold`: k_h·k_w copies of the input, acceptable for a mode that
is rarely used and never in the hot path of the canonical models.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

FLT_MIN = 1.1754943508222875e-38


class StochasticPooling:
    """Forward/backward of stochastic pooling for one (N, C, H, W) input geometry.

    Stateless: what TRAIN backward needs (the drawn elements) is returned by
    forward_train and handed back by the caller.
    """

    def __init__(
        self,
        in_shape: Sequence[int],
        kernel: Sequence[int],
        stride: Sequence[int],
        out_hw: Sequence[int],
    ) -> None:
        n, c, h, w = in_shape
        self.in_shape = tuple(in_shape)
        self.kernel = tuple(kernel)
        self.stride = tuple(stride)
        self.out_hw = tuple(out_hw)
        # Pad (or crop) on the right/bottom so the windows tile exactly out_hw positions;
        # zero padding adds nothing to a window's sums, which is Caffe's clipping.
        right = [(o - 1) * s + k - size for o, s, k, size in zip(out_hw, stride, kernel, (h, w))]
        self.pads = (0, right[1], 0, right[0])
        self.padded_hw = (h + right[0], w + right[1])
        self.planes = n * c

    def _windows(self, x: torch.Tensor) -> torch.Tensor:
        """(N·C, k_h·k_w, L): one column per output position."""
        plane = F.pad(x.reshape(self.planes, 1, *self.in_shape[2:]), self.pads)
        return F.unfold(plane, self.kernel, stride=self.stride)

    def _to_input(self, dcols: torch.Tensor) -> torch.Tensor:
        """Sum window gradients back onto the input plane (overlaps add up)."""
        plane = F.fold(dcols, self.padded_hw, self.kernel, stride=self.stride)
        return F.pad(plane, [-p for p in self.pads]).reshape(self.in_shape)

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The drawn activations and, for backward, which window element each one is."""
        cols = self._windows(x)
        running = cols.cumsum(dim=1)
        threshold = torch.rand_like(running[:, -1:]) * running[:, -1:]
        reached = running >= threshold
        last = cols.shape[1] - 1
        choice = torch.where(reached.any(dim=1, keepdim=True),
                             reached.to(torch.int8).argmax(dim=1, keepdim=True),
                             torch.full_like(threshold, last, dtype=torch.long))  # fmt: skip
        y = cols.gather(1, choice).reshape(*self.in_shape[:2], *self.out_hw)
        return y, choice

    def backward_train(self, dy: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
        dy = dy.reshape(self.planes, 1, -1)
        window = self.kernel[0] * self.kernel[1]
        dcols = dy.new_zeros(self.planes, window, dy.shape[2]).scatter_(1, choice, dy)
        return self._to_input(dcols)

    def forward_test(self, x: torch.Tensor) -> torch.Tensor:
        cols = self._windows(x)
        weighted = (cols * cols).sum(dim=1) / (cols.sum(dim=1) + FLT_MIN)
        return weighted.reshape(*self.in_shape[:2], *self.out_hw)

    def backward_test(self, dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The exact gradient of the TEST output (Caffe itself has none for this phase)."""
        # d/dx_i of Q/S with S = FLT_MIN + Σx, Q = Σx²: (2·x_i·S − Q) / S².
        cols = self._windows(x)
        total = cols.sum(dim=1, keepdim=True) + FLT_MIN
        squares = (cols * cols).sum(dim=1, keepdim=True)
        dy = dy.reshape(self.planes, 1, -1)
        return self._to_input(dy * (2 * cols * total - squares) / (total * total))
