"""Rank 0's tensors to every worker, bit for bit: parameters and buffers at the start, and
buffers before every training forward (DDP's broadcast_buffers).

The bytes go through an SFB all-gather of the plan's broadcast unit in which only rank 0
sends: a copy, never an addition, so that integer buffers (BatchNorm's num_batches_tracked),
NaN payloads and -0.0 arrive as they left. Tensors of any dtype and device are sent as their
raw bytes, padded to whole float32 words, in pieces of the unit's capacity (its factor
buffers are 2 × P1 of that size on every worker, so it is kept small: BROADCAST_FLOATS).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

BROADCAST_FLOATS = 1 << 20  # 4 MiB per piece


class Broadcaster:
    """The broadcast unit `layer_id` of `worker`, whose capacity is `capacity` floats."""

    def __init__(self, worker, layer_id: int, capacity: int) -> None:  # type: ignore[no-untyped-def]
        self.worker = worker
        self.layer_id = layer_id
        self.capacity = capacity
        self.iteration = 0  # this unit's own round counter (consecutive, as the core wants)

    def from_rank0(self, tensors: Sequence[torch.Tensor]) -> None:
        """Overwrite `tensors` (in place) with rank 0's values."""
        tensors = [t for t in tensors if t.numel()]
        if not tensors:
            return
        sizes = [t.numel() * t.element_size() for t in tensors]
        total = sum(sizes)
        sending = self.worker.rank == 0
        payload = None
        if sending:
            payload = np.zeros(math.ceil(total / 4) * 4, np.uint8)
            offset = 0
            for t, size in zip(tensors, sizes):
                payload[offset : offset + size] = _bytes_of(t)
                offset += size
        received = np.empty(math.ceil(total / 4) * 4, np.uint8)
        words = received.size // 4
        for first in range(0, words, self.capacity):
            last = min(words, first + self.capacity)
            piece = (payload[first * 4 : last * 4].view(np.float32) if sending
                     else np.zeros(0, np.float32))  # fmt: skip
            handle = self.worker.allgather(self.layer_id, self.iteration, piece)
            handle.wait()
            got = np.asarray(self.worker.factor(self.layer_id, self.iteration, 0))
            self.iteration += 1
            if got.size != last - first:
                raise RuntimeError(
                    f"broadcast piece of {got.size} floats from rank 0, expected "
                    f"{last - first}: the ranks' models differ"
                )
            received[first * 4 : last * 4] = got.view(np.uint8)
        offset = 0
        for t, size in zip(tensors, sizes):
            _write_bytes(t, received[offset : offset + size])
            offset += size


def _bytes_of(tensor: torch.Tensor) -> np.ndarray:
    flat = tensor.detach().reshape(-1).contiguous().cpu()
    return flat.view(torch.uint8).numpy()


def _write_bytes(tensor: torch.Tensor, data: np.ndarray) -> None:
    values = torch.from_numpy(data.copy()).view(tensor.dtype).reshape(tensor.shape)
    with torch.no_grad():
        tensor.copy_(values)
