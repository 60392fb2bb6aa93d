"""Rank 0's tensors to every worker, bit for bit, two ways.

`broadcast_through_rounds`: a job's float32 weights through the layers' own channels, with
no memory of their own (the Caffe engine's start: Caffe's NCCL bcast). A PS layer's round
pushes rank 0's weights and the other workers' zeros: the sum is rank 0's weights, bit for
bit (x + 0 = x). An SFB layer's weights cross as all-gathers in which only rank 0 sends, in
pieces of the layer's factor size, so that the factor buffers (2 × P1 of them per layer)
never have to hold a whole weight matrix: VGG19-22K's fc6 at P1 = 16 would need 13 GB of
them per worker.

`Broadcaster`: any tensors, of any dtype and device (poseidon.torch: parameters and buffers
at the start, and buffers before every training forward, DDP's broadcast_buffers), through
an SFB all-gather of a broadcast unit of their own in which only rank 0 sends: a copy, never
an addition, so that integer buffers (BatchNorm's num_batches_tracked), NaN payloads and
-0.0 arrive as they left. They go as raw bytes, padded to whole float32 words, in pieces of
the unit's capacity (its factor buffers are 2 × P1 of that size on every worker, so it is
kept small: BROADCAST_FLOATS).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from poseidon.sync.local import LocalGroup
from poseidon.sync.round import LayerRound

BROADCAST_FLOATS = 1 << 20  # 4 MiB per piece


def broadcast_through_rounds(
    rounds: Sequence[LayerRound], weights: Sequence[torch.Tensor], rank: int, iteration: int
) -> None:
    """Overwrite each round's layer weights `weights[i]` (a flat float32 tensor) with rank
    0's, through the rounds' own channels. Every worker passes the same rounds in the same
    order. PS rounds run at `iteration`; an SFB layer cut into n pieces runs its pieces at
    iteration + 1, follows them either way. With several workers per machine (the rounds'
    `local`), the machines' leaders do this among themselves, then each spreads the weights
    inside its machine."""
    local = rounds[0].local if rounds else None
    if local is None or local.is_leader:
        _between_workers(rounds, weights, rank, iteration)
    if local is not None:
        for data in weights:
            local.wait(local.spread(data), "the initial weights' spread")


def _between_workers(rounds: Sequence[LayerRound], weights: Sequence[torch.Tensor], rank: int,
                     iteration: int) -> None:  # fmt: skip
    ps = [(r, w) for r, w in zip(rounds, weights) if r.staging is not None]
    sfb = [(r, w) for r, w in zip(rounds, weights) if r.staging is None]
    for r, data in ps:
        r.diff.copy_(data if rank == 0 else torch.zeros_like(data))
        r.staging.to_host()  # type: ignore[union-attr]
        r.staging.wait_host()  # type: ignore[union-attr]
        r.handle = r.worker.push_pull(r.index, iteration)
    pieces = [math.ceil(w.numel() / r.factor_floats) for r, w in sfb]
    for piece in range(max(pieces, default=0)):
        for (r, data), count in zip(sfb, pieces):
            if piece >= count:
                continue
            begin = piece * r.factor_floats
            end = min(data.numel(), begin + r.factor_floats)
            payload = data[begin:end].cpu().numpy() if rank == 0 else np.zeros(0, np.float32)
            at = iteration - count + 1 + piece
            handle = r.worker.allgather(r.index, at, payload)
            handle.wait()
            received = torch.from_numpy(np.array(r.worker.factor(r.index, at, 0)))
            data[begin:end].copy_(received.to(data.device))
    for r, data in ps:
        r.handle.wait()
        r.handle = None
        r.staging.to_device()  # type: ignore[union-attr]
        data.copy_(r.diff)
        r.diff.zero_()


class Broadcaster:
    """The broadcast unit `layer_id` of `worker`, whose capacity is `capacity` floats; it
    registers the unit with the comm core. With `local` (several workers per machine) the
    machines' leaders run the unit and each spreads what it received inside its machine."""

    def __init__(self, worker, layer_id: int, capacity: int,  # type: ignore[no-untyped-def]
                 local: LocalGroup | None = None) -> None:  # fmt: skip
        self.worker = worker
        self.layer_id = layer_id
        self.capacity = capacity
        self.local = local
        self.iteration = 0  # this unit's own round counter (consecutive, as the core wants)
        if local is None or local.is_leader:
            worker.register_sfb_layer(layer_id, capacity)

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
        if self.local is None or self.local.is_leader:
            self._between_workers(payload, received)
        if self.local is not None:
            spread = torch.from_numpy(received)
            if self.local.backend == "nccl":
                spread = spread.cuda()
            self.local.wait(self.local.spread(spread), "a broadcast's spread")
            received = spread.cpu().numpy()
        offset = 0
        for t, size in zip(tensors, sizes):
            _write_bytes(t, received[offset : offset + size])
            offset += size

    def _between_workers(self, payload: np.ndarray | None, received: np.ndarray) -> None:
        """Rank 0's `payload` into every worker's `received`, through the unit."""
        words = received.size // 4
        for first in range(0, words, self.capacity):
            last = min(words, first + self.capacity)
            piece = (payload[first * 4 : last * 4].view(np.float32) if payload is not None
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


def _bytes_of(tensor: torch.Tensor) -> np.ndarray:
    flat = tensor.detach().reshape(-1).contiguous().cpu()
    return flat.view(torch.uint8).numpy()


def _write_bytes(tensor: torch.Tensor, data: np.ndarray) -> None:
    values = torch.from_numpy(data.copy()).view(tensor.dtype).reshape(tensor.shape)
    with torch.no_grad():
        tensor.copy_(values)
