"""Distributed data-parallel training over Poseidon: wait-free backpropagation (WFBP)
and hybrid communication (HybComm). The only module of the engine that imports poseidon.

It attaches to a Solver through the engine's attach surface only (caffe/training_hooks.py
lists all of it; DESIGN §3):

- `after_backward(l)`: the moment layer l's backward is done (last pass of iter_size),
  its syncer starts moving the layer's gradient — a push-pull of its contiguous diff
  range through the KV-store shards (PS), or an all-gather of its sufficient factors
  among the workers (SFB, InnerProduct layers the plan picks) — while backward goes on.
- `apply_update` → `update_hook(rate)`: the update is deferred; the rate is kept.
- `before_forward(l)` of the next iteration waits for layer l alone, averages its
  gradient (the servers only sum), applies the solver rule to that layer's parameters
  and zeroes its diff. Lower layers are needed first, so the comm core sends them first.
- `flush_hook`: before tests, snapshots and the end, every pending layer completes.
- `clear_param_diffs_hook`: the solver's ClearParamDiffs must not erase a gradient sum
  that a pending layer still needs; such layers are zeroed after their update instead.
- `action_hook`: a stop or snapshot asked of one worker happens on every worker at one
  iteration (Note [agreed actions] in poseidon/include/poseidon/action_rounds.h).
- `sufficient_factor_sink` of each SFB InnerProduct: its backward hands over the factors.

Note [global waits]. With clip_gradients > 0 the global gradient norm needs every
layer, so `on_gradients_ready` waits for all layers and the update happens at once (no
overlap with the next forward; backward overlap remains). Mode `ps-nooverlap` (Caffe +
PS, the paper's baseline) does the same and also starts sending only after the whole
backward pass. Layers whose parameters are shared with a later layer are synced at
`on_gradients_ready` too: their gradient is final only after the whole backward.

Note [caller's hooks]. pycaffe's multi-GPU flow (BVLC's python/train.py) registers the
syncer itself: `solver.add_callback(nccl)` and, with layer_wise_reduce, `net.after_backward(
nccl)`; rank 0's weights go out when the script calls `nccl.bcast()`. caffe.NCCL therefore
builds a PoseidonSync with hooks=False that registers only its pass counter and forwards
those calls. Its arithmetic is Caffe's NCCL: gradients are summed over the workers through
the KV-store shards, layer by layer as backward finishes (or all at on_gradients_ready when
the script does not forward after_backward), scaled by 1/P1 once every layer has arrived,
and the solver updates at once; no update is deferred into the next forward.

Every worker runs the same update on the same mean gradient, so parameters and solver
history stay identical everywhere; rank 0 alone tests, displays and snapshots.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

import poseidon
from caffe import allreduce_join
from caffe.allreduce_sync import AllreduceSync
from caffe.common import set_multiprocess, set_solver_count, set_solver_rank
from caffe.compute_timeline import attach_compute_timeline
from caffe.errors import CaffeError, DistributedError
from caffe.sufficient_factors import FactorCollector
from caffe.sync_layout import SyncLayer, sync_layout
from caffe.sync_staging import GradientStaging, to_host_async
from poseidon import _C, rendezvous
from poseidon.config import PLAN_SYNC_MODES, SettingError
from poseidon.failures import explain as explain_failure
from poseidon.plan import layer_specs
from poseidon.timeline import Timeline

_log = logging.getLogger("caffe")
F = TypeVar("F", bound=Callable)


# Shards that run inside a worker's process (rank < this), for failure messages.
_colocated_shards = 0


def comm_errors(function: F) -> F:
    """Report communication failures as DistributedError (one clear line from the CLI)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except poseidon.CommError as e:
            raise DistributedError(_explain(e)) from None

    return wrapper  # type: ignore[return-value]


def _explain(error: poseidon.CommError) -> str:
    """The comm core's message, plus which worker a dead colocated shard lived with."""
    return explain_failure(error, _colocated_shards)


@dataclass
class LayerSyncer:
    """One learnable layer's synchronisation state."""

    layout: SyncLayer  # which layer, its diff range, late or not, its shape for the plan
    scheme: str = "PS"  # "PS" or "SFB" (from the coordinator's plan)
    staging: GradientStaging | None = None
    collector: FactorCollector | None = None
    handle: object | None = None
    iteration: int = -1
    pending: bool = False  # gradient in flight or received; update not yet applied
    submitted_us: float = 0.0
    bytes_seen: tuple[int, int] = (0, 0)
    factor_floats: int = 0  # SFB: the registered size of one worker's factors

    # Shorthands for the layout's fields.
    index = property(lambda self: self.layout.index)
    name = property(lambda self: self.layout.name)
    late = property(lambda self: self.layout.late)
    start = property(lambda self: self.layout.start)
    end = property(lambda self: self.layout.end)
    param_ids = property(lambda self: self.layout.param_ids)


class PoseidonSync:
    """Attach to `solver`; `worker` is a connected `poseidon._C.Worker`.

    `hooks=False` (pycaffe's caffe.NCCL): the caller forwards the solver's on_start and
    on_gradients_ready and, layer-wise, the net's after_backward, as Caffe's NCCL object
    receives them; updates are then immediate, as in Caffe (see Note [caller's hooks])."""

    @comm_errors
    def __init__(
        self,
        solver,
        worker: _C.Worker,
        mode: str = "poseidon",
        timeline: Timeline | None = None,
        force_scheme: str = "auto",
        broadcast_weights: bool = True,
        layer_schemes: dict[str, str] | None = None,
        hooks: bool = True,
    ) -> None:
        if mode not in PLAN_SYNC_MODES:
            raise ValueError(f"sync mode {mode!r}: want one of {', '.join(PLAN_SYNC_MODES)}")
        self.solver = solver
        self.net = solver.net
        self.worker = worker
        self.mode = mode
        self.timeline = timeline
        self.num_workers = worker.num_workers
        self.rank = worker.rank
        self.iter_size = max(1, int(solver.param.iter_size))
        clip = solver.param.clip_gradients
        self.hooks = hooks
        self.deferred = hooks and mode != "ps-nooverlap" and not clip > 0
        self.pass_index = 0
        self.pending_rate: float | None = None
        self.started = False
        self.shard: rendezvous.NodeThread | None = None  # the colocated shard, set by join
        self.coordinator: rendezvous.NodeThread | None = None  # set by join_uid (rank 0)
        self.worker_timeout_s = 60.0
        self.agreed_actions: list[tuple[int, str]] = []  # (iteration, "stop" | "snapshot")
        # False only where every worker provably starts from the same weights (the compute
        # replay's placeholders): the first step then skips rank 0's broadcast.
        self.broadcast_weights = broadcast_weights
        on_cuda = self.net.device.type == "cuda"
        self.side_stream = torch.cuda.Stream(device=self.net.device) if on_cuda else None
        # One thread: it hands layers to the (asynchronous) comm core in submission order.
        self.comm_thread = ThreadPoolExecutor(1, "poseidon-submit") if on_cuda else None
        self.syncers = self._make_syncers()
        self.by_index = {s.index: s for s in self.syncers}
        self._synced_params = {p for s in self.syncers for p in s.param_ids}
        self.plan = self._agree_on_plan(force_scheme, layer_schemes or {})
        self._register()
        self._attach()

    # ----- setup --------------------------------------------------------------------------
    def _make_syncers(self) -> list[LayerSyncer]:
        return [LayerSyncer(layer) for layer in sync_layout(self.net)]

    def _agree_on_plan(self, force_scheme: str, layer_schemes: dict[str, str]) -> _C.Plan:
        # poseidon.plan.layer_specs: the derivation `poseidon plan` prints (DESIGN §4).
        try:
            layout = [s.layout for s in self.syncers]
            specs = layer_specs(layout, self.iter_size, self.mode, force_scheme, layer_schemes,
                                what="POSEIDON_LAYER_SCHEMES")  # fmt: skip
        except ValueError as e:
            raise CaffeError(f"net {self.net.name!r}: {e}") from None
        plan = self.worker.plan(specs)
        for layer_plan in plan.layers:
            syncer = self.by_index[layer_plan.layer_id]
            syncer.scheme = "SFB" if layer_plan.scheme == _C.Scheme.SFB else "PS"
        if self.rank == 0:
            self._log_plan(plan)
        return plan

    def _log_plan(self, plan: _C.Plan) -> None:
        _log.info("Poseidon: %d workers, %d server shards, sync mode %s, chunk %d bytes",
                  plan.num_workers, plan.num_servers, self.mode, plan.chunk_bytes)  # fmt: skip
        _log.info("HybComm plan (bytes per iteration per node):")
        _log.info("    %-24s %-5s %14s %14s %s", "layer", "kind", "PS", "SFB", "scheme")
        kinds = {_C.LayerKind.FC: "FC", _C.LayerKind.CONV: "conv", _C.LayerKind.OTHER: "other"}
        for lp in plan.layers:
            sfb = f"{lp.cost.sfb_bytes:14.0f}" if lp.spec.kind == _C.LayerKind.FC else " " * 14
            scheme = "SFB" if lp.scheme == _C.Scheme.SFB else "PS"
            _log.info("    %-24s %-5s %14.0f %s %s", lp.name, kinds[lp.spec.kind],
                      lp.cost.ps_bytes, sfb, scheme)  # fmt: skip

    def _register(self) -> None:
        for s in self.syncers:
            diff = self.net.param_diff[s.start : s.end]
            s.staging = GradientStaging(diff, self.side_stream)
            if s.scheme == "PS":
                self.worker.register_layer(s.index, s.staging.host_array())
                continue
            layer = self.net.layers[s.index]
            s.collector = FactorCollector(*layer.factor_widths())
            # Two slots of P1 buffers of this size (sfb.h): the factors alone, never the
            # layer's weights (those cross in pieces of this size at start).
            s.factor_floats = max(1, s.collector.max_floats(s.layout.shape.rows, self.iter_size))
            self.worker.register_sfb_layer(s.index, s.factor_floats)
            layer.sufficient_factor_sink = s.collector

    def _attach(self) -> None:
        net, solver = self.net, self.solver
        # Counts the iter_size passes (a layer is sent after its last one) in every mode.
        net.before_forward(self._before_forward)
        if self.hooks:
            net.after_backward(self.after_backward)
        if self.timeline is not None:
            attach_compute_timeline(self.net, self.timeline, lambda: self.solver.iter)
        if not self.hooks:
            return  # Note [caller's hooks]
        net.clear_param_diffs_hook = self._clear_param_diffs
        solver.add_callback(self.on_start, self.on_gradients_ready)
        solver.flush_hook = self.flush
        solver.action_hook = self.agree_action
        if self.deferred:
            solver.update_hook = self._defer_update

    # ----- solver callbacks -----------------------------------------------------------------
    @comm_errors
    def on_start(self) -> None:
        if not self.started:
            self.started = True
            if self.broadcast_weights:
                self._broadcast_initial_weights()
            if self.hooks:
                self._reach_boundary()  # the first boundary: votes may come before the end
        self.pass_index = 0

    @comm_errors
    def bcast(self) -> None:
        """Rank 0's parameters to every worker, now (Caffe's NCCL::Broadcast)."""
        self.started = True
        self._broadcast_initial_weights()

    @comm_errors
    def on_gradients_ready(self) -> None:
        for s in self.syncers:
            # Driven by the caller, a layer whose after_backward it did not forward (Caffe's
            # layer_wise_reduce off, or no `net.after_backward(nccl)`) goes now.
            if s.late or self.mode == "ps-nooverlap" or not (self.hooks or s.pending):
                self._submit(s)
        if not self.deferred:
            for s in self.syncers:
                self._receive(s)
                s.pending = False  # the solver applies the update itself, right after

    def _defer_update(self, rate: float) -> None:
        """update_hook: keep the rate; layers update as their gradients arrive."""
        self.pending_rate = rate
        for param_id in range(len(self.net.learnable_params)):
            if param_id not in self._synced_params:
                self.solver.update_param(param_id, rate)
                blob = self.net.learnable_params[param_id]
                blob.data_tensor.sub_(blob.diff_tensor)
                blob.diff_tensor.zero_()

    @comm_errors
    def flush(self) -> None:
        """Complete every pending layer (before tests, snapshots and at the end)."""
        for s in self.syncers:
            if s.pending:
                self._complete(s)
        self.pending_rate = None

    # ----- actions every worker takes at one iteration ------------------------------------
    @comm_errors
    def agree_action(self, action: str, at_boundary: bool) -> str:
        """solver.action_hook: this worker's requested action ("stop" after a Ctrl-C, say)
        goes to the coordinator; at the end of an iteration, returns the action the whole
        job takes there (see Note [agreed actions] in poseidon/action_rounds.h)."""
        iteration = self.solver.iter
        if at_boundary:
            self._reach_boundary()
        covered = any(kind in (action, "stop") for _, kind in self.agreed_actions)
        if action != "none" and not covered:
            self.worker.request_action(action, f"{action} asked on worker {self.rank}")
        if not at_boundary:
            return "none"
        due = {kind for at, kind in self.agreed_actions if at == iteration}
        self.agreed_actions = [(at, kind) for at, kind in self.agreed_actions if at > iteration]
        return "stop" if "stop" in due else ("snapshot" if due else "none")

    def _reach_boundary(self) -> None:
        """Tell the comm core where the loop is (its votes answer with it); keep what the
        rounds decided."""
        iteration = self.solver.iter
        for kind, at, reason in self.worker.reach_boundary(iteration):
            if at < 0:
                _log.info("Poseidon: the %s (%s) is dropped: a worker already finished", kind,
                          reason)  # fmt: skip
                continue
            if at < iteration:
                raise DistributedError(
                    f"worker {self.rank} is at iteration {iteration}, past the agreed "
                    f"iteration {at} to {kind} ({reason})"
                )
            self.agreed_actions.append((at, kind))
            _log.info("Poseidon: every worker will %s at iteration %d (%s)", kind, at, reason)

    # ----- net callbacks --------------------------------------------------------------------
    @comm_errors
    def _before_forward(self, layer_index: int) -> None:
        if layer_index == 0:
            self.pass_index += 1
        syncer = self.by_index.get(layer_index)
        if syncer is not None and syncer.pending:
            self._complete(syncer)

    @comm_errors
    def after_backward(self, layer_index: int) -> None:
        """Layer `layer_index`'s backward is done: send its gradient (WFBP)."""
        if self.mode == "ps-nooverlap" or self.pass_index < self.iter_size:
            return
        syncer = self.by_index.get(layer_index)
        if syncer is not None and not syncer.late:
            self._submit(syncer)

    def _clear_param_diffs(self) -> None:
        if not any(s.pending and s.scheme == "PS" for s in self.syncers):
            self.net.param_diff.zero_()
            return
        keep = sorted((s.start, s.end) for s in self.syncers if s.pending and s.scheme == "PS")
        position = 0
        for start, end in keep:
            self.net.param_diff[position:start].zero_()
            position = end
        self.net.param_diff[position:].zero_()

    # ----- one layer's round ---------------------------------------------------------------
    def _submit(self, s: LayerSyncer) -> None:
        """Hand the layer's gradient (or factors) to the comm core for iteration `iter`.

        On CPU the comm core is called right here (it is asynchronous). On CUDA the host
        copy is queued on the side stream and a comm thread waits for that copy alone
        before calling the comm core, so the training thread goes on queuing backward
        kernels (see Note [GPU path] in sync_staging.py)."""
        iteration = self.solver.iter
        s.submitted_us = self._now()
        s.iteration = iteration
        s.pending = True
        if s.scheme == "PS":
            s.staging.to_host()
            copied = s.staging.wait_host

            def send():
                return self.worker.push_pull(s.index, iteration)
        else:
            factors, event = to_host_async(s.collector.pack(), self.side_stream)
            copied = event.synchronize if event is not None else None

            def send():
                return self.worker.allgather(s.index, iteration, factors)

        if self.comm_thread is None:
            s.handle = send()
        else:
            s.handle = self.comm_thread.submit(lambda: (copied and copied(), send())[1])

    def _receive(self, s: LayerSyncer) -> None:
        """Wait for the layer's round and leave the MEAN gradient in its diff range."""
        if s.handle is None:
            return
        waited = self._now()
        handle = s.handle.result() if isinstance(s.handle, Future) else s.handle
        handle.wait()
        done = self._now()
        s.handle = None
        scale = 1.0 / self.num_workers
        if s.scheme == "PS":
            s.staging.to_device()
            s.staging.diff.mul_(scale)
        else:
            self._rebuild_from_factors(s, scale)
        if self.timeline is not None:
            self._record_sync(s, handle.timing(), waited, done)

    def _complete(self, s: LayerSyncer) -> None:
        """Receive, then apply the deferred update of the layer's parameters."""
        self._receive(s)
        s.pending = False
        if self.pending_rate is None:
            return  # the solver itself updates (not deferred)
        start = self._now()
        for param_id in s.param_ids:
            self.solver.update_param(param_id, self.pending_rate)
        data = self.net.param_data[s.start : s.end]
        data.sub_(s.staging.diff)
        s.staging.diff.zero_()
        if self.timeline is not None:
            self.timeline.span(s.name, "apply", start, self._now(), iteration=s.iteration)

    def _rebuild_from_factors(self, s: LayerSyncer, scale: float) -> None:
        factors = [self.worker.factor(s.index, s.iteration, r) for r in range(self.num_workers)]
        self.net.layers[s.index].add_factor_gradients(factors, scale)

    # ----- start: every worker begins from rank 0's weights ----------------------------------
    def _broadcast_initial_weights(self) -> None:
        """Rank 0's parameters to all (Caffe's NCCL bcast), through the same channels.

        PS layers: rank 0 pushes its weights, the others zeros; the sum is rank 0's
        weights, bit for bit (x + 0 = x), in one round at iteration iter-1. SFB layers:
        all-gathers where only rank 0 sends, in pieces of the layer's factor size, at
        iterations iter-n .. iter-1, so that the factor buffers (2 × P1 of them per layer)
        never have to hold a whole weight matrix: VGG19-22K's fc6 at P1 = 16 would need
        13 GB of them per worker. The first training round is iteration iter either way.
        """
        iteration = self.solver.iter - 1
        sfb = [s for s in self.syncers if s.scheme == "SFB"]
        for s in self.syncers:
            if s.scheme == "PS":
                data = self.net.param_data[s.start : s.end]
                s.staging.diff.copy_(data if self.rank == 0 else torch.zeros_like(data))
                s.staging.to_host()
                s.staging.wait_host()
                s.handle = self.worker.push_pull(s.index, iteration)
        pieces = {s.index: math.ceil((s.end - s.start) / s.factor_floats) for s in sfb}
        for piece in range(max(pieces.values(), default=0)):
            sending = [s for s in sfb if piece < pieces[s.index]]
            for s in sending:
                begin = s.start + piece * s.factor_floats
                end = min(s.end, begin + s.factor_floats)
                payload = np.zeros(0, np.float32)
                if self.rank == 0:
                    payload = self.net.param_data[begin:end].cpu().numpy()
                at = iteration - pieces[s.index] + 1 + piece
                s.handle = self.worker.allgather(s.index, at, payload)
                s.handle.wait()
                s.handle = None
                weights = torch.from_numpy(np.array(self.worker.factor(s.index, at, 0)))
                self.net.param_data[begin:end].copy_(weights.to(self.net.device))
        for s in self.syncers:
            if s.scheme == "PS":
                s.handle.wait()
                s.handle = None
                s.staging.to_device()
                self.net.param_data[s.start : s.end].copy_(s.staging.diff)
                s.staging.diff.zero_()
        if self.rank == 0:
            _log.info("Poseidon: initial weights of rank 0 broadcast to %d workers",
                      self.num_workers)  # fmt: skip

    # ----- end -------------------------------------------------------------------------------
    @comm_errors
    def close(self, error: BaseException | None = None) -> None:
        """Finish cleanly, or abort the whole job with the reason if training failed."""
        if error is not None:
            # The job may already be aborted (that may be the error); abort is best effort.
            with contextlib.suppress(poseidon.CommError):
                self.worker.abort(f"worker {self.rank} failed: {error}")
            if self.shard is not None:
                self.shard.abort(f"worker {self.rank} failed")
            if self.coordinator is not None:
                # The coordinator holds the reason now. Its teardown waits for every node to
                # close, this process's worker too: shutting down an aborted worker closes it
                # at once.
                self.coordinator.abort(f"worker {self.rank} failed: {error}", wait_s=0.0)
                with contextlib.suppress(poseidon.CommError):
                    self.worker.shutdown()
                self.coordinator.join(5.0)
        else:
            self.flush()
            self.worker.shutdown()
            for what, node in (("colocated shard", self.shard), ("coordinator", self.coordinator)):
                if node is not None and not node.join(self.worker_timeout_s):
                    raise DistributedError(
                        f"{what} of worker {self.rank} still running "
                        f"{self.worker_timeout_s:.0f}s after the job ended"
                    )
        self._detach()
        if self.comm_thread is not None:
            self.comm_thread.shutdown(wait=False)
        if self.timeline is not None:
            self.timeline.close()

    def _detach(self) -> None:
        """Free the single slots (caffe/training_hooks.py) for whatever attaches next."""
        if not self.hooks:
            return
        self.net.clear_param_diffs_hook = None
        self.solver.flush_hook = None
        self.solver.action_hook = None
        self.solver.update_hook = None
        for s in self.syncers:
            if s.collector is not None:
                self.net.layers[s.index].sufficient_factor_sink = None

    def traffic(self) -> dict[int, tuple[int, int]]:
        """Bytes (sent, received) so far per layer index."""
        return dict(self.worker.traffic())

    # ----- timeline ----------------------------------------------------------------------------
    def _now(self) -> float:
        return self.timeline.now_us() if self.timeline is not None else time.perf_counter() * 1e6

    def _record_sync(
        self, s: LayerSyncer, timing: _C.HandleTiming, waited_us: float, done_us: float
    ) -> None:
        sent, received = self.worker.traffic().get(s.index, (0, 0))
        delta = (sent - s.bytes_seen[0], received - s.bytes_seen[1])
        s.bytes_seen = (sent, received)
        self.timeline.record_round(s.name, timing, s.submitted_us, waited_us, done_us,
                                   s.iteration, s.scheme, delta)  # fmt: skip


def worker_config() -> poseidon.Config:
    """This worker's settings, from the POSEIDON_* (and launcher) variables."""
    try:
        return poseidon.Config.from_env(role="worker")
    except SettingError as e:
        raise CaffeError(f"Poseidon worker settings: {e}") from None


def _rendezvous(config: poseidon.Config) -> allreduce_join.Rendezvous:
    """sync=allreduce: torchrun's MASTER_ADDR/MASTER_PORT, the rest from the settings."""
    return allreduce_join.Rendezvous.from_env(
        rank=config.rank, world_size=config.num_workers, local_rank=config.local_rank,
        timeout_s=config.timeout_ms / 1000.0,
    )  # fmt: skip


def prepare_worker() -> int:
    """Before nets are built: solver rank and count (data sharding, seed offset).

    Returns the worker's local rank on its host (which GPU it uses)."""
    config = worker_config()
    if config.sync == "allreduce":
        return allreduce_join.prepare_worker(_rendezvous(config))
    set_solver_count(config.num_workers)
    set_solver_rank(config.rank)
    set_multiprocess(True)
    return config.local_rank


@comm_errors
def attach_from_environment(solver, broadcast_weights: bool = True) -> PoseidonSync | AllreduceSync:
    """Join the Poseidon job described by POSEIDON_* variables and attach to `solver`
    (POSEIDON_SYNC=allreduce: the DDP-style baseline of caffe/allreduce_sync.py instead).
    `broadcast_weights=False`: every worker starts from identical weights by construction
    (the compute replay), so rank 0's are not sent at the first step."""
    config = worker_config()
    if config.sync == "allreduce":
        timeline = None
        if config.timeline:
            timeline = Timeline(config.timeline, config.rank, config.num_workers)
        return allreduce_join.attach_from_environment(
            solver, _rendezvous(config), timeline, bucket_cap_bytes=config.bucket_cap_bytes,
            first_bucket_bytes=config.first_bucket_bytes,
        )  # fmt: skip
    return join(solver, config, broadcast_weights=broadcast_weights)


@comm_errors
def join(
    solver, config: poseidon.Config, broadcast_weights: bool = True, hooks: bool = True
) -> PoseidonSync:
    """Connect this worker (and its colocated shard) to the job `config` describes and
    attach a PoseidonSync to `solver`."""
    global _colocated_shards
    native = config.to_native()
    _colocated_shards = config.colocated_shards
    shard = rendezvous.NodeThread.shard(config) if config.rank < config.colocated_shards else None
    if shard is not None:
        native.local_server = shard.node.local_address
    try:
        worker = _C.Worker(native)
        worker.connect()
        timeline = None
        if config.timeline:
            timeline = Timeline(config.timeline, config.rank, config.num_workers)
        sync = PoseidonSync(solver, worker, config.sync, timeline, config.scheme,
                            broadcast_weights, config.layer_schemes, hooks)  # fmt: skip
    except BaseException:
        if shard is not None:
            shard.abort("worker failed to join the job")
        raise
    sync.shard = shard
    return sync


# ----- caffe.NCCL: a job that the training processes start among themselves ----------------


def new_uid() -> bytes:
    """caffe.NCCL.new_uid(): where rank 0's coordinator will listen, and a fresh token."""
    return rendezvous.new_uid()


def join_uid(solver, uid: bytes, rank: int, count: int) -> PoseidonSync:
    """caffe.NCCL(solver, uid) for solver `rank` of `count`: rank 0 starts the coordinator
    at the uid's address; every rank runs its KV-store shard (P2 = P1, the paper's layout)
    and joins. Layers go through the PS (Caffe's all-reduce arithmetic), driven by the
    caller's hooks. Other settings (timeouts, chunk size, timeline) come from POSEIDON_*."""
    try:
        session = rendezvous.Uid.parse(uid)
    except ValueError as e:
        raise CaffeError(f"caffe.NCCL: {e}") from None
    if not 0 <= rank < count:
        raise CaffeError(f"caffe.NCCL: solver rank {rank} with solver count {count} (want "
                         "0 <= rank < count: call caffe.set_solver_count/set_solver_rank "
                         "before building the solver)")  # fmt: skip
    try:
        config = poseidon.Config.from_env(
            role="worker", rank=rank, num_workers=count, num_servers=count,
            coordinator=session.address, token=session.token, transport="tcp", listen="",
            colocate=True, sync="wfbp", scheme="ps", layer_schemes={},
        )  # fmt: skip
    except SettingError as e:
        raise CaffeError(f"caffe.NCCL settings: {e}") from None
    who = f"caffe.NCCL rank {rank} of {count}"
    coordinator = None
    if rank == 0:
        try:
            coordinator = rendezvous.NodeThread.coordinator(config)
        except poseidon.CommError as e:
            raise DistributedError(
                f"{who}: cannot start the coordinator at {session.address}, the uid's "
                f"address: {e} (make a fresh uid with caffe.NCCL.new_uid())"
            ) from None
    failure = ""
    try:
        sync = join(solver, config, broadcast_weights=False, hooks=False)
    except DistributedError as e:
        failure = str(e)
    except BaseException:
        if coordinator is not None:
            coordinator.abort(f"{who} failed to join")
        raise
    if failure:
        # Out of the except block: the failed worker is gone, so the coordinator's
        # teardown does not wait for its connection to close.
        if coordinator is not None:
            coordinator.abort(f"{who} failed to join: {failure}")
        hint = "" if rank == 0 else " (rank 0 starts it in caffe.NCCL(solver, uid))"
        raise DistributedError(
            f"{who}: joining the job of coordinator {session.address}{hint} failed: {failure}"
        )
    sync.coordinator = coordinator
    return sync
