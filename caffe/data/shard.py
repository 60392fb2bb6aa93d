"""Which items of a dataset this process reads: Caffe's multi-GPU data rule
(docs/caffe_format.md §8).

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

import logging
import math
from dataclasses import dataclass

from caffe.common import solver_count, solver_rank
from caffe.proto import caffe_pb2

_log = logging.getLogger("caffe")


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

    def cycle(self, records: int) -> int:
        """How many distinct records this rank reads before its first repeats, for a source
        of `records`: its offsets rank, rank + P, ... meet offset rank again (mod records)
        after records / gcd(records, P) of them."""
        return records // math.gcd(records, self.count)


def shard_for_phase(phase: int) -> Shard:
    """This process's shard in `phase`: (solver_rank, solver_count) in TRAIN, everything in TEST."""
    if phase == caffe_pb2.TRAIN and solver_count() > 1:
        return Shard(solver_rank(), solver_count())
    return Shard()


class WrapWarning:
    """Warns once per data layer that its batch is larger than the records it cycles
    through, so that every batch wraps around its source and holds a record twice.

    Caffe wraps silently. Layers call `check(records)` when they learn the source's record
    count (at setup, or at the first wrap-around of a cursor that cannot count ahead); only
    the first call can warn. Safe from the prefetch thread.
    """

    def __init__(self, where: str, source: str, batch_size: int, shard: Shard) -> None:
        self.where = where  # "Layer 'data' (type Data)"
        self.source = source  # "data_param.source 'x_lmdb'"
        self.batch_size = batch_size
        self.shard = shard
        self.checked = False

    def check(self, records: int) -> None:
        if self.checked:
            return
        self.checked = True
        cycle = self.shard.cycle(records)
        if self.batch_size <= cycle:
            return
        shard = ""
        if cycle != records:
            shard = (
                f" (this worker's shard, rank {self.shard.rank} of {self.shard.count}, reads "
                f"{cycle} of them before repeating)"
            )
        _log.warning(
            "%s: batch_size %d is larger than the %d records of %s%s: every batch wraps "
            "around and repeats records",
            self.where, self.batch_size, records, self.source, shard,
        )  # fmt: skip
