"""The modern baseline for a Caffe Solver: PyTorch DDP's bucketed ring all-reduce
(poseidon/sync/allreduce.py's BucketReducer), driven by the Net's hooks.

Same compute as the Poseidon modes, same Solver, same hooks; only the communication
differs. The buckets are slices of Net.param_diff over the net's layout (layout.py, the
derivation every syncer uses); `after_backward(l)` on the last pass of iter_size marks layer
l ready, `on_gradients_ready` launches the late buckets and waits for all of them (the mean
gradient), and the first `on_start` checks that every worker runs the same net and
broadcasts rank 0's Net.param_data.

Differences from DDP, on purpose: a bucket never grows past its cap unless one layer alone
is larger (DDP closes a bucket once it reaches the cap, so it may overshoot by a tensor);
the layout is fixed from the net, not rebuilt from the order seen in iteration 1 (a Caffe
net's backward order is its layer order reversed, known in advance).

It relies on the Net and Solver hooks only (never on autograd), so replayed compute, where
layers sleep their profiled times, drives it the same way.
"""

from __future__ import annotations

import logging
from typing import Any

import torch.distributed as dist

from caffe.common import set_multiprocess, set_solver_count, set_solver_rank
from caffe.parallel.errors import distributed_errors
from caffe.parallel.layout import sync_layout
from caffe.parallel.timeline import attach_compute_timeline
from poseidon.sync.allreduce import DEFAULT_TIMEOUT_S, BucketReducer, Rendezvous, join_group
from poseidon.sync.buckets import (
    DEFAULT_BUCKET_CAP_BYTES,
    DEFAULT_FIRST_BUCKET_BYTES,
    bucket_layout,
)
from poseidon.timeline import Timeline

_log = logging.getLogger("caffe")


class AllreduceSync:
    """Attach to `solver` over the initialised process group `group` (default: the world)."""

    @distributed_errors
    def __init__(
        self,
        solver: Any,
        *,
        group: dist.ProcessGroup | None = None,
        bucket_cap_bytes: int = DEFAULT_BUCKET_CAP_BYTES,
        first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        timeline: Timeline | None = None,
    ) -> None:
        self.solver = solver
        self.net = solver.net
        self.timeline = timeline
        self.iter_size = max(1, int(solver.param.iter_size))
        buckets = bucket_layout(sync_layout(self.net), first_bucket_bytes, bucket_cap_bytes)
        self.reducer = BucketReducer(self.net.param_diff, buckets, lambda: self.solver.iter,
                                     group=group, timeout_s=timeout_s,
                                     timeline=timeline)  # fmt: skip
        self.rank, self.world_size = self.reducer.rank, self.reducer.world_size
        self.owns_group = False  # set by attach_allreduce: close() destroys it
        self.started = False
        self.pass_index = 0
        self._closed = False
        self._handles = [self.net.before_forward(self._before_forward),
                         self.net.after_backward(self._after_backward)]  # fmt: skip
        if timeline is not None:
            self._handles += attach_compute_timeline(self.net, timeline, lambda: solver.iter)
        self._handles.append(solver.add_callback(self.on_start, self.on_gradients_ready))

    @property
    def buckets(self) -> list:
        return self.reducer.buckets

    # ----- solver callbacks -----------------------------------------------------------------
    @distributed_errors
    def on_start(self) -> None:
        if not self.started:
            self.started = True
            self.reducer.check_same_layout(self.net.param_data.numel())
            self._broadcast_initial_weights()
        self.pass_index = 0
        self.reducer.reset()

    @distributed_errors
    def on_gradients_ready(self) -> None:
        """Launch what is left (the late buckets) and leave the MEAN gradient everywhere."""
        self.reducer.finish()

    # ----- net callbacks ----------------------------------------------------------------------
    def _before_forward(self, layer_index: int) -> None:
        if layer_index == 0:
            self.pass_index += 1

    @distributed_errors
    def _after_backward(self, layer_index: int) -> None:
        if self.pass_index >= self.iter_size:  # iter_size > 1: gradients still accumulate
            self.reducer.layer_ready(layer_index)

    def _broadcast_initial_weights(self) -> None:
        """Rank 0's parameters to all, every learnable blob at once (frozen layers too:
        their fillers drew from seed + rank). Solver history needs no broadcast: it is
        zero at start, or restored from the same .solverstate by every worker, which the
        layout check's iteration guards (as in PoseidonSync and Caffe's NCCL bcast)."""
        self.reducer.broadcast_weights(self.net.param_data)
        if self.rank == 0:
            _log.info("All-reduce: %d workers, %s backend; initial weights of rank 0 broadcast; "
                      "buckets in launch order:", self.world_size,
                      dist.get_backend(self.reducer.group))  # fmt: skip
            for b in self.buckets:
                _log.info("    bucket %-3d %12d bytes  %s%s", b.index, b.num_bytes,
                          ", ".join(x.name for x in b.layers),
                          "  (late: after the whole backward)" if b.late else "")  # fmt: skip

    @distributed_errors
    def barrier(self, name: str) -> None:
        """Every worker reaches this point (experiments time the same window on all)."""
        self.reducer.barrier(name)

    # ----- end --------------------------------------------------------------------------------
    @distributed_errors
    def close(self, error: BaseException | None = None) -> None:
        """Finish cleanly (destroy the process group this syncer created), or abort: with an
        error, pending collectives are not waited for; this process exits, its connections
        close, and every peer's next all-reduce fails at once naming its bucket. Either way
        this syncer's callbacks are removed."""
        if self._closed:
            return
        self._closed = True
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if error is None:
            self.reducer.wait_all()
            if self.owns_group and dist.is_initialized():
                dist.destroy_process_group()
        if self.timeline is not None:
            self.timeline.close()


@distributed_errors
def prepare_allreduce_worker(rendezvous: Rendezvous | None = None) -> int:
    """Before nets are built: solver rank and count (data layers shard offset % P == rank;
    the seed is random_seed + rank). Returns the local rank (which GPU the worker uses)."""
    rendezvous = rendezvous or Rendezvous.from_env()
    set_solver_count(rendezvous.world_size)
    set_solver_rank(rendezvous.rank)
    set_multiprocess(True)
    return rendezvous.local_rank


@distributed_errors
def attach_allreduce(
    solver: Any,
    rendezvous: Rendezvous | None = None,
    timeline: Timeline | None = None,
    **options: Any,
) -> AllreduceSync:
    """Join the process group (torchrun's variables, `rendezvous`) and attach to `solver`.
    A peer that never arrives fails the join after the timeout with a message, never a
    hang. `options` go to AllreduceSync."""
    rendezvous = rendezvous or Rendezvous.from_env()
    join_group(rendezvous, solver.net.device)
    try:
        sync = AllreduceSync(solver, timeout_s=rendezvous.timeout_s, timeline=timeline, **options)
    except BaseException:
        dist.destroy_process_group()
        raise
    sync.owns_group = True
    return sync
