"""poseidon.torch.DistributedDataParallel: Poseidon's WFBP and HybComm for any torch.nn model,
called like torch.nn.parallel.DistributedDataParallel.

    model = poseidon.torch.DistributedDataParallel(model)
    loss = loss_fn(model(x), y); loss.backward()     # .grad holds the mean over the workers
    optimizer.step()

Note [when gradients move]. Each parameter's post-accumulate-grad hook counts it done (an SFB
Linear's output gradient does, Note [factor capture] in factor_capture.py); when every
parameter of a unit is (poseidon/torch/units.py), the unit's round starts at once —
while backward goes on with the layers below it (WFBP) — and the send queue puts lower
layers first on the wire. The first hook of a backward also queues a callback for its end,
which starts the units that had no gradient (unused parameters: the job never waits for
them) and, with wait="backward" (the default, DDP's contract), waits for every round and
writes the means into .grad before backward() returns. With wait="step" the wait moves to
just before the next optimizer step (a step pre-hook of every torch.optim optimizer), so that
work between backward and step overlaps the last rounds too; gradients are then not final
until that step, so clip_grad_norm_ and friends must not run in between.

Note [the plan]. BestScheme needs each nn.Linear's K — the rows of its GEMM, batch ×
sequence — which the first forward reveals. So the plan is made there: the first input goes
once through a copy of the model (on the meta device when it can: Note [measuring K] in
units.py), the workers agree on the plan, rank 0's parameters and buffers are broadcast, and
only then does the real forward run. Models with no Linear that could take SFB (or sync modes
other than "poseidon", or a given sfb_rows) plan and broadcast in the constructor, as DDP does
— unless the plan is ranked by time.
When the plan is ranked by time (POSEIDON_LINK_RATE known), each worker first times every
candidate scheme's compute at the layers' shapes (poseidon/sync/measure.py) and, when the
plan waits for the first input, each unit's share of a backward pass on a copy of the model
(timing.py): the coordinator's schedule weighs what hides behind what.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from poseidon import _C
from poseidon.config import PLAN_SYNC_MODES
from poseidon.failures import naming_the_process
from poseidon.sync.broadcast import Broadcaster
from poseidon.sync.client import SyncClient
from poseidon.sync.job import join
from poseidon.timeline import Timeline
from poseidon.torch.factor_capture import LinearCapture
from poseidon.torch.plan import (
    broadcast_floats,
    format_torch_plan,
    state_tensors,
    torch_layer_specs,
)
from poseidon.torch.timing import measure_unit_backward
from poseidon.torch.unit_sync import UnitSync
from poseidon.torch.units import SyncUnit, measure_linear_rows, sync_units, unit_layout

SYNC_MODES = PLAN_SYNC_MODES  # the modes with a HybComm plan: all but "allreduce"
WAIT_MODES = ("backward", "step")
_live: weakref.WeakSet[DistributedDataParallel] = weakref.WeakSet()


class DistributedDataParallel(nn.Module):
    """A drop-in for torch.nn.parallel.DistributedDataParallel over Poseidon's comm core.

    DDP's arguments are accepted: process_group must be None (the job is every worker),
    device_ids name one device at most; bucket_cap_mb (chunks are POSEIDON_CHUNK_BYTES),
    find_unused_parameters (always handled), static_graph and the rest are ignored.
    Poseidon's own: `sync` (POSEIDON_SYNC: poseidon = WFBP + HybComm, wfbp = all PS,
    ps-nooverlap = all PS after the whole backward), `scheme` / `layer_schemes` (force PS or
    SFB, as POSEIDON_SCHEME / POSEIDON_LAYER_SCHEMES; a layer may also be forced to "bf16"
    or "powersgd"), `compression` (the lossy schemes the cost model may pick per layer:
    "none", the default, "bf16", "powersgd[:R]" or "auto[:R]", as POSEIDON_COMPRESSION) and
    `powersgd_rank`, `wait` (Note [when gradients move]),
    `accumulation_steps` (micro-batches per synchronised step) and `sfb_rows` (each
    nn.Linear's K, when known: no probe forward) are hints: an SFB layer is planned for the
    rows of its first forward times the steps, and a step that brings more (no_sync()
    accumulation, a K that changes) sends them anyway, up to 16 times the planned rows or
    twice its gradient (with several workers per machine the machine's slots are fixed: pass
    them)."""

    def __init__(
        self,
        module: nn.Module,
        device_ids: list[int] | None = None,
        output_device: int | None = None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group: Any = None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        *,
        sync: str | None = None,
        scheme: str | None = None,
        layer_schemes: dict[str, str] | None = None,
        compression: str | None = None,
        powersgd_rank: int | None = None,
        wait: str = "backward",
        accumulation_steps: int = 1,
        sfb_rows: int | None = None,
    ) -> None:
        super().__init__()
        if process_group is not None:
            raise ValueError("poseidon.torch.DistributedDataParallel: process_group must be "
                             "None (the job is every worker of the Poseidon job)")  # fmt: skip
        if dim != 0 or (device_ids is not None and len(device_ids) > 1):
            raise ValueError("poseidon.torch.DistributedDataParallel: one device per process "
                             "(device_ids=[i] or None) and dim=0, as DDP recommends")  # fmt: skip
        if wait not in WAIT_MODES:
            raise ValueError(f"wait={wait!r}: want one of {', '.join(WAIT_MODES)}")
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps={accumulation_steps}: want >= 1")
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.wait = wait
        self.accumulation_steps = accumulation_steps
        self.sfb_rows = sfb_rows
        self.units: list[SyncUnit] = sync_units(module)
        self.device = _device_of(module)
        self.iteration = 0
        self._syncing = True  # False inside no_sync()
        self._in_backward = False
        self._pending = False  # rounds submitted, not yet waited for
        self._planned = False
        self._closed = False
        self.syncs: list[UnitSync] = []
        self.plan: _C.Plan | None = None
        self._hooks: list[Any] = []
        self._backward_mark_us = 0.0  # the timeline's last backward event
        self._compression_state: dict[str, Any] | None = None  # to load when planned
        session = join({"sync": sync, "scheme": scheme, "layer_schemes": layer_schemes,
                        "compression": compression, "powersgd_rank": powersgd_rank})  # fmt: skip
        self.config = session.config
        self.client = SyncClient(session, self.device, SyncClient.timeline_of(self.config))
        self.timeline: Timeline | None = self.client.timeline  # POSEIDON_TIMELINE
        try:
            self._start(sfb_rows)
        except BaseException as e:
            self.client.close(e)  # the other workers stop too, with the reason
            raise

    def _start(self, sfb_rows: int | None) -> None:
        config = self.config
        if config.sync not in SYNC_MODES:
            raise ValueError(f"sync mode {config.sync!r} is not Poseidon's (want one of "
                             f"{', '.join(SYNC_MODES)}; for an all-reduce use PyTorch's "
                             "DistributedDataParallel)")  # fmt: skip
        named = {u.name for u in self.units}
        unknown = sorted(set(config.layer_schemes) - named)
        if unknown:
            known = ", ".join(sorted(named)) or "none"
            raise ValueError(f"layer_schemes names {', '.join(unknown)}: not a synchronised "
                             f"module (those are {known})")  # fmt: skip
        self.worker = self.client.worker
        self.num_workers = self.client.num_workers
        self.rank = self.client.rank
        _live.add(self)
        rows_known = sfb_rows is not None or not any(u.sfb_capable for u in self.units)
        # A plan ranked by time waits for the first input even so: it times the backward.
        if config.sync != "poseidon" or (rows_known and not self.client.ranks_by_time()):
            self._make_plan(self._given_rows())

    # ----- the plan (Note [the plan]) -----------------------------------------------------
    def layer_specs(self, rows: dict[int, int]) -> list[Any]:
        """The LayerSpecs this worker declares (poseidon plan --torch prints the same)."""
        c = self.config
        return torch_layer_specs(self.module, self.units, rows, self.accumulation_steps,
                                 c.sync, c.scheme, c.layer_schemes)  # fmt: skip

    def _given_rows(self) -> dict[int, int]:
        """Every unit's K when the first input is not needed to know it: sfb_rows, or 1 for a
        model with no Linear that could take SFB (its K is never used)."""
        return {u.index: self.sfb_rows or 1 for u in self.units}

    def _make_plan(self, rows: dict[int, int], inputs: tuple[tuple, dict] | None = None) -> None:
        specs = self.layer_specs(rows)
        if self.client.ranks_by_time():  # Note [the plan]: timed on a copy, first input
            backward = measure_unit_backward(self.module, self.units, *inputs) if inputs else {}
            self.client.measure_costs(specs, backward)
        schemes = self.client.agree_on_plan(specs)
        self.plan = self.client.plan
        for unit, layer in zip(self.units, unit_layout(self.units, rows)):
            capacity = rows.get(unit.index, 1) * self.accumulation_steps
            self.syncs.append(UnitSync(unit, layer, schemes[unit.index], self.client,
                                       capacity))  # fmt: skip
        broadcast_id = len(self.units)
        self.broadcaster = Broadcaster(self.worker, broadcast_id, broadcast_floats(self.module),
                                       self.client.local)  # fmt: skip
        self._attach()
        self._planned = True
        if self._compression_state is not None:
            state, self._compression_state = self._compression_state, None
            self.client.load_compression_state(state)
        if self.rank == 0:  # as the Caffe path does: what each layer moves, and how
            print(f"[poseidon] {self.num_workers} workers, sync mode {self.config.sync}"
                  f"\n{format_torch_plan(self.plan)}", file=sys.stderr, flush=True)  # fmt: skip
        with self._peers_named():
            self.broadcaster.from_rank0(state_tensors(self.module))

    @contextlib.contextmanager
    def _peers_named(self) -> Iterator[None]:
        """A peer failure raised inside names a lost colocated shard's worker too (shard r
        runs inside rank r's process: either connection may be the first seen to close)."""
        try:
            yield
        except _C.CommError as e:
            raise naming_the_process(e, self.config.colocated_shards,
                                     self.config.workers_per_host) from None  # fmt: skip

    # ----- hooks ----------------------------------------------------------------------------
    def _attach(self) -> None:
        owners = {}
        for sync in self.syncs:
            for p in sync.unit.params:
                owners[id(p)] = sync
                self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad))
            if sync.factors is not None:  # SFB: Note [factor capture] in factor_capture.py
                received = functools.partial(self._on_factor, sync)
                capture = LinearCapture(sync.unit.module, sync.factors.remember, received)
                self._hooks.extend(capture.attach())
        self._owner = owners
        if self.wait == "step":
            self._hooks.append(register_optimizer_step_pre_hook(
                lambda optimizer, args, kwargs: self.synchronize()))  # fmt: skip

    def _backward_reached(self) -> None:
        """The first hook of a backward: have its end call us (Note [when gradients move])."""
        if not self._in_backward:
            self._in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
            if self.timeline is not None:
                self._backward_mark_us = self.timeline.now_us()

    def _on_grad(self, param: nn.Parameter) -> None:
        """A parameter's gradient is final for this backward (PS units)."""
        sync = self._owner[id(param)]
        if sync.factors is not None:
            name = sync.unit.name
            which = next(n for n, p in zip(sync.unit.param_names, sync.unit.params) if p is param)
            raise RuntimeError(
                f"nn.Linear {name!r} is synchronised by sufficient factors, but its parameter "
                f"{which!r} got a gradient "
                "outside the layer's own forward (used directly, as nn.MultiheadAttention uses "
                "out_proj.weight, or shared with another module), which no factors carry: "
                f"send it through the parameter server, layer_schemes={{{name!r}: 'ps'}}"
            )
        if not self._syncing:
            return  # no_sync(): gradients accumulate locally
        self._backward_reached()
        sync.ready += 1
        if sync.ready == len(sync.unit.params):
            self._unit_done(sync)

    def _on_factor(self, sync: UnitSync, key: int, dy: torch.Tensor) -> None:
        """An SFB layer's output gradient has come (factor_capture.py)."""
        assert sync.factors is not None
        every_call = sync.factors.received(key, dy)
        if self._syncing:
            self._backward_reached()
            if every_call:
                self._unit_done(sync)

    def _unit_done(self, sync: UnitSync) -> None:
        """Every gradient of the unit is final: its round starts now (WFBP), unless the sync
        mode waits for the whole backward. On the timeline, the backward from the last event
        to here is the unit's."""
        now = 0.0
        if self.timeline is not None:
            now = self.timeline.now_us()
            self.timeline.span(f"backward {sync.unit.name}", "compute", self._backward_mark_us,
                               now, iteration=self.iteration)  # fmt: skip
            self._backward_mark_us = now
        if not sync.submitted and self.config.sync != "ps-nooverlap":
            sync.submit(self.iteration, now)

    def _end_of_backward(self) -> None:
        self._in_backward = False
        now = self.timeline.now_us() if self.timeline is not None else 0.0
        for sync in self.syncs:
            if not sync.submitted:
                sync.submit(self.iteration, now)  # unused parameters, and ps-nooverlap
        self._pending = True
        if self.wait == "backward":
            self.synchronize()

    def synchronize(self) -> None:
        """Wait for this step's rounds and leave the mean gradients in .grad (with
        wait="backward", backward() already did)."""
        if not self._pending:
            return
        self._pending = False
        with self._peers_named():
            for sync in self.syncs:
                sync.finish(self.client)
                if sync.factors is not None:
                    sync.factors.waiting.clear()  # inputs of forwards that had no backward
        self.iteration += 1

    # ----- PowerSGD's state ---------------------------------------------------------------
    def compression_state(self) -> dict[str, Any]:
        """This worker's PowerSGD state per module name (error feedback and warm-start Q;
        empty when no layer runs PowerSGD): save it with the checkpoint of each rank, so that
        a resumed job goes on as if never stopped. Between steps."""
        self.synchronize()
        return self.client.compression_state()

    def load_compression_state(self, state: dict[str, Any]) -> None:
        """Restore `compression_state()` of the same rank and model: now, or when the plan is
        made (at the first forward, for a model with nn.Linear layers). Raises ValueError
        naming the layer that does not fit (then, or at that forward)."""
        if not self._planned:
            self._compression_state = state
            return
        self.client.load_compression_state(state)

    # ----- nn.Module -----------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise RuntimeError("poseidon.torch.DistributedDataParallel: used after close()")
        self.synchronize()  # wait="step" and no optimizer step in between
        if not self._planned:
            rows = (self._given_rows() if self.sfb_rows is not None
                    else measure_linear_rows(self.module, self.units, args, kwargs))  # fmt: skip
            self._make_plan(rows, (args, kwargs))
        if self.broadcast_buffers and self.module.training:
            buffers = list(self.module.buffers())
            if buffers:
                with self._peers_named():
                    self.broadcaster.from_rank0(buffers)
        if self.timeline is None:
            return self.module(*args, **kwargs)
        start = self.timeline.now_us()
        try:
            return self.module(*args, **kwargs)
        finally:
            self.timeline.span("forward", "compute", start, self.timeline.now_us(),
                               iteration=self.iteration)  # fmt: skip

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients locally; the first one outside sends
        the sum (SFB layers: every micro-batch's factors)."""
        previous, self._syncing = self._syncing, False
        try:
            yield
        finally:
            self._syncing = previous

    # ----- the end ------------------------------------------------------------------------
    def close(self, error: BaseException | None = None) -> None:
        """Leave the job: cleanly (waiting for every worker to finish), or with `error`,
        aborting it. Called at interpreter exit if not before (then aborting when the
        program is ending on an exception)."""
        if self._closed:
            return
        self._closed = True
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        self.client.close(error)


def _device_of(module: nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


# ----- interpreter exit ------------------------------------------------------------------------
def _close_all() -> None:
    """Close every live wrapper at interpreter exit: aborting the job with the exception that
    is ending the program (Python leaves it in sys.last_value), so that the other workers
    stop at once with its reason, or cleanly."""
    error = getattr(sys, "last_value", None)
    for ddp in list(_live):
        with contextlib.suppress(Exception):
            ddp.close(error)


atexit.register(_close_all)
