"""The all-reduce baseline's buckets (allreduce.py): which layers' gradients are reduced
together, in which order. A pure function of the synchronised layers, so the predictor
(poseidon/experiments/predict.py) lays out exactly the buckets the syncer runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from poseidon.sync.layout import SyncLayer

FLOAT_BYTES = 4
DEFAULT_BUCKET_CAP_BYTES = 25 << 20  # DDP's bucket_cap_mb = 25
DEFAULT_FIRST_BUCKET_BYTES = 1 << 20  # DDP's _DEFAULT_FIRST_BUCKET_BYTES


@dataclass
class Bucket:
    """Consecutive synchronised layers whose gradients form one contiguous range."""

    index: int  # launch order
    layers: tuple[SyncLayer, ...]  # in reverse layer order (the order they become ready)
    late: bool  # reduced at on_gradients_ready, after the whole backward
    # Per-iteration state, reset at on_start.
    ready: int = field(default=0, compare=False)
    work: Any = field(default=None, compare=False, repr=False)
    launched_us: float = field(default=0.0, compare=False)
    done_us: float | None = field(default=None, compare=False)

    @property
    def start(self) -> int:
        return self.layers[-1].start

    @property
    def end(self) -> int:
        return self.layers[0].end

    @property
    def num_bytes(self) -> int:
        return (self.end - self.start) * FLOAT_BYTES

    def describe(self) -> str:
        return f"bucket {self.index} (layers {', '.join(x.name for x in self.layers)})"


def bucket_layout(
    layers: Sequence[SyncLayer],
    first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES,
    bucket_cap_bytes: int = DEFAULT_BUCKET_CAP_BYTES,
) -> list[Bucket]:
    """Buckets for `layers` (sync_layout order): the ordinary layers in reverse order, then
    the late ones. A run breaks where the ranges are not adjacent.

    Note [gaps]. A frozen layer (lr_mult 0) between two synchronised ones has a range of
    its own in Net.param_diff; a bucket never spans it. Summing it would be harmless for
    the weights (its rate is zero) but it would put its bytes on the wire every iteration,
    and a frozen layer is often a large pretrained one: DDP skips parameters that need no
    gradient for the same reason. A late layer between two ordinary ones breaks a run too,
    since it is reduced later. Layers without parameters (ReLU, pooling) have empty ranges
    and do not break a run."""
    buckets: list[Bucket] = []
    for late in (False, True):
        run: list[SyncLayer] = []
        for layer in sorted((x for x in layers if x.late == late), key=lambda x: -x.index):
            cap = first_bucket_bytes if not buckets and not late else bucket_cap_bytes
            size = sum(x.num_floats for x in run) * FLOAT_BYTES
            fits = size + layer.num_floats * FLOAT_BYTES <= cap
            if run and not (layer.end == run[-1].start and fits):
                buckets.append(Bucket(len(buckets), tuple(run), late))
                run = []
            run.append(layer)
        if run:
            buckets.append(Bucket(len(buckets), tuple(run), late))
    return buckets
