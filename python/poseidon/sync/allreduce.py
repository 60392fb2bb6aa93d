"""The modern baseline: PyTorch DDP's bucketed ring all-reduce over torch.distributed, for any
front end whose gradients lie in one flat buffer (the Caffe engine's Net.param_diff).

It follows DDP's reducer (torch/nn/parallel/distributed.py, reducer.cpp):

- Buckets (buckets.py): runs of consecutive synchronised layers taken in reverse layer
  order, the order gradients become ready; each bucket is ONE contiguous slice of the flat
  gradient buffer, so it is a view (DDP's `gradient_as_bucket_view`), no copies.
- `layer_ready(l)`: once every layer of a bucket is done, and every bucket before it has
  been launched, `dist.all_reduce(slice, async_op=True)` starts at once and backward goes
  on (overlap). Buckets are launched strictly in bucket order, so every rank issues the
  same collectives in the same order by construction.
- `finish()`: launch the `late` buckets (layers whose parameters a later layer shares:
  final only after the whole backward), wait for every bucket (with a deadline), divide by
  the world size. Like DDP there is no overlap with the next forward (that is what
  Poseidon's WFBP adds).
- `broadcast_weights()` at the start: rank 0's weights to all (Caffe's multi-GPU contract;
  DDP broadcasts module states at construction), after `check_same_layout()`.

Joining the process group reads torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT), with every wait limited: a peer that never arrives fails the join
with a message naming the address, never a hang.
"""

from __future__ import annotations

import datetime
import os
import re
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from poseidon.sync.buckets import Bucket
from poseidon.sync.job import JobError
from poseidon.timeline import Timeline

DEFAULT_TIMEOUT_S = 120.0  # as POSEIDON_TIMEOUT_MS
DEFAULT_MASTER_PORT = 29500  # torchrun's


# ----- joining ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rendezvous:
    """Where and as whom to join: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT, plus the limit of every wait."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_MASTER_PORT
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Rendezvous:
        """Values from `env` (default os.environ), then `overrides` that are not None."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, key, parse in (("RANK", "rank", int), ("WORLD_SIZE", "world_size", int),
                                 ("LOCAL_RANK", "local_rank", int),
                                 ("MASTER_ADDR", "master_addr", str),
                                 ("MASTER_PORT", "master_port", int)):  # fmt: skip
            if env.get(name, "").strip():
                try:
                    values[key] = parse(env[name].strip())
                except ValueError:
                    raise JobError(f"{name}={env[name]!r} is not an integer") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        rendezvous = cls(**values)
        if not 0 <= rendezvous.rank < rendezvous.world_size:
            raise JobError(
                f"RANK={rendezvous.rank} with WORLD_SIZE={rendezvous.world_size} "
                "(want 0 <= RANK < WORLD_SIZE)"
            )
        return rendezvous


def backend_for(device: torch.device) -> str:
    """NCCL for a model on CUDA when this torch has it, else gloo (CPU, or CUDA through
    host)."""
    if device.type == "cuda" and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def join_group(rendezvous: Rendezvous, device: torch.device) -> None:
    """Join the process group (env:// semantics: a TCP store at MASTER_ADDR:MASTER_PORT,
    served by rank 0). A peer that never arrives fails the join after the timeout with a
    JobError naming the address, never a hang."""
    where = f"{rendezvous.master_addr}:{rendezvous.master_port}"
    try:
        dist.init_process_group(
            backend_for(device), init_method=f"tcp://{where}", rank=rendezvous.rank,
            world_size=rendezvous.world_size,
            timeout=datetime.timedelta(seconds=rendezvous.timeout_s),
        )  # fmt: skip
    except (RuntimeError, ValueError) as e:  # DistStoreError, DistNetworkError: RuntimeErrors
        raise JobError(
            f"worker {rendezvous.rank} of {rendezvous.world_size} could not join the "
            f"all-reduce group at {where} within {rendezvous.timeout_s:g}s: {first_line(e)} "
            "(every worker must start, and MASTER_ADDR:MASTER_PORT must reach worker 0)"
        ) from None


def first_line(error: BaseException) -> str:
    """A c10d or gloo message without its C++ frames, source prefix ('[.../pair.cc:537] ')
    or generic advice ('This is typically caused by ...')."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", text)
    return text.split(" This is typically caused")[0]


# ----- the reducer ------------------------------------------------------------------------------
class BucketReducer:
    """All-reduces `buckets` (buckets.bucket_layout) of the flat gradient buffer `grads` over
    the initialised process group `group` (default: the world). `iteration()` names the
    iteration in error messages."""

    def __init__(
        self,
        grads: torch.Tensor,
        buckets: Sequence[Bucket],
        iteration: Callable[[], int],
        *,
        group: dist.ProcessGroup | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        timeline: Timeline | None = None,
    ) -> None:
        if not dist.is_initialized():
            raise JobError("all-reduce sync needs an initialised torch.distributed "
                           "process group (see poseidon.sync.allreduce.join_group)")  # fmt: skip
        self.grads = grads
        self.buckets = list(buckets)
        self.bucket_of = {x.index: b for b in self.buckets for x in b.layers}
        self.iteration = iteration
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.timeout_s = float(timeout_s)
        self.timeline = timeline
        self.next_bucket = 0  # the next bucket to launch (they go strictly in order)

    def reset(self) -> None:
        """Forget the last iteration's rounds (every bucket was finished)."""
        self.next_bucket = 0
        for b in self.buckets:
            b.ready, b.work, b.done_us = 0, None, None

    def layer_ready(self, layer_index: int) -> None:
        """Layer `layer_index`'s gradient is final: launch what that completes."""
        bucket = self.bucket_of.get(layer_index)
        if bucket is not None and not bucket.late:
            bucket.ready += 1
            self._launch_ready()

    def finish(self) -> None:
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
            self.grads[b.start : b.end].div_(self.world_size)
            if self.timeline is not None:
                self._record(b, waited)

    def _launch_ready(self) -> None:
        """Note [in flight]. The backend's threads read and write a launched bucket's range
        while the training thread goes on. Nothing else touches that range until finish()
        has waited for it: lower layers' backward writes only their own ranges (a sharer
        writes its owner's range, which is late: launched after the whole backward), and the
        solver reads gradients only after finish(). The timeline's done callback runs on a
        backend thread; it only stores a float."""
        while self.next_bucket < len(self.buckets):
            b = self.buckets[self.next_bucket]
            if b.ready < len(b.layers):
                return
            b.launched_us = self._now()
            view = self.grads[b.start : b.end]
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
    def check_same_layout(self, num_floats: int) -> None:
        """Every worker must run the same model from the same iteration: a mismatch is a
        clear error here, not a wrong-size collective that hangs or fails later."""
        ranges = ",".join(f"{b.start}:{b.end}" for b in self.buckets).encode()
        mine = [num_floats, len(self.buckets), zlib.crc32(ranges), int(self.iteration())]
        local = torch.tensor(mine, dtype=torch.int64, device=self.grads.device)
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        work = dist.all_gather(gathered, local, group=self.group, async_op=True)
        self._wait(work, time.monotonic() + self.timeout_s, "layout check at start")
        for rank, theirs in enumerate(gathered):
            floats, buckets, _, iteration = theirs.tolist()
            if theirs.tolist() != mine:
                raise JobError(
                    f"worker {rank} runs a different job than worker {self.rank}: "
                    f"{floats} vs {mine[0]} parameters, {buckets} vs {mine[1]} buckets, "
                    f"iteration {iteration} vs {mine[3]} (every worker needs the same net, "
                    "bucket sizes and --snapshot)"
                )

    def broadcast_weights(self, weights: torch.Tensor) -> None:
        """Rank 0's flat `weights` to all, at once."""
        src = 0 if self.group is None else dist.get_global_rank(self.group, 0)
        work = dist.broadcast(weights, src, group=self.group, async_op=True)
        self._wait(work, time.monotonic() + self.timeout_s, "broadcast of rank 0's weights")

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

    def _error(self, what: str, cause: BaseException) -> JobError:
        reason = first_line(cause)
        if "timed out" in reason.lower():
            reason = (f"timed out after {self.timeout_s:g}s (a peer is stalled, or gone "
                      "without closing its connection)")  # fmt: skip
        elif "by peer" in reason:
            reason += " (a peer is gone: see its own last words)"
        return JobError(f"worker {self.rank} of {self.world_size}: {what} at iteration "
                        f"{self.iteration()} failed: {reason}")  # fmt: skip

    def barrier(self, name: str) -> None:
        """Every worker reaches this point (experiments time the same window on all)."""
        work = dist.barrier(group=self.group, async_op=True)
        self._wait(work, time.monotonic() + self.timeout_s, f"barrier {name!r}")

    def wait_all(self) -> None:
        """Wait for every launched bucket (a clean end)."""
        for b in self.buckets:
            self._wait(b.work, time.monotonic() + self.timeout_s,
                       f"all-reduce of {b.describe()}")  # fmt: skip

    # ----- timeline ---------------------------------------------------------------------------
    def _now(self) -> float:
        return self.timeline.now_us() if self.timeline is not None else time.perf_counter() * 1e6

    def _record(self, b: Bucket, waited_us: float) -> None:
        assert self.timeline is not None
        now = self._now()
        done = b.done_us if b.done_us is not None else now
        layers = [x.name for x in b.layers]
        iteration = self.iteration()
        self.timeline.span(f"bucket {b.index}", "sync", b.launched_us, done,
                           iteration=iteration, layers=layers, bytes=b.num_bytes,
                           scheme="allreduce")  # fmt: skip
        self.timeline.span(f"bucket {b.index}", "wait", waited_us, now, iteration=iteration)
