"""One synchronised layer's round: its gradient (or its sufficient factors) out to the comm
core the moment its backward is done, and the sum of every worker's back.

PS: the layer's gradient is a flat float32 range `diff` (Caffe: a view of Net.param_diff;
poseidon.torch: a buffer the unit's .grad tensors are copied into), registered with the comm
core once (on CUDA through pinned host staging: Note [GPU path] in staging.py), pushed to
the shards and pulled back summed; `finish` leaves the MEAN in `diff`.

BF16: as PS; the comm core rounds the gradient to 16 bits on the wire and sums in fp32
(docs/communication.md §2, "Parts, BF16 and PowerSGD"). PowerSGD: the layer's gradient
range goes through its PowerSGDExchange (powersgd_round.py), two sums one after the other;
`finish` leaves the mean.

SFB: the layer's FactorLog (factors.py) is packed and all-gathered among the workers;
`finish` hands every worker's factors, stacked on the device, to the front end's `rebuild`,
which adds scale·dyᵀ·x into its own weight's gradient (only the front end knows how its
weight is stored).

Both are asynchronous: on CPU the comm core is called from the caller's thread; on CUDA a
comm thread waits for the device→host copy alone and then calls the core, so the training
thread goes on queuing backward kernels. A round is not thread-safe: one thread (training,
or autograd's) submits and finishes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from poseidon.sync import local_round
from poseidon.sync.factors import FactorLog, stack_factors
from poseidon.sync.layout import SyncLayer
from poseidon.sync.local import LocalGroup
from poseidon.sync.powersgd_round import PowerSGDExchange
from poseidon.sync.staging import GradientStaging, to_host_async
from poseidon.timeline import Timeline

_log = logging.getLogger("poseidon.sync")
# How far an SFB layer's factors may grow past the rows it was planned with (gradient
# accumulation over up to this many micro-batches without a hint).
FACTOR_GROWTH = 16

# dy (R × out), x (R × in), scale: add scale·dyᵀ·x (and scale·Σ dy) into the gradients.
Rebuild = Callable[[torch.Tensor, torch.Tensor, float], None]


class FactorOverflowError(RuntimeError):
    """A step brought more rows of sufficient factors than the layer was planned with."""


class LayerRound:
    """The round of one layer of `worker` (a connected `_C.Worker`) under `scheme` ("PS",
    "SFB", "BF16" or "PowerSGD").

    PS and BF16 take `diff`, the layer's flat gradient range; PowerSGD its `powersgd`
    exchange (which holds the range). SFB takes `factors` (the layer's
    FactorLog), `capacity_rows` (the most rows of factors one worker sends in a step: the
    comm core's buffers are sized for it), `rebuild` and the `device` the layer's weight
    lives on (where the factors are stacked for the rebuild GEMM). With `local`, this
    worker's machine of several workers, the round goes through its local stage
    (local_round.py): only the machine's leader registers with the comm core (and only it
    holds a PowerSGD exchange)."""

    def __init__(
        self,
        worker: Any,
        layer: SyncLayer,
        scheme: str,
        *,
        diff: torch.Tensor | None = None,
        factors: FactorLog | None = None,
        capacity_rows: int = 0,
        rebuild: Rebuild | None = None,
        powersgd: PowerSGDExchange | None = None,
        device: torch.device | None = None,
        side_stream: torch.cuda.Stream | None = None,
        comm_thread: ThreadPoolExecutor | None = None,
        local: LocalGroup | None = None,
    ) -> None:
        self.worker = worker
        self.local = local
        leader = local is None or local.is_leader
        self.core_handle: Any = None  # local stage: the leader's comm-core handle
        # local stage (local_round.py): this round's reduce or gather, the leader's exchange
        # (a comm-core handle, or PowerSGD's future of one), and its spread's completion
        self.local_work: Any = None
        self.exchange: Any = None
        self.spread_done: Future | None = None
        self.local_times: dict[str, float] = {}
        self.local_factors: local_round.LocalFactors | None = None
        # Now in microseconds: the job's timeline's clock (SyncClient sets it), else monotonic.
        self.clock: Callable[[], float] = lambda: time.perf_counter() * 1e6
        self.layer = layer
        self.scheme = scheme
        self.comm_thread = comm_thread
        self.side_stream = side_stream
        self.handle: Any = None
        self.iteration = -1
        self.submitted = False
        self.submitted_us = 0.0
        self.traffic_seen = (0, 0)  # the comm core's byte counters at the last round's end
        self.staging: GradientStaging | None = None
        self.factors = factors
        self.rebuild = rebuild
        self.capacity_rows = capacity_rows
        self.rows_said = capacity_rows  # the most rows a log line has told of
        self.device = device if device is not None else torch.device("cpu")
        self.powersgd = powersgd
        self.factor_floats = 0
        if scheme in ("PS", "BF16"):  # BF16: the comm core rounds on the wire
            if diff is None:
                raise ValueError(f"layer {layer.name!r}: a {scheme} round needs its gradient "
                                 "range")  # fmt: skip
            self.staging = GradientStaging(diff, side_stream)
            if leader:
                worker.register_layer(layer.index, self.staging.host_array())
        elif scheme == "PowerSGD":
            if powersgd is None and leader:
                raise ValueError(f"layer {layer.name!r}: a PowerSGD round needs its exchange")
            self._diff = diff
        else:
            if factors is None or rebuild is None:
                raise ValueError(f"layer {layer.name!r}: an SFB round needs factors and rebuild")
            # Two slots of P1 buffers of this size (internal/sfb.h): the factors alone, never
            # the layer's weights (those cross in pieces of this size at start: broadcast.py).
            self.factor_floats = max(1, capacity_rows * factors.width)
            # A step may bring more rows than planned (gradient accumulation, an uneven last
            # batch, a K that changes): the buffers grow (Note [factor slots] in
            # internal/sfb.h) up to FACTOR_GROWTH times the plan's rows, or twice the layer's
            # gradient if that is more (what a PS round moves per worker, out and back); the
            # bound keeps every peer's buffers for this layer finite and guards receivers.
            self.factor_limit = max(FACTOR_GROWTH * self.factor_floats, 2 * layer.num_floats)
            if local is not None:  # the machine's gather slots are fixed: no growth
                self.local_factors = local_round.LocalFactors(
                    local, capacity_rows, factors.width, self.device)  # fmt: skip
                self.factor_floats = self.factor_limit = self.local_factors.machine_max_floats
            if leader:
                worker.register_sfb_layer(layer.index, self.factor_floats, self.factor_limit)

    @property
    def index(self) -> int:
        return self.layer.index

    @property
    def name(self) -> str:
        return self.layer.name

    @property
    def diff(self) -> torch.Tensor:
        """A PS, BF16 or PowerSGD layer's gradient range (the device side)."""
        if self.powersgd is not None:
            return self.powersgd.diff
        if self.scheme == "PowerSGD":  # a machine's worker other than its leader
            return self._diff
        assert self.staging is not None, "an SFB round has no gradient range"
        return self.staging.diff

    def exchange_done(self) -> bool:
        """Local stage, the leader: whether this round's exchange is back (or failed)."""
        return local_round.exchange_done(self)

    @property
    def exact(self) -> bool:
        """Whether the round moves the gradient exactly (PS, SFB): only those carry weights."""
        return self.scheme in ("PS", "SFB")

    # ----- sending --------------------------------------------------------------------------
    def submit(self, iteration: int, now_us: float = 0.0) -> None:
        """Hand this step's gradient (or factors) to the comm core for `iteration`
        (asynchronous); `now_us` is the time on the job's timeline, if it keeps one."""
        self.iteration, self.submitted, self.submitted_us = iteration, True, now_us
        index = self.layer.index
        if self.factors is not None and self.factors.rows > self.capacity_rows:
            self._more_rows_than_planned(self.factors.rows)
        if self.local is not None:
            self.core_handle = None
            self.handle = local_round.submit(self, iteration, now_us)
            return
        if self.powersgd is not None:
            self.handle = self.powersgd.submit(iteration)
            return
        if self.staging is not None:
            self.staging.to_host()
            copied: Callable[[], Any] | None = self.staging.wait_host

            def send() -> Any:
                return self.worker.push_pull(index, iteration)
        else:
            assert self.factors is not None
            packed, event = to_host_async(self.factors.pack(), self.side_stream)
            copied = event.synchronize if event is not None else None

            def send() -> Any:
                return self.worker.allgather(index, iteration, packed)

        if self.comm_thread is None:
            self.handle = send()
        else:  # CUDA: a comm thread waits for the copy to host, not the training thread
            self.handle = self.comm_thread.submit(lambda: (copied and copied(), send())[1])

    def _more_rows_than_planned(self, rows: int) -> None:
        """A step with more rows of factors than planned: sent as they are up to
        `factor_limit` (a log line each time the most rows grows), else FactorOverflowError
        naming the layer and why."""
        assert self.factors is not None
        floats = rows * self.factors.width
        if self.local is not None or floats > self.factor_limit:
            why = ("its machine's gather slots are sized for the plan" if self.local is not None
                   else f"{floats} floats of factors, more than {FACTOR_GROWTH} times the "
                        f"plan's and twice the layer's {self.layer.num_floats}-float "
                        "gradient")  # fmt: skip
            raise FactorOverflowError(
                f"{self.layer.name}: {rows} rows of sufficient factors this step, more than the "
                f"{self.capacity_rows} it was planned with ({why})"
            )
        if rows > self.rows_said:
            self.rows_said = rows
            _log.info("%s: %d rows of sufficient factors this step, more than the %d it was "
                      "planned with: sent as they are (%d floats, the gradient is %d)",
                      self.layer.name, rows, self.capacity_rows, floats,
                      self.layer.num_floats)  # fmt: skip

    # ----- receiving ------------------------------------------------------------------------
    def finish(self, num_workers: int, timeline: Timeline | None = None) -> None:
        """Wait for the round and leave the mean of every worker's gradient: in `diff` (PS),
        or added by `rebuild` (SFB). The round goes on `timeline` if there is one. A round
        never submitted is a no-op."""
        if self.handle is None:
            return
        if self.local is not None:
            local_round.finish(self, num_workers, timeline)
            return
        waited_us = timeline.now_us() if timeline is not None else 0.0
        handle = self.handle.result() if isinstance(self.handle, Future) else self.handle
        handle.wait()
        if timeline is not None:
            self.record_core(handle, waited_us, timeline)
        self.handle, self.submitted = None, False
        scale = 1.0 / num_workers
        if self.powersgd is not None:
            self.powersgd.finish(num_workers)  # the mean already
            return
        if self.staging is not None:
            self.staging.to_device()
            if num_workers > 1:  # alone, the sum is the mean: no pass over the gradient
                self.staging.diff.mul_(scale)
            return
        assert self.factors is not None and self.rebuild is not None
        gathered = self.gathered(num_workers)
        if not any(f.size for f in gathered):
            return  # no worker had factors (a layer no forward used this step)
        dy, x = stack_factors(gathered, self.factors.out_features, self.factors.in_features,
                              self.device)  # fmt: skip
        self.rebuild(dy, x, scale)

    def gathered(self, num_workers: int) -> list[np.ndarray]:
        """Every worker's factors of the last finished round, in rank order."""
        return [np.asarray(self.worker.factor(self.layer.index, self.iteration, r))
                for r in range(num_workers)]  # fmt: skip

    def record_core(self, handle: Any, waited_us: float, timeline: Timeline) -> None:
        """The comm core's part of the round (its `handle`) on `timeline`."""
        sent, received = self.worker.traffic().get(self.layer.index, (0, 0))
        traffic = (sent - self.traffic_seen[0], received - self.traffic_seen[1])
        self.traffic_seen = (sent, received)
        timeline.record_round(self.layer.name, handle.timing(), self.submitted_us, waited_us,
                              timeline.now_us(), self.iteration, self.scheme,
                              traffic)  # fmt: skip
