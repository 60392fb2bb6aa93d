"""Sufficient factors of an InnerProduct layer (the paper's SFB; DESIGN §3).

With weight N×K (num_output × inputs) and M rows per pass, the weight gradient is
dyᵀ·x: a sum of M rank-1 terms. A worker ships its factors — top diff dy (M×N) and
bottom data x (M×K) — instead of the N×K gradient; every worker rebuilds the mean
gradient of all P1 workers with one GEMM over the stacked factors. Exact, not lossy.

Wire layout of one worker's buffer (float32): all dy rows, then all x rows:
[dy (M×N) | x (M×K)], M = len / (N + K). With iter_size > 1 the rows of every pass
are stacked, so the gradient summed over passes comes out of the same GEMM.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


class FactorCollector:
    """The InnerProduct layer's `sufficient_factor_sink`: keeps each pass's factors."""

    def __init__(self, num_output: int, num_inputs: int) -> None:
        self.num_output = num_output
        self.num_inputs = num_inputs
        self._parts: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, top_diff: torch.Tensor, bottom_data: torch.Tensor) -> None:
        # Copies: these are views of the blobs' memory, which the next pass (iter_size > 1)
        # overwrites before pack() runs.
        self._parts.append((top_diff.clone(), bottom_data.clone()))

    def max_floats(self, rows_per_pass: int, passes: int) -> int:
        return rows_per_pass * passes * (self.num_output + self.num_inputs)

    def pack(self) -> torch.Tensor:
        """This worker's factors as one flat float32 tensor on their device (clears the
        collector); the caller moves it to host memory."""
        if not self._parts:
            return torch.zeros(0, dtype=torch.float32)
        dy = torch.cat([p[0] for p in self._parts]).reshape(-1)
        x = torch.cat([p[1] for p in self._parts]).reshape(-1)
        self._parts.clear()
        return torch.cat([dy, x])


def rebuild_gradients(
    factors: Sequence[np.ndarray],
    num_output: int,
    num_inputs: int,
    weight_diff: torch.Tensor | None,
    bias_diff: torch.Tensor | None,
    transpose: bool,
    scale: float,
) -> None:
    """Add scale·Σ_r dy_rᵀ·x_r into weight_diff and scale·Σ_r Σ rows dy_r into bias_diff.

    `factors` are the P1 workers' buffers (rank order); scale = 1/P1 gives the mean.
    weight_diff is N×K (K×N when the layer is transposed).
    """
    width = num_output + num_inputs
    dys, xs = [], []
    for buffer in factors:
        if buffer.size % width:
            raise ValueError(f"factor buffer of {buffer.size} floats is not rows of {width}")
        rows = buffer.size // width
        dys.append(buffer[: rows * num_output].reshape(rows, num_output))
        xs.append(buffer[rows * num_output :].reshape(rows, num_inputs))
    device = (weight_diff if weight_diff is not None else bias_diff).device
    dy = torch.from_numpy(np.concatenate(dys)).to(device, non_blocking=True)
    if weight_diff is not None:
        x = torch.from_numpy(np.concatenate(xs)).to(device, non_blocking=True)
        if transpose:
            weight_diff.addmm_(x.t(), dy, alpha=scale)
        else:
            weight_diff.addmm_(dy.t(), x, alpha=scale)
    if bias_diff is not None:
        bias_diff.add_(dy.sum(dim=0), alpha=scale)
