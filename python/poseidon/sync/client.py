"""This worker's side of a job's synchronisation, whatever the front end: its Session
(job.py), the plan the workers agreed on, one LayerRound per synchronised layer (round.py),
its timeline, and on CUDA the side stream and the thread that hands rounds to the comm core.

A front end (caffe/parallel/syncer.py for a Caffe Solver, poseidon/torch/ddp.py for an
nn.Module) decides *when* rounds start and end — from its framework's hooks — and what a
layer's gradient is; everything else is here, written once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from poseidon import _C
from poseidon.config import compression_of
from poseidon.sync.factors import FactorLog
from poseidon.sync.job import Session
from poseidon.sync.layout import SyncLayer
from poseidon.sync.local import LocalGroup
from poseidon.sync.measure import measure_scheme_costs
from poseidon.sync.powersgd import seed_draws
from poseidon.sync.powersgd_round import PowerSGDExchange
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
        # PowerSGD: the first Q of each such layer (the same draw on every worker), and the
        # thread that starts a layer's Q round when its P sum is back (powersgd_round.py).
        self.seed_draws: dict[int, int] = {}
        self.continuation: ThreadPoolExecutor | None = None
        # Several workers per machine: this machine's local stage (local.py).
        self.local: LocalGroup | None = None
        config = session.config
        self._closed = False
        if config.workers_per_host > 1:
            try:
                self.local = LocalGroup(self.rank, self.num_workers, config.workers_per_host,
                                        f"{config.token}/{config.coordinator}", device,
                                        self.worker.failure, config.timeout_ms / 1e3)  # fmt: skip
            except BaseException as e:
                # The job ends with this reason (not "worker r is gone"), and this process's
                # comm core and shard stop before it exits.
                session.close(e)
                raise

    @property
    def is_leader(self) -> bool:
        """Whether this worker talks to the comm core for its machine (always, with one
        worker per machine)."""
        return self.local is None or self.local.is_leader

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
    def ranks_by_time(self) -> bool:
        """Whether the coordinator ranks this job's schemes by time (the link's rate is
        known, POSEIDON_LINK_RATE) in sync mode poseidon: then the specs carry measured costs."""
        config = self.session.config
        return config.sync == "poseidon" and config.link_rate > 0

    def measure_costs(self, specs: Sequence[Any], backward_s: dict[int, float]) -> None:
        """Time each candidate scheme's compute at the specs' shapes on this device, and put
        the times and the front end's `backward_s` (layer id -> seconds) in the specs
        (measure.py)."""
        kind, rank = self.session.config.allowance()
        measure_scheme_costs(specs, self.num_workers, compression_of(kind), rank, self.device,
                             backward_s)  # fmt: skip

    def agree_on_plan(self, specs: Sequence[Any]) -> dict[int, str]:
        """Declare this worker's LayerSpecs (poseidon.plan.layer_specs) to the coordinator
        and wait for the plan every worker runs; returns each layer id's scheme, "PS", "SFB",
        "BF16" or "PowerSGD". Raises ValueError when the coordinator plans with another
        compression than this worker's settings ask for."""
        plan = self.worker.plan(list(specs))
        per_host = self.session.config.workers_per_host
        if plan.workers_per_machine != per_host:
            raise ValueError(
                f"worker {self.rank} runs with {per_host} workers per host, but the job's "
                f"coordinator plans with {plan.workers_per_machine}: set "
                "POSEIDON_WORKERS_PER_HOST for the whole job (`poseidon launch "
                "--workers-per-host` does)"
            )
        kind, rank = self.session.config.allowance()
        asked = compression_of(kind)
        ranked = asked != _C.Compression.NONE
        if plan.compression != asked or (ranked and plan.powersgd_rank != rank):
            raise ValueError(
                f"worker {self.rank} asks for compression {kind} (PowerSGD rank {rank}), but the "
                f"job's coordinator plans with {_C.compression_name(plan.compression)} (rank "
                f"{plan.powersgd_rank}): set POSEIDON_COMPRESSION for the whole job (`poseidon "
                "launch` passes its environment to every process)"
            )
        self.plan = plan
        powersgd = [lp.layer_id for lp in plan.layers if lp.scheme == _C.Scheme.POWERSGD]
        # The hook's RandomState(0), one draw per compressed layer in plan order.
        self.seed_draws = dict(zip(powersgd, seed_draws(0, len(powersgd))))
        return {lp.layer_id: _C.scheme_name(lp.scheme) for lp in plan.layers}

    # ----- rounds ---------------------------------------------------------------------------
    def dense_round(
        self, layer: SyncLayer, diff: torch.Tensor,
        replay_compute: Callable[[float], None] | None = None,
    ) -> LayerRound:  # fmt: skip
        """The round of `layer`, whose gradient is the flat float32 range `diff`, under the
        scheme the plan gave it: PS, BF16 or PowerSGD. `replay_compute`: a compute replay's
        device, which spends the plan's estimated seconds of each PowerSGD step."""
        assert self.plan is not None, "agree on the plan first"
        planned = self.plan.find(layer.index)
        scheme = _C.scheme_name(planned.scheme) if planned is not None else "PS"
        exchange = None
        if scheme == "PowerSGD" and self.is_leader:  # the leader compresses its machine's sum
            if self.continuation is None:
                self.continuation = ThreadPoolExecutor(1, "poseidon-powersgd")
            exchange = PowerSGDExchange(self.worker, layer, planned, diff,
                                        seed_draw=self.seed_draws[layer.index],
                                        continuation=self.continuation,
                                        side_stream=self.side_stream,
                                        comm_thread=self.comm_thread,
                                        replay_compute=replay_compute)  # fmt: skip
        return self._add(LayerRound(self.worker, layer, scheme, diff=diff, powersgd=exchange,
                                    device=self.device, side_stream=self.side_stream,
                                    comm_thread=self.comm_thread,
                                    local=self.local))  # fmt: skip

    def compression_state(self) -> dict[str, dict[str, Any]]:
        """This worker's PowerSGD state (error feedback, warm-start Q) per layer name: what
        a snapshot keeps so that a resumed job goes on as if never stopped. Between steps."""
        return {r.name: r.powersgd.state_dict() for r in self.rounds if r.powersgd is not None}

    def load_compression_state(self, state: dict[str, dict[str, Any]]) -> None:
        """Restore `compression_state()`; raises ValueError naming a layer that does not fit
        (nothing is changed then)."""
        mine = {r.name: r.powersgd for r in self.rounds if r.powersgd is not None}
        if not self.is_leader:
            return  # its machine's leader compresses; this worker keeps no PowerSGD state
        if set(state) != set(mine):
            raise ValueError(f"PowerSGD state for layers {sorted(state)}, but this job "
                             f"compresses {sorted(mine)} with PowerSGD")  # fmt: skip
        saved = {name: exchange.state_dict() for name, exchange in mine.items()}
        try:
            for name, exchange in mine.items():
                exchange.load_state_dict(state[name])
        except ValueError as e:
            for name, exchange in mine.items():
                exchange.load_state_dict(saved[name])
            raise ValueError(f"PowerSGD state of layer {name!r}: {e}") from None

    def sfb_round(self, layer: SyncLayer, factors: FactorLog, capacity_rows: int,
                  rebuild: Rebuild) -> LayerRound:  # fmt: skip
        """An SFB round for `layer`: `factors` collects its (dy, x), at most `capacity_rows`
        rows per step; `rebuild(dy, x, scale)` adds the mean gradient into the weight's."""
        return self._add(LayerRound(self.worker, layer, "SFB", factors=factors,
                                    capacity_rows=capacity_rows, rebuild=rebuild,
                                    device=self.device, side_stream=self.side_stream,
                                    comm_thread=self.comm_thread,
                                    local=self.local))  # fmt: skip

    def _add(self, layer_round: LayerRound) -> LayerRound:
        layer_round.clock = self.now_us
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
            for thread in (self.comm_thread, self.continuation):
                if thread is not None:
                    thread.shutdown(wait=False)
            if self.local is not None:
                self.local.close()
            if self.timeline is not None:
                self.timeline.close()  # what it saw, also of a job that failed
