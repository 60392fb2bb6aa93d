"""This worker's side of a job's synchronisation, whatever the front end: its Session
(job.py), the plan the workers agreed on, one LayerRound per synchronised layer (round.py),
its timeline, and on CUDA the side stream and the thread that hands rounds to the comm core.

A front end (caffe/parallel/syncer.py for a Caffe Solver, poseidon/torch/ddp.py for an
nn.Module) decides *when* rounds start and end — from its framework's hooks — and what a
layer's gradient is; everything else is here, written once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from poseidon import _C
from poseidon.sync.factors import FactorLog
from poseidon.sync.job import Session
from poseidon.sync.layout import SyncLayer
from poseidon.sync.round import LayerRound, Rebuild
from poseidon.timeline import Timeline


class SyncClient:
    """The client of `session` for a model on `device`; `timeline` records every round (the
    job's POSEIDON_TIMELINE: `SyncClient.timeline_of(config)`)."""

    def __init__(self, session: Session, device: torch.device,
                 timeline: Timeline | None = None) -> None:  # fmt: skip
        self.session = session
        self.worker = session.worker
        self.rank: int = session.worker.rank
        self.num_workers: int = session.worker.num_workers
        self.device = device
        self.timeline = timeline
        on_cuda = device.type == "cuda"
        self.side_stream = torch.cuda.Stream(device=device) if on_cuda else None
        # One thread: it hands layers to the (asynchronous) comm core in submission order.
        self.comm_thread = ThreadPoolExecutor(1, "poseidon-submit") if on_cuda else None
        self.plan: _C.Plan | None = None
        self.rounds: list[LayerRound] = []
        self._closed = False

    @staticmethod
    def timeline_of(config: Any) -> Timeline | None:
        """The job's timeline (POSEIDON_TIMELINE), or None."""
        if not config.timeline:
            return None
        return Timeline(config.timeline, config.rank, config.num_workers)

    def now_us(self) -> float:
        """The time on the job's timeline (a monotonic clock when it keeps none)."""
        return self.timeline.now_us() if self.timeline is not None else time.perf_counter() * 1e6

    # ----- the plan -------------------------------------------------------------------------
    def agree_on_plan(self, specs: Sequence[Any]) -> dict[int, str]:
        """Declare this worker's LayerSpecs (poseidon.plan.layer_specs) to the coordinator
        and wait for the plan every worker runs; returns each layer id's scheme, "PS" or
        "SFB"."""
        self.plan = self.worker.plan(list(specs))
        return {lp.layer_id: "SFB" if lp.scheme == _C.Scheme.SFB else "PS"
                for lp in self.plan.layers}  # fmt: skip

    # ----- rounds ---------------------------------------------------------------------------
    def ps_round(self, layer: SyncLayer, diff: torch.Tensor) -> LayerRound:
        """A PS round for `layer`, whose gradient is the flat float32 range `diff`."""
        return self._add(LayerRound(self.worker, layer, "PS", diff=diff, device=self.device,
                                    side_stream=self.side_stream,
                                    comm_thread=self.comm_thread))  # fmt: skip

    def sfb_round(self, layer: SyncLayer, factors: FactorLog, capacity_rows: int,
                  rebuild: Rebuild) -> LayerRound:  # fmt: skip
        """An SFB round for `layer`: `factors` collects its (dy, x), at most `capacity_rows`
        rows per step; `rebuild(dy, x, scale)` adds the mean gradient into the weight's."""
        return self._add(LayerRound(self.worker, layer, "SFB", factors=factors,
                                    capacity_rows=capacity_rows, rebuild=rebuild,
                                    device=self.device, side_stream=self.side_stream,
                                    comm_thread=self.comm_thread))  # fmt: skip

    def _add(self, layer_round: LayerRound) -> LayerRound:
        self.rounds.append(layer_round)
        return layer_round

    def finish(self, layer_round: LayerRound) -> None:
        """Wait for `layer_round` and leave the mean gradient (see LayerRound.finish)."""
        layer_round.finish(self.num_workers, self.timeline)

    def traffic(self) -> dict[int, tuple[int, int]]:
        """Bytes (sent, received) so far per layer id."""
        return dict(self.worker.traffic())

    # ----- the end --------------------------------------------------------------------------
    def close(self, error: BaseException | None = None, timeout_s: float = 60.0) -> None:
        """Leave the job: cleanly (the caller has finished every round), or with `error`,
        aborting it (Session.close). The timeline is written either way."""
        if self._closed:
            return
        self._closed = True
        try:
            self.session.close(error, timeout_s)
        finally:
            if self.comm_thread is not None:
                self.comm_thread.shutdown(wait=False)
            if self.timeline is not None:
                self.timeline.close()  # what it saw, also of a job that failed
