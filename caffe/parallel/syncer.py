"""PoseidonSync: a Caffe Solver's distributed data-parallel training over Poseidon, with
wait-free backpropagation (WFBP) and hybrid communication (HybComm).

It ties the engine's attach surface (caffe/training_hooks.py lists all of it) to the
front-end-neutral client (poseidon/sync/): one LayerRound per synchronised layer of the
net's layout (layout.py), the plan the workers agree on, the rounds' timeline.

- `after_backward(l)`: the moment layer l's backward is done (last pass of iter_size), its
  round starts moving the layer's gradient — a push-pull of its contiguous diff range
  through the KV-store shards (PS), or an all-gather of its sufficient factors among the
  workers (SFB, InnerProduct layers the plan picks) — while backward goes on.
- `apply_update` → `update_hook(rate)`: the update is deferred; the rate is kept.
- `before_forward(l)` of the next iteration waits for layer l alone, averages its
  gradient (the servers only sum), applies the solver rule to that layer's parameters
  and zeroes its diff. Lower layers are needed first, so the comm core sends them first.
- `flush_hook`: before tests, snapshots and the end, every pending layer completes.
- `clear_param_diffs_hook`: the solver's ClearParamDiffs must not erase a gradient sum
  that a pending layer still needs; such layers are zeroed after their update instead.
- `action_hook`: a stop or snapshot asked of one worker happens on every worker at one
  iteration (Note [agreed actions] in poseidon/include/poseidon/internal/action_rounds.h).
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

import atexit
import contextlib
import logging
import os
import sys
import weakref
from typing import Any

import torch

from caffe.errors import CaffeError, DistributedError, WeightsError
from caffe.formats.atomic_write import replacing
from caffe.parallel.errors import distributed_errors
from caffe.parallel.layout import broadcast_unit_specs, sync_layout
from caffe.parallel.timeline import attach_compute_timeline
from poseidon import _C
from poseidon.config import PLAN_SYNC_MODES
from poseidon.plan import BROADCAST_NAME, format_plan, layer_specs, lossy_layers
from poseidon.sync.broadcast import Broadcaster, broadcast_through_rounds
from poseidon.sync.client import SyncClient
from poseidon.sync.factors import FactorLog
from poseidon.sync.round import LayerRound

_log = logging.getLogger("caffe")


class PoseidonSync:
    """Attach to `solver`, communicating through `client` (a SyncClient of a joined job).

    `hooks=False` (pycaffe's caffe.NCCL): the caller forwards the solver's on_start and
    on_gradients_ready and, layer-wise, the net's after_backward, as Caffe's NCCL object
    receives them; updates are then immediate, as in Caffe (see Note [caller's hooks])."""

    @distributed_errors
    def __init__(
        self,
        solver: Any,
        client: SyncClient,
        mode: str = "poseidon",
        force_scheme: str = "auto",
        broadcast_weights: bool = True,
        layer_schemes: dict[str, str] | None = None,
        hooks: bool = True,
    ) -> None:
        if mode not in PLAN_SYNC_MODES:
            raise ValueError(f"sync mode {mode!r}: want one of {', '.join(PLAN_SYNC_MODES)}")
        self.solver = solver
        self.net = solver.net
        self.client = client
        self.mode = mode
        self.rank = client.rank
        self.num_workers = client.num_workers
        self.iter_size = max(1, int(solver.param.iter_size))
        self.hooks = hooks
        self.deferred = hooks and mode != "ps-nooverlap" and not solver.param.clip_gradients > 0
        self.pass_index = 0
        self.pending_rate: float | None = None
        self.pending: set[int] = set()  # layers whose gradient is in flight or received
        self.started = False
        self.agreed_actions: list[tuple[int, str]] = []  # (iteration, "stop" | "snapshot")
        # False only where every worker provably starts from the same weights (the compute
        # replay's placeholders): the first step then skips rank 0's broadcast.
        self.broadcast_weights = broadcast_weights
        self._handles: list[Any] = []  # callbacks to remove at close
        self._slots: list[tuple[Any, str]] = []  # single slots (owner, name) to free at close
        layout = sync_layout(self.net)
        self._synced_params = {p for layer in layout for p in layer.param_ids}
        self.broadcaster: Broadcaster | None = None  # lossy layers' weights at the start
        self.plan = self._agree_on_plan(layout, force_scheme, layer_schemes or {})
        self.rounds = [self._make_round(layer) for layer in layout]
        self.by_index = {r.index: r for r in self.rounds}
        self._attach()
        self._closed = False
        _live.add(self)

    # ----- setup --------------------------------------------------------------------------
    def _agree_on_plan(self, layout: list, force_scheme: str,
                       layer_schemes: dict[str, str]) -> _C.Plan:  # fmt: skip
        # poseidon.plan.layer_specs: the derivation `poseidon plan` prints
        # (docs/design.md §4).
        compression = self.client.session.config.compression
        try:
            specs = layer_specs(layout, self.iter_size, self.mode, force_scheme, layer_schemes,
                                what="POSEIDON_LAYER_SCHEMES")  # fmt: skip
            extra = broadcast_unit_specs(self.net, layout, self.mode, compression, layer_schemes)
            if self.client.ranks_by_time():
                self._declare_costs(specs)
            self.schemes = self.client.agree_on_plan([*specs, *extra])
        except ValueError as e:
            raise CaffeError(f"net {self.net.name!r}: {e}") from None
        plan = self.client.plan
        assert plan is not None
        if extra:
            self.broadcaster = Broadcaster(self.client.worker, extra[0].layer_id, extra[0].m,
                                           self.client.local)  # fmt: skip
        if self.rank == 0:
            self._log_plan(plan)
        return plan

    def _declare_costs(self, specs: list) -> None:
        layers = [self.net.layers[spec.layer_id] for spec in specs]
        if all(hasattr(layer, "profiled_costs") for layer in layers):
            # The compute replay's stand-ins: the profiled device's times (as the
            # predictor plans with them), not this machine's on 1/s of the bytes.
            for spec, layer in zip(specs, layers):
                spec.measured = layer.profiled_costs(spec, self.num_workers)
            return
        # Each scheme's compute at the layers' shapes on this device
        # (poseidon/sync/measure.py). The layers' backward times are not declared: the
        # net cannot run a pass before training without consuming a batch, so the
        # schedule sees no overlap for Caffe jobs.
        self.client.measure_costs(specs, {})

    def _log_plan(self, plan: _C.Plan) -> None:
        _log.info("Poseidon: %d workers, %d server shards, sync mode %s, chunk %d bytes",
                  plan.num_workers, plan.num_servers, self.mode, plan.chunk_bytes)  # fmt: skip
        _log.info("HybComm plan (bytes per iteration per node):")
        for line in format_plan(plan, skip_names=(BROADCAST_NAME,)).splitlines():
            _log.info("    %s", line)
        lossy = lossy_layers(plan, (BROADCAST_NAME,))
        if lossy:
            _log.info("Poseidon: %d layers synchronise LOSSY (compressed gradients): %s",
                      len(lossy), ", ".join(lossy))  # fmt: skip

    def _make_round(self, layer: Any) -> LayerRound:
        engine_layer = self.net.layers[layer.index]
        if self.schemes[layer.index] != "SFB":  # PS, BF16, PowerSGD: the layer's diff range
            diff = self.net.param_diff[layer.start : layer.end]
            replayed = getattr(engine_layer, "replay_compute", None)  # the compute replay's
            return self.client.dense_round(layer, diff, replayed)
        factors = FactorLog(*engine_layer.factor_widths())
        engine_layer.sufficient_factor_sink = factors.keep_copies
        self._slots.append((engine_layer, "sufficient_factor_sink"))
        return self.client.sfb_round(layer, factors, layer.shape.rows * self.iter_size,
                                     engine_layer.add_factor_gradients)  # fmt: skip

    def _attach(self) -> None:
        net, solver = self.net, self.solver
        # Counts the iter_size passes (a layer is sent after its last one) in every mode.
        self._handles.append(net.before_forward(self._before_forward))
        if self.hooks:
            self._handles.append(net.after_backward(self.after_backward))
        if self.client.timeline is not None:
            self._handles += attach_compute_timeline(net, self.client.timeline,
                                                     lambda: self.solver.iter)  # fmt: skip
        if not self.hooks:
            return  # Note [caller's hooks]
        self._handles.append(solver.add_callback(self.on_start, self.on_gradients_ready))
        slots: list[tuple[Any, str, Any]] = [
            (net, "clear_param_diffs_hook", self._clear_param_diffs),
            (solver, "flush_hook", self.flush),
            (solver, "action_hook", self.agree_action),
        ]
        if self.deferred:
            slots.append((solver, "update_hook", self._defer_update))
        if any(r.powersgd is not None for r in self.rounds):  # Note [PowerSGD snapshots]
            slots.append((solver, "snapshot_hook", self._save_compression_state))
            slots.append((solver, "restore_hook", self._load_compression_state))
        for owner, name, hook in slots:
            setattr(owner, name, hook)
            self._slots.append((owner, name))

    # ----- solver callbacks -----------------------------------------------------------------
    @distributed_errors
    def on_start(self) -> None:
        if not self.started:
            self.started = True
            if self.broadcast_weights:
                self._broadcast_initial_weights()
            if self.hooks:
                self._reach_boundary()  # the first boundary: votes may come before the end
        self.pass_index = 0

    @distributed_errors
    def bcast(self) -> None:
        """Rank 0's parameters to every worker, now (Caffe's NCCL::Broadcast)."""
        self.started = True
        self._broadcast_initial_weights()

    @distributed_errors
    def on_gradients_ready(self) -> None:
        for r in self.rounds:
            # Driven by the caller, a layer whose after_backward it did not forward (Caffe's
            # layer_wise_reduce off, or no `net.after_backward(nccl)`) goes now.
            forwarded = self.hooks or r.index in self.pending
            if r.layer.late or self.mode == "ps-nooverlap" or not forwarded:
                self._submit(r)
        if not self.deferred:
            for r in self.rounds:
                self.client.finish(r)
            self.pending.clear()  # the solver applies the update itself, right after

    def _defer_update(self, rate: float) -> None:
        """update_hook: keep the rate; layers update as their gradients arrive."""
        self.pending_rate = rate
        for param_id in range(len(self.net.learnable_params)):
            if param_id not in self._synced_params:
                self.solver.update_param(param_id, rate)
                blob = self.net.learnable_params[param_id]
                self.solver.subtract_diff(blob.data_tensor, blob.diff_tensor)

    @distributed_errors
    def flush(self) -> None:
        """Complete every pending layer (before tests, snapshots and at the end)."""
        for r in self.rounds:
            if r.index in self.pending:
                self._complete(r)
        self.pending_rate = None

    # ----- actions every worker takes at one iteration ------------------------------------
    @distributed_errors
    def agree_action(self, action: str, at_boundary: bool) -> str:
        """solver.action_hook: this worker's requested action ("stop" after a Ctrl-C, say)
        goes to the coordinator; at the end of an iteration, returns the action the whole
        job takes there (see Note [agreed actions] in
        poseidon/include/poseidon/internal/action_rounds.h)."""
        iteration = self.solver.iter
        if at_boundary:
            self._reach_boundary()
        covered = any(kind in (action, "stop") for _, kind in self.agreed_actions)
        if action != "none" and not covered:
            self.client.worker.request_action(action, f"{action} asked on worker {self.rank}")
        if not at_boundary:
            return "none"
        due = {kind for at, kind in self.agreed_actions if at == iteration}
        self.agreed_actions = [(at, kind) for at, kind in self.agreed_actions if at > iteration]
        return "stop" if "stop" in due else ("snapshot" if due else "none")

    def _reach_boundary(self) -> None:
        """Tell the comm core where the loop is (its votes answer with it); keep what the
        rounds decided."""
        iteration = self.solver.iter
        for kind, at, reason in self.client.worker.reach_boundary(iteration):
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
    @distributed_errors
    def _before_forward(self, layer_index: int) -> None:
        if layer_index == 0:
            self.pass_index += 1
        if layer_index in self.pending:
            self._complete(self.by_index[layer_index])

    @distributed_errors
    def after_backward(self, layer_index: int) -> None:
        """Layer `layer_index`'s backward is done: send its gradient (WFBP)."""
        if self.mode == "ps-nooverlap" or self.pass_index < self.iter_size:
            return
        r = self.by_index.get(layer_index)
        if r is not None and not r.layer.late:
            self._submit(r)

    def _clear_param_diffs(self) -> None:
        keep = sorted((r.layer.start, r.layer.end) for r in self.rounds
                      if r.index in self.pending and r.scheme != "SFB")  # fmt: skip
        position = 0
        for start, end in keep:
            self.net.param_diff[position:start].zero_()
            position = end
        self.net.param_diff[position:].zero_()

    # ----- one layer's round ---------------------------------------------------------------
    def _submit(self, r: LayerRound) -> None:
        """Hand the layer's gradient (or factors) to the comm core for iteration `iter`."""
        self.pending.add(r.index)
        r.submit(self.solver.iter, self.client.now_us())

    def _complete(self, r: LayerRound) -> None:
        """Receive the mean gradient, then apply the deferred update of the layer's
        parameters."""
        self.client.finish(r)
        self.pending.discard(r.index)
        if self.pending_rate is None:
            return  # the solver itself updates (not deferred)
        start = self.client.now_us()
        for param_id in r.layer.param_ids:
            self.solver.update_param(param_id, self.pending_rate)
        self.solver.subtract_diff(self.net.param_data[r.layer.start : r.layer.end],
                                  self.net.param_diff[r.layer.start : r.layer.end])  # fmt: skip
        if self.client.timeline is not None:
            self.client.timeline.span(r.name, "apply", start, self.client.now_us(),
                                      iteration=r.iteration)  # fmt: skip

    # ----- start: every worker begins from rank 0's weights ----------------------------------
    def _broadcast_initial_weights(self) -> None:
        """Rank 0's parameters to all (Caffe's NCCL bcast), through the layers' own channels
        (poseidon/sync/broadcast.py), ending at iteration iter-1: the first training round
        is iteration iter either way."""
        exact = [r for r in self.rounds if r.exact]
        weights = [self.net.param_data[r.layer.start : r.layer.end] for r in exact]
        broadcast_through_rounds(exact, weights, self.rank, self.solver.iter - 1)
        lossy = [self.net.param_data[r.layer.start : r.layer.end] for r in self.rounds
                 if not r.exact]  # fmt: skip
        if lossy:  # a lossy wire cannot carry weights: the broadcast unit copies them
            assert self.broadcaster is not None
            self.broadcaster.from_rank0(lossy)
        if self.rank == 0:
            _log.info("Poseidon: initial weights of rank 0 broadcast to %d workers",
                      self.num_workers)  # fmt: skip

    # ----- each worker's PowerSGD state ------------------------------------------------------
    # Note [PowerSGD snapshots]. Error feedback and the warm-start Q are each worker's own, so
    # a snapshot of the job is rank 0's .solverstate plus one file per worker beside it,
    # `<state>.powersgd-rank<r>.pt`, written by every worker when the job snapshots and read
    # back by each when it resumes from that state, so that a resumed job goes on as if never
    # stopped. A worker that finds no file of its own starts from zero error (warned).
    def compression_state_file(self, state_file: str) -> str:
        return f"{state_file}.powersgd-rank{self.rank}.pt"

    @distributed_errors
    def _save_compression_state(self, state_file: str) -> None:
        self.flush()  # between steps: every round finished
        path = self.compression_state_file(state_file)
        with replacing(path, WeightsError) as tmp:
            torch.save(self.client.compression_state(), tmp)
        _log.info("Poseidon: worker %d's PowerSGD state to %s", self.rank, path)

    @distributed_errors
    def _load_compression_state(self, state_file: str) -> None:
        path = self.compression_state_file(state_file)
        if not os.path.exists(path):
            _log.warning("Poseidon: no %s: worker %d's PowerSGD error feedback starts from "
                         "zero", path, self.rank)  # fmt: skip
            return
        try:
            state = torch.load(path, weights_only=True)
            self.client.load_compression_state(state)
        except (ValueError, RuntimeError, OSError) as e:
            raise CaffeError(f"{path}: {e}") from None
        _log.info("Poseidon: worker %d's PowerSGD state from %s", self.rank, path)

    # ----- end -------------------------------------------------------------------------------
    @distributed_errors
    def close(self, error: BaseException | None = None) -> None:
        """Finish cleanly, or abort the whole job with the reason if training failed; either
        way every callback and hook this syncer attached is removed. A second call does
        nothing."""
        if self._closed:
            return
        self._closed = True
        _live.discard(self)
        try:
            if error is None:
                self.flush()
            self.client.close(error)
        finally:
            self._detach()

    def _detach(self) -> None:
        """Remove this syncer's callbacks and free its single slots (caffe/training_hooks.py)
        for whatever attaches next."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for owner, name in self._slots:
            setattr(owner, name, None)
        self._slots.clear()

    def traffic(self) -> dict[int, tuple[int, int]]:
        """Bytes (sent, received) so far per layer index (the broadcast unit's, not a layer's,
        left out)."""
        return {i: t for i, t in self.client.traffic().items() if i in self.by_index}

    @distributed_errors
    def barrier(self, name: str) -> None:
        """Every worker reaches this point (experiments time the same window on all)."""
        self.client.worker.barrier(name)


# ----- interpreter exit ------------------------------------------------------------------------
# A script that attaches a syncer and ends without closing it — an exception, or no close() —
# would leave the comm core's threads running into the interpreter's teardown (the process
# then dies in std::terminate, and the peers learn only that it vanished). At exit each live
# syncer is closed: aborting the job with the exception that ends the program (Python leaves
# it in sys.last_value) so that every worker stops with its reason, or cleanly.
_live: weakref.WeakSet[PoseidonSync] = weakref.WeakSet()


def _close_all() -> None:
    error = getattr(sys, "last_value", None)
    for sync in list(_live):
        with contextlib.suppress(Exception):
            sync.close(error)


atexit.register(_close_all)
