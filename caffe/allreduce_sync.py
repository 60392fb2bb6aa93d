"""The modern baseline: PyTorch DDP's bucketed ring all-reduce, driven by the Caffe Net.

Same compute as the Poseidon modes, same Solver, same hooks; only the communication
differs. It follows DDP's reducer (torch/nn/parallel/distributed.py, reducer.cpp):

- Buckets: runs of consecutive synchronised layers (caffe.sync_layout, the derivation
  every syncer uses) taken in reverse layer order, the order gradients become ready. The
  first bucket is capped at `first_bucket_bytes` (DDP: 1 MiB) so that communication
  starts early, the others at `bucket_cap_bytes` (DDP: 25 MiB). Each bucket is ONE
  contiguous slice of Net.param_diff: the engine already keeps gradients layer by layer in
  one flat buffer, so the bucket is a view (DDP's `gradient_as_bucket_view`), no copies.
- `after_backward(l)` (last pass of iter_size): once every layer of a bucket is done, and
  every bucket before it has been launched, `dist.all_reduce(slice, async_op=True)` starts
  at once and backward goes on (overlap). Buckets are launched strictly in bucket order, so
  every rank issues the same collectives in the same order by construction.
- `on_gradients_ready`: launch the `late` buckets (layers whose parameters a later layer
  shares: final only after the whole backward), wait for every bucket (with a deadline),
  divide by the world size; then the Solver updates as usual. Like DDP there is no
  overlap with the next forward (that is what Poseidon's WFBP adds).
- The first `on_start` broadcasts rank 0's Net.param_data (Caffe's multi-GPU contract;
  DDP broadcasts module states at construction).

Differences from DDP, on purpose: a bucket never grows past its cap unless one layer alone
is larger (DDP closes a bucket once it reaches the cap, so it may overshoot by a tensor);
the layout is fixed from the net, not rebuilt from the order seen in iteration 1 (a Caffe
net's backward order is its layer order reversed, known in advance).

It relies on the Net and Solver hooks only (never on autograd), so replayed compute, where
layers sleep their profiled times, drives it the same way. It does not import poseidon
(DESIGN §1: only caffe/parallel.py does); a timeline is any object with `now_us()` and
`span(name, lane, start_us, end_us, **args)` (poseidon.timeline.Timeline).
"""

from __future__ import annotations

import datetime
import logging
import re
import time
import zlib
from typing import Any, Protocol

import torch
import torch.distributed as dist

from caffe.allreduce_buckets import (
    DEFAULT_BUCKET_CAP_BYTES,
    DEFAULT_FIRST_BUCKET_BYTES,
    Bucket,
    bucket_layout,
)
from caffe.compute_timeline import attach_compute_timeline
from caffe.errors import DistributedError
from caffe.sync_layout import sync_layout

_log = logging.getLogger("caffe")

DEFAULT_TIMEOUT_S = 120.0  # as POSEIDON_TIMEOUT_MS


class TimelineLike(Protocol):
    def now_us(self) -> float: ...

    def span(self, name: str, lane: str, start_us: float, end_us: float, **args: Any) -> None: ...


# ----- the syncer -----------------------------------------------------------------------------
class AllreduceSync:
    """Attach to `solver` over the initialised process group `group` (default: the world)."""

    def __init__(
        self,
        solver: Any,
        *,
        group: dist.ProcessGroup | None = None,
        bucket_cap_bytes: int = DEFAULT_BUCKET_CAP_BYTES,
        first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        timeline: TimelineLike | None = None,
    ) -> None:
        if not dist.is_initialized():
            raise DistributedError("all-reduce sync needs an initialised torch.distributed "
                                   "process group (see attach_from_environment)")  # fmt: skip
        self.solver = solver
        self.net = solver.net
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.timeout_s = float(timeout_s)
        self.timeline = timeline
        self.iter_size = max(1, int(solver.param.iter_size))
        self.buckets = bucket_layout(sync_layout(self.net), first_bucket_bytes, bucket_cap_bytes)
        self.bucket_of = {x.index: b for b in self.buckets for x in b.layers}
        self.owns_group = False  # set by attach_from_environment: close() destroys it
        self.started = False
        self.pass_index = 0
        self.next_bucket = 0  # the next bucket to launch (they go strictly in order)
        self._closed = False
        self._attach()

    def _attach(self) -> None:
        self.net.before_forward(self._before_forward)
        self.net.after_backward(self._after_backward)
        if self.timeline is not None:
            attach_compute_timeline(self.net, self.timeline, lambda: self.solver.iter)
        self.solver.add_callback(self.on_start, self.on_gradients_ready)

    # ----- solver callbacks -----------------------------------------------------------------
    def on_start(self) -> None:
        if not self.started:
            self.started = True
            self._check_same_layout()
            self._broadcast_initial_weights()
        self.pass_index = 0
        self.next_bucket = 0
        for b in self.buckets:
            b.ready, b.work, b.done_us = 0, None, None

    def on_gradients_ready(self) -> None:
        """Launch what is left (the late buckets) and leave the MEAN gradient everywhere."""
        for b in self.buckets:
            b.ready = len(b.layers)
        self._launch_ready()
        deadline = time.monotonic() + self.timeout_s
        for b in self.buckets:
            waited = self._now()
            self._wait(b.work, deadline, f"all-reduce of {b.describe()}")
            b.work = None
            # DDP divides too; the sum of P workers at batch K over P is the mean gradient
            # of one process at batch P·K.
            self.net.param_diff[b.start : b.end].div_(self.world_size)
            if self.timeline is not None:
                self._record(b, waited)

    # ----- net callbacks ----------------------------------------------------------------------
    def _before_forward(self, layer_index: int) -> None:
        if layer_index == 0:
            self.pass_index += 1

    def _after_backward(self, layer_index: int) -> None:
        if self.pass_index < self.iter_size:
            return  # iter_size > 1: gradients still accumulate
        bucket = self.bucket_of.get(layer_index)
        if bucket is not None and not bucket.late:
            bucket.ready += 1
            self._launch_ready()

    def _launch_ready(self) -> None:
        """Note [in flight]. The backend's threads read and write a launched bucket's range
        while the training thread goes on. Nothing else touches that range until
        on_gradients_ready has waited for it: lower layers' backward writes only their own
        ranges (a sharer writes its owner's range, which is late: launched after the whole
        backward), and the solver reads diffs only after on_gradients_ready. The timeline's
        done callback runs on a backend thread; it only stores a float."""
        while self.next_bucket < len(self.buckets):
            b = self.buckets[self.next_bucket]
            if b.ready < len(b.layers):
                return
            b.launched_us = self._now()
            view = self.net.param_diff[b.start : b.end]
            try:
                b.work = dist.all_reduce(view, group=self.group, async_op=True)
            except RuntimeError as e:
                raise self._error(f"all-reduce of {b.describe()}", e) from None
            if self.timeline is not None:
                b.work.get_future().add_done_callback(
                    lambda _, b=b: setattr(b, "done_us", self._now())
                )
            self.next_bucket += 1

    # ----- start: every worker begins from rank 0's weights ----------------------------------
    def _check_same_layout(self) -> None:
        """Every worker must run the same net from the same iteration: a mismatch is a
        clear error here, not a wrong-size collective that hangs or fails later."""
        ranges = ",".join(f"{b.start}:{b.end}" for b in self.buckets).encode()
        mine = [self.net.param_data.numel(), len(self.buckets), zlib.crc32(ranges),
                int(self.solver.iter)]  # fmt: skip
        local = torch.tensor(mine, dtype=torch.int64, device=self.net.param_data.device)
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        work = dist.all_gather(gathered, local, group=self.group, async_op=True)
        self._wait(work, time.monotonic() + self.timeout_s, "layout check at start")
        for rank, theirs in enumerate(gathered):
            floats, buckets, _, iteration = theirs.tolist()
            if theirs.tolist() != mine:
                raise DistributedError(
                    f"worker {rank} runs a different job than worker {self.rank}: "
                    f"{floats} vs {mine[0]} parameters, {buckets} vs {mine[1]} buckets, "
                    f"iteration {iteration} vs {mine[3]} (every worker needs the same net, "
                    "bucket sizes and --snapshot)"
                )

    def _broadcast_initial_weights(self) -> None:
        """Rank 0's parameters to all, every learnable blob at once (frozen layers too:
        their fillers drew from seed + rank). Solver history needs no broadcast: it is
        zero at start, or restored from the same .solverstate by every worker, which the
        layout check's iteration guards (as in PoseidonSync and Caffe's NCCL bcast)."""
        src = 0 if self.group is None else dist.get_global_rank(self.group, 0)
        work = dist.broadcast(self.net.param_data, src, group=self.group, async_op=True)
        self._wait(work, time.monotonic() + self.timeout_s, "broadcast of rank 0's weights")
        if self.rank == 0:
            _log.info("All-reduce: %d workers, %s backend; initial weights of rank 0 broadcast; "
                      "buckets in launch order:", self.world_size,
                      dist.get_backend(self.group))  # fmt: skip
            for b in self.buckets:
                _log.info("    bucket %-3d %12d bytes  %s%s", b.index, b.num_bytes,
                          ", ".join(x.name for x in b.layers),
                          "  (late: after the whole backward)" if b.late else "")  # fmt: skip

    # ----- waits ------------------------------------------------------------------------------
    def _wait(self, work: Any, deadline: float, what: str) -> None:
        if work is None:
            return
        remaining = max(0.001, deadline - time.monotonic())
        try:
            ok = work.wait(timeout=datetime.timedelta(seconds=remaining))
        except RuntimeError as e:
            raise self._error(what, e) from None
        if ok is False:  # some backends answer False instead of raising
            raise self._error(what, RuntimeError("Operation timed out!"))

    def _error(self, what: str, cause: BaseException) -> DistributedError:
        reason = first_line(cause)
        if "timed out" in reason.lower():
            reason = (f"timed out after {self.timeout_s:g}s (a peer is stalled, or gone "
                      "without closing its connection)")  # fmt: skip
        elif "by peer" in reason:
            reason += " (a peer is gone: see its own last words)"
        return DistributedError(f"worker {self.rank} of {self.world_size}: {what} at iteration "
                                f"{self.solver.iter} failed: {reason}")  # fmt: skip

    def barrier(self, name: str) -> None:
        """Every worker reaches this point (experiments time the same window on all)."""
        work = dist.barrier(group=self.group, async_op=True)
        self._wait(work, time.monotonic() + self.timeout_s, f"barrier {name!r}")

    # ----- end --------------------------------------------------------------------------------
    def close(self, error: BaseException | None = None) -> None:
        """Finish cleanly (destroy the process group this syncer created), or abort: with an
        error, pending collectives are not waited for; this process exits, its connections
        close, and every peer's next all-reduce fails at once naming its bucket."""
        if self._closed:
            return
        self._closed = True
        if error is None:
            for b in self.buckets:
                self._wait(b.work, time.monotonic() + self.timeout_s, f"all-reduce of "
                           f"{b.describe()}")  # fmt: skip
            if self.owns_group and dist.is_initialized():
                dist.destroy_process_group()
        if self.timeline is not None and hasattr(self.timeline, "close"):
            self.timeline.close()

    # ----- timeline ---------------------------------------------------------------------------
    def _now(self) -> float:
        return self.timeline.now_us() if self.timeline is not None else time.perf_counter() * 1e6

    def _record(self, b: Bucket, waited_us: float) -> None:
        now = self._now()
        done = b.done_us if b.done_us is not None else now
        layers = [x.name for x in b.layers]
        self.timeline.span(f"bucket {b.index}", "sync", b.launched_us, done,
                           iteration=self.solver.iter, layers=layers, bytes=b.num_bytes,
                           scheme="allreduce")  # fmt: skip
        self.timeline.span(f"bucket {b.index}", "wait", waited_us, now, iteration=self.solver.iter)


def first_line(error: BaseException) -> str:
    """A c10d or gloo message without its C++ frames, source prefix ('[.../pair.cc:537] ')
    or generic advice ('This is typically caused by ...')."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", text)
    return text.split(" This is typically caused")[0]
