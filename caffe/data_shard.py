"""Which items of a dataset this process reads: Caffe's multi-GPU data rule (spec §8).

Every rank walks the same dataset in the same order and keeps the item at running offset `k`
iff `k % count == rank`; the offset keeps counting across wrap-arounds. In TEST phase nothing
is skipped (only rank 0 tests). With P ranks, one epoch of P·K-item steps therefore sees every
item exactly once across the ranks, which is what makes P workers with batch K train like one
worker with batch P·K.

The hook: file-backed data layers (Data, ImageData, HDF5Data) call `shard_for_phase(phase)`
once, at setup, and keep the result as `layer.shard`. Distributed training must therefore call
`caffe.set_solver_count(P)` and `caffe.set_solver_rank(r)` before it builds its nets (as
pycaffe's multi-process train.py does); a layer's `shard` may also be replaced before its first
forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from caffe.common import solver_count, solver_rank
from caffe.proto import caffe_pb2


@dataclass(frozen=True)
class Shard:
    """Keep the items whose running offset is `rank` modulo `count`."""

    rank: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.rank < self.count:
            raise ValueError(f"invalid data shard: rank {self.rank} of {self.count}")

    def keeps(self, offset: int) -> bool:
        return offset % self.count == self.rank


def shard_for_phase(phase: int) -> Shard:
    """This process's shard in `phase`: (solver_rank, solver_count) in TRAIN, everything in TEST."""
    if phase == caffe_pb2.TRAIN and solver_count() > 1:
        return Shard(solver_rank(), solver_count())
    return Shard()
