"""The local stage of a machine of several workers (docs/communication.md §5, "Several
workers per machine"; the core's cost_model.h, Note [local aggregation]).

With G workers per machine (POSEIDON_WORKERS_PER_HOST), ranks m·G … m·G+G−1 are machine m's
and m·G is its leader. Per layer and iteration the machine's workers first sum their
gradient inside the machine (a reduce to the leader), only the leader exchanges the
machine's sum with the shards or the other machines' leaders through the comm core, and the
result comes back to every worker of the machine (a broadcast from the leader, "spread").
So the machine's network link carries one worker's traffic, not G workers'.

The local collectives are torch.distributed's, on process groups of this machine alone
(no default group is created or touched, so a poseidon.torch user's own stays theirs):
NCCL between GPUs (NVLink or PCIe, as BytePS inside a machine and BVLC Caffe's multi-GPU
path), gloo over loopback between CPU processes and between workers that share one GPU
(NCCL refuses two ranks on a device; `_backend`). They meet through a FileStore in the
machine's temporary directory, named by a digest of the job's token and the machine, so
only this job's workers of this machine find it; it is removed when the last of them
closes it.

Two groups, each used in one order that every worker of the machine follows: `reduce` in
the order layers' rounds are submitted (backward order), and `spread` in the order the
leader's exchanges complete — which the comm core's priorities decide (lower layers first),
not the submission order: a spread waiting for the first-submitted layer, the last to come
back, would hold every other layer's result. So before each spread the leader announces
which layer it is (Note [announced spreads]). Every wait polls the comm core's failure, so
a job that ends elsewhere ends the local waits too (never a silent hang on a gloo or NCCL
wait whose peer is frozen).

Note [announced spreads]. Each submitted round queues one task on the spread thread of
every worker of the machine: one spread, whichever layer's. The leader's task takes the
lowest layer whose exchange is back (polling the comm core's handles), broadcasts its layer
id, then its result; the others' task receives the id, then that layer's result. So the
spread group sees the same collectives in the same order on every worker, and each layer's
result leaves the moment it is there.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
import torch.distributed as dist

import poseidon

_log = logging.getLogger("poseidon.local")

# Polling a collective: short sleeps first (a layer's local sum takes microseconds to
# milliseconds), then at most this long between looks at the comm core's failure.
_POLL_FIRST_S = 20e-6
_POLL_MAX_S = 2e-3


class LocalStageError(poseidon.CommError):
    """A collective among one machine's workers failed; the message names the machine."""


def device_identity(device: torch.device) -> str:
    """What tells two processes' CUDA devices apart: the GPU's UUID where torch reports
    it (device indices depend on each process's CUDA_VISIBLE_DEVICES)."""
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if uuid:
        return f"GPU-{uuid}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return f"cuda:{device.index or 0} of CUDA_VISIBLE_DEVICES={visible!r}"


class LocalGroup:
    """This worker's machine: `rank` among `num_workers` with `workers_per_host` (G) per
    machine, on `device`. `job_key` names the job (its token and coordinator); `failure`
    is the comm core's `Worker.failure` (polled by every wait); `timeout_s` bounds each."""

    def __init__(self, rank: int, num_workers: int, workers_per_host: int, job_key: str,
                 device: torch.device, failure: Callable[[], str],
                 timeout_s: float) -> None:  # fmt: skip
        g = workers_per_host
        self.size = g
        self.machine = rank // g
        self.local_rank = rank % g
        self.leader = self.machine * g
        self.is_leader = self.local_rank == 0
        self.num_workers = num_workers
        self.failure = failure
        self.timeout_s = timeout_s
        self.name = f"machine {self.machine} (workers {self.leader}..{self.leader + g - 1})"
        digest = hashlib.sha256(f"{job_key}/machine {self.machine}".encode()).hexdigest()[:24]
        self.store_path = os.path.join(tempfile.gettempdir(), f"poseidon-local-{digest}")
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.FileStore(self.store_path, g)
        store.set_timeout(timeout)
        try:
            self.backend = self._backend(store, device)
            self.reduce_group = self._group(dist.PrefixStore("reduce/", store), timeout, device)
            self.spread_group = self._group(dist.PrefixStore("spread/", store), timeout, device)
        except RuntimeError as e:
            raise LocalStageError(f"{self.name}: the local group did not form within "
                                  f"{timeout_s:.0f} s: {e}") from None  # fmt: skip
        # The leader: one thread hands each layer's local sum to the comm core in submission
        # order; another spreads each result once its exchange is back (Note [announced
        # spreads]), on every worker.
        self.submit_thread = ThreadPoolExecutor(1, "poseidon-local-submit")
        self.spread_thread = ThreadPoolExecutor(1, "poseidon-local-spread")
        self._lock = threading.Lock()
        self._rounds: dict[int, Any] = {}  # layer id -> its round (LayerRound)
        self._exchanged: list[Any] = []  # the leader's rounds whose exchange is under way
        self._announce = torch.zeros(1, dtype=torch.int64, device=device
                                     if self.backend == "nccl" else "cpu")  # fmt: skip

    def _backend(self, store: Any, device: torch.device) -> str:
        """NCCL between the machine's GPUs; gloo between CPU processes, and between workers
        that share a GPU: NCCL refuses two ranks on one device ("invalid usage", seen on an
        H200 with NCCL 2.28), while gloo's reduce, gather and broadcast take CUDA tensors
        through host memory (bench/shared_gpu_probe.py; docs/benchmarks.md)."""
        if device.type != "cuda":
            return "gloo"
        store.set(f"device/{self.local_rank}", device_identity(device))
        devices = [store.get(f"device/{r}").decode() for r in range(self.size)]
        if len(set(devices)) < self.size:
            _log.warning("%s: its workers share a GPU (%s), so the local stage goes "
                         "through gloo and host memory, not NCCL", self.name,
                         ", ".join(devices))  # fmt: skip
            return "gloo"
        if not dist.is_nccl_available():
            raise LocalStageError(f"{self.name}: local aggregation between GPUs needs NCCL, "
                                  "which this torch build lacks")  # fmt: skip
        return "nccl"

    def _group(self, store: Any, timeout: datetime.timedelta, device: torch.device) -> Any:
        if self.backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            group = dist.ProcessGroupNCCL(store, self.local_rank, self.size, options)
            if hasattr(group, "_set_default_device"):  # not in torch 2.11 (seen on an H200)
                group._set_default_device(device)
            return group
        options = dist.ProcessGroupGloo._Options()
        # Loopback: the machine's workers share it (also inside a network namespace).
        options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        options._timeout = timeout
        return dist.ProcessGroupGloo(store, self.local_rank, self.size, options)

    # ----- collectives (asynchronous; `wait` them) -------------------------------------------
    def reduce(self, tensor: torch.Tensor) -> Any:
        """Sum `tensor` over the machine's workers into the leader's (the others' may be
        used as scratch)."""
        options = dist.ReduceOptions()
        options.rootRank = 0
        options.reduceOp = dist.ReduceOp.SUM
        return self.reduce_group.reduce([tensor], options)

    def gather(self, tensor: torch.Tensor, into: list[torch.Tensor]) -> Any:
        """Every worker's `tensor` into the leader's `into` (local rank order); the others
        pass []. Same-sized tensors."""
        options = dist.GatherOptions()
        options.rootRank = 0
        return self.reduce_group.gather([into] if self.is_leader else [], [tensor], options)

    def spread(self, tensor: torch.Tensor) -> Any:
        """The leader's `tensor` into every worker's."""
        options = dist.BroadcastOptions()
        options.rootRank = 0
        return self.spread_group.broadcast([tensor], options)

    # ----- Note [announced spreads] ---------------------------------------------------------
    def register(self, layer_round: Any) -> None:
        """`layer_round` (a LayerRound) is submitted: its id may be announced."""
        with self._lock:
            self._rounds[layer_round.index] = layer_round

    def exchanging(self, layer_round: Any) -> None:
        """The leader: `layer_round`'s exchange is under way (its `exchange_done()` says when
        it is back)."""
        with self._lock:
            self._exchanged.append(layer_round)

    def next_exchanged(self, what: str) -> Any:
        """The leader: the lowest layer whose exchange is back, taken off the list; waits
        (never past the timeout or the job's end) until there is one."""

        def take() -> Any:
            with self._lock:
                done = [r for r in self._exchanged if r.exchange_done()]
                if not done:
                    return None
                chosen = min(done, key=lambda r: r.index)
                self._exchanged.remove(chosen)
                return chosen

        return self.poll(take, f"{what}: no exchange came back")

    def announce(self, layer_round: Any | None, what: str) -> Any:
        """The leader passes the round it spreads next, the others None: every worker gets
        that round (by its layer id)."""
        if layer_round is not None:
            self._announce.fill_(layer_round.index)
        self.wait(self.spread(self._announce), f"the announcement of {what}")
        with self._lock:
            return self._rounds[int(self._announce.item())]

    def fail_rounds(self, error: BaseException) -> None:
        """A spread task failed: every round still waiting for its spread fails with it."""
        with self._lock:
            rounds = list(self._rounds.values())
        for r in rounds:
            if r.spread_done is not None and not r.spread_done.done():
                r.spread_done.set_exception(error)

    def poll(self, ready: Callable[[], Any], what: str) -> Any:
        """`ready()`'s first true value, looked for with short sleeps that grow to
        _POLL_MAX_S. Raises the comm core's failure if the job ends meanwhile, and
        LocalStageError naming the machine and `what` past the timeout: no local wait ever
        outlives the job."""
        deadline = time.monotonic() + self.timeout_s
        pause = _POLL_FIRST_S
        while True:
            value = ready()
            if value:
                return value
            reason = self.failure()
            if reason:
                raise poseidon.PeerFailure(f"{what} on {self.name}: job aborted: {reason}")
            if time.monotonic() > deadline:
                raise LocalStageError(f"{what} on {self.name}: not done after "
                                      f"{self.timeout_s:.0f} s")  # fmt: skip
            time.sleep(pause)
            pause = min(2 * pause, _POLL_MAX_S)

    def wait(self, work: Any, what: str) -> None:
        """Until the collective `work` is done (poll); LocalStageError naming the machine
        and `what` if it fails."""

        def completed() -> bool:
            try:
                if work.is_completed():
                    work.wait()  # raises the collective's own error, if any
                    return True
            except RuntimeError as e:
                self._raise(what, f"failed: {e}")
            return False

        self.poll(completed, what)

    def _raise(self, what: str, how: str) -> None:
        """A local collective failed: the comm core usually knows why (a worker of this
        machine died: its connections dropped too), so wait a little for its verdict."""
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            reason = self.failure()
            if reason:
                raise poseidon.PeerFailure(f"{what} on {self.name}: job aborted: {reason}")
            time.sleep(0.05)
        raise LocalStageError(f"{what} on {self.name} {how}")

    def close(self) -> None:
        for thread in (self.submit_thread, self.spread_thread):
            thread.shutdown(wait=False)
