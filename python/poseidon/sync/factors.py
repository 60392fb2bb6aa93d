"""Sufficient factors of a fully-connected layer (the paper's SFB; docs/design.md §3).

With a weight of `out_features` × `in_features` and R rows in a step (the batch; every
pass of iter_size or gradient accumulation, every call of the layer, stacked), the weight
gradient is dyᵀ·x: a sum of R rank-1 terms. A worker ships its factors — the output
gradient dy (R × out) and the input x (R × in) — instead of the out × in gradient, and every
worker rebuilds the mean gradient of all P1 workers with one GEMM over the stacked factors.
Exact, not lossy.

Wire layout of one worker's buffer (float32): all dy rows, then all x rows:
[dy (R × out) | x (R × in)], R = len / (out + in).

Both front ends collect with `FactorLog`: the Caffe engine's InnerProduct hands over each
pass's (dy, x) (`keep_copies`, its sufficient_factor_sink); poseidon.torch keeps an
nn.Linear's input in forward and pairs it with its dy in backward (`remember`/`received`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class FactorLog:
    """One SFB layer's factors for the current step. Not thread-safe: a model's forward and
    backward do not run at once."""

    out_features: int
    in_features: int
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    waiting: dict[int, torch.Tensor] = field(default_factory=dict)  # call key -> x
    next_key: int = 0

    @property
    def width(self) -> int:
        """Floats per row of the wire layout."""
        return self.out_features + self.in_features

    def add(self, dy: torch.Tensor, x: torch.Tensor) -> None:
        """Keep one pass's pair as given (rows × out, rows × in)."""
        self.pairs.append((dy.reshape(-1, self.out_features), x.reshape(-1, self.in_features)))

    def keep_copies(self, dy: torch.Tensor, x: torch.Tensor) -> None:
        """Keep copies of one pass's pair: the Caffe engine hands over views of its blobs,
        which the next pass (iter_size > 1) overwrites before pack() runs."""
        self.add(dy.clone(), x.clone())

    def remember(self, x: torch.Tensor) -> int:
        """Keep a forward call's input until its dy comes; returns the call's key."""
        key, self.next_key = self.next_key, self.next_key + 1
        self.waiting[key] = x.reshape(-1, self.in_features)
        return key

    def received(self, key: int, dy: torch.Tensor) -> bool:
        """The call's dy has come; whether no call of the step waits for its dy any more."""
        x = self.waiting.pop(key, None)
        if x is not None:
            self.add(dy.detach(), x)
        return not self.waiting

    @property
    def rows(self) -> int:
        return sum(dy.shape[0] for dy, _ in self.pairs)

    def pack(self) -> torch.Tensor:
        """[dy | x] of every pair as one flat float32 tensor on their device; empties the
        log (the caller moves it to host memory)."""
        if not self.pairs:
            return torch.zeros(0, dtype=torch.float32)
        dy = torch.cat([d for d, _ in self.pairs]).to(torch.float32).reshape(-1)
        x = torch.cat([v for _, v in self.pairs]).to(torch.float32).reshape(-1)
        self.pairs.clear()
        return torch.cat([dy, x])


def stack_factors(
    factors: Sequence[np.ndarray], out_features: int, in_features: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every worker's buffer (rank order) unpacked and stacked: dy (R × out) and x (R × in)
    on `device`, R the rows of all workers together."""
    width = out_features + in_features
    dys, xs = [], []
    for buffer in factors:
        if buffer.size % width:
            raise ValueError(f"factor buffer of {buffer.size} floats is not rows of {width}")
        rows = buffer.size // width
        dys.append(buffer[: rows * out_features].reshape(rows, out_features))
        xs.append(buffer[rows * out_features :].reshape(rows, in_features))
    dy = torch.from_numpy(np.concatenate(dys)).to(device, non_blocking=True)
    x = torch.from_numpy(np.concatenate(xs)).to(device, non_blocking=True)
    return dy, x
