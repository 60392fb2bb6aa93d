"""A job's synchronised layers, as every front end describes them to the core.

A front end (the Caffe engine's caffe/parallel/layout.py, poseidon.torch's units.py) turns
its model into a list of `SyncLayer`s, in the order the next forward needs them (= the comm
core's priority order): which layers move, where each one's gradient lies in the job's
flat gradient layout, and how the cost model sees it (`CommShape`). Everything after that —
the plan (poseidon/plan.py), the rounds (round.py), the all-reduce buckets (buckets.py), the
predictor — reads only these two records, never a Net or an nn.Module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("FC", "conv", "other")


@dataclass(frozen=True)
class CommShape:
    """A layer as the cost model sees it, in the cost model's names (docs/paper.md §4): kind,
    an m×n weight and `rows`, its K for one pass (FC: m outputs, n inputs, rows the batch
    rows of the GEMM; Caffe's InnerProduct Note [M, N, K] maps the engine's names onto
    these)."""

    kind: str
    m: int
    n: int
    rows: int

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "m": self.m, "n": self.n, "rows": self.rows}


@dataclass(frozen=True)
class SyncLayer:
    """One synchronised layer of a job."""

    index: int  # the comm core's layer id (a Caffe net's layer index; module order in torch)
    name: str
    start: int  # its range [start, end) in the job's flat gradient layout
    end: int
    param_ids: tuple[int, ...]  # the front end's parameter ids it owns (Caffe: solver order)
    late: bool  # parameters shared with a later layer: synced after the whole backward
    shape: CommShape  # per pass; K of an iteration is rows × passes (iter_size)
    # The weight at the range's start is stored N × M, not M × N (Caffe's InnerProduct with
    # transpose: true): PowerSGD reorders it (sync/powersgd_round.py).
    transposed: bool = False
    # The compute replay's stand-in: its range holds 1/byte_scale of the real layer's floats
    # (plan.h, Note [byte-scaled layers]); 1 for every real layer.
    byte_scale: int = 1

    @property
    def num_floats(self) -> int:
        return self.end - self.start
