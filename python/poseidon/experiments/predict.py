"""Predict an iteration's time on P nodes from a compute profile, without running anything.

The model is the system as built, one worker and one shard per node (the paper's
layout), every node alike:

- Compute: the profile's per-layer forward and backward times, in net order. An FC layer
  synchronised by SFB skips its dW share of backward and, before its next forward,
  rebuilds the gradient from K·P rows at the profile's GEMM rate (SfbTiming.rebuild_s).
- Bytes: the plan of the C++ cost model (`poseidon._C.make_plan`, the coordinator's own
  function): each layer's scheme and its PS chunks and their shards. A PS chunk crosses a
  node's link when its shard is elsewhere; its sum comes back once every worker pushed it.
- Links: every node has a full-duplex link of `bandwidth × goodput` bytes/s each way.
  Every node does the same, so one node's uplink is simulated (its downlink mirrors it)
  as a fluid queue shared by two streams, the worker's pushes and SFB factors, and the
  shard's replies, each served in the comm core's priority order (older iteration, lower
  layer, earlier chunk: Note [send priority]); the two streams split the link evenly when
  both have data (TCP between their connections).
- The bulk-synchronous round of a PS layer: its chunks are pushed in turns of P (Note
  [push order]); a turn's sums go back once the turn's pushes are in. A turn of m < P
  chunks reaches only m shards, whose links carry all of it: the turn moves at m/P of the
  rate at most.
- WFBP: a layer's sync starts when its backward ends and must be complete (and, for SFB,
  rebuilt) before its forward in the next iteration. ps-nooverlap sends every layer after
  the whole backward and waits for all before updating. allreduce is DDP's: buckets of
  consecutive layers (caffe/allreduce_sync.py's layout), each a ring all-reduce of
  2·(P−1)/P of its bytes per node, one after the other as backward produces them; the
  update waits for the last.

Every iteration begins with nothing in flight (each layer's sync is waited on before its
next forward), so one backward pass and the forward that follows are one period.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from poseidon.experiments.profile import Profile

MODES = ("ps-nooverlap", "wfbp", "poseidon", "allreduce")
FRAME_HEADER_BYTES = 48  # poseidon/include/poseidon/frame.h
# TCP payload per Ethernet frame on the wire (MTU 1500, TCP timestamps; the preamble,
# inter-frame gap and FCS count): what a real 10 GbE link delivers.
TCP_GOODPUT_ETHERNET = 1448 / 1538


@dataclass(frozen=True)
class Link:
    """A node's link: bits/s each way, the fraction TCP's payload gets, one-way latency."""

    bandwidth_bps: float
    goodput: float = TCP_GOODPUT_ETHERNET
    latency_s: float = 25e-6

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_bps / 8 * self.goodput


@dataclass
class CellPrediction:
    mode: str
    nodes: int
    iteration_s: float
    compute_s: float  # forward + backward as the mode runs them (SFB skips dW)
    rebuild_s: float  # SFB rebuild GEMMs
    wait_s: float  # the rest: time the device waits for communication
    bytes_per_node: float  # sent by one node per iteration (= received)


@dataclass
class _Transfer:
    stream: int  # 0: the worker's sends, 1: the shard's replies
    priority: tuple
    volume: float  # bytes on this node's uplink
    cap: float  # bytes/s at most (a turn that reaches few shards)
    ready: float
    on_done: Callable[[float], None] | None = None
    remaining: float = field(init=False)
    done: float = math.nan

    def __post_init__(self) -> None:
        self.remaining = self.volume


class Uplink:
    """One node's uplink as a fluid queue: two streams, strict priority within each."""

    def __init__(self, bytes_per_s: float) -> None:
        self.capacity = bytes_per_s
        self._pending: list[tuple[float, int, _Transfer]] = []
        self._count = 0

    def add(self, transfer: _Transfer) -> None:
        heapq.heappush(self._pending, (transfer.ready, self._count, transfer))
        self._count += 1

    def run(self) -> None:
        active: list[_Transfer] = []
        now = 0.0
        while self._pending or active:
            if not active:
                now = max(now, self._pending[0][0])
            while self._pending and self._pending[0][0] <= now + 1e-15:
                active.append(heapq.heappop(self._pending)[2])
            rates = self._allocate(active)
            horizon = self._pending[0][0] - now if self._pending else math.inf
            for transfer, rate in zip(active, rates):
                if rate > 0:
                    horizon = min(horizon, transfer.remaining / rate)
            now += horizon
            finished = []
            for transfer, rate in zip(active, rates):
                transfer.remaining -= rate * horizon
                if transfer.remaining <= 1e-9 * max(1.0, transfer.volume):
                    finished.append(transfer)
            for transfer in finished:
                active.remove(transfer)
                transfer.done = now
                if transfer.on_done is not None:
                    transfer.on_done(now)

    def _allocate(self, active: Sequence[_Transfer]) -> list[float]:
        streams: dict[int, list[_Transfer]] = {}
        for transfer in active:
            streams.setdefault(transfer.stream, []).append(transfer)
        demand = {s: sum(t.cap for t in items) for s, items in streams.items()}
        share = _fair_shares(demand, self.capacity)
        rate: dict[int, float] = {}
        for s, items in streams.items():
            left = share[s]
            for transfer in sorted(items, key=lambda t: t.priority):
                rate[id(transfer)] = min(transfer.cap, left)
                left -= rate[id(transfer)]
        return [rate[id(t)] for t in active]


def _fair_shares(demand: dict[int, float], capacity: float) -> dict[int, float]:
    """Max-min fair split of `capacity` among streams that want `demand` each."""
    share = dict.fromkeys(demand, 0.0)
    left, open_streams = capacity, sorted(demand, key=lambda s: demand[s])
    while open_streams:
        equal = left / len(open_streams)
        s = open_streams[0]
        if demand[s] <= equal:
            share[s] = demand[s]
            left -= demand[s]
            open_streams.pop(0)
        else:
            for s in open_streams:
                share[s] = equal
            break
    return share


# ----- the plan of one cell ------------------------------------------------------------------
@dataclass
class _SyncedLayer:
    index: int
    scheme: str  # "PS" or "SFB"
    late: bool
    chunk_bytes: list[float]  # PS: the sizes of its chunks, in order
    factor_bytes: float  # SFB: one worker's factors
    rebuild_s: float  # SFB: the rebuild GEMM on P nodes
    skipped_s: float  # SFB: the dW share of backward it skips


def _planned_layers(
    profile: Profile, mode: str, nodes: int, chunk_bytes: int
) -> list[_SyncedLayer]:
    from poseidon import _C
    from poseidon.plan import layer_spec

    force = "auto" if mode == "poseidon" else "ps"
    specs, synced = [], []
    for index, layer in enumerate(profile.layers):
        if layer.sync is None:
            continue
        sync = layer.sync
        kind = "other" if sync.late and sync.kind == "FC" else sync.kind
        specs.append(
            layer_spec(index, layer.name, kind, sync.m, sync.n, sync.rows, sync.floats, force)
        )
        synced.append(index)
    plan = _C.make_plan(specs, nodes, nodes, chunk_bytes)
    out = []
    for lp in plan.layers:
        layer = profile.layers[lp.layer_id]
        sync = layer.sync
        if lp.scheme == _C.Scheme.SFB:
            if layer.sfb is None:
                raise ValueError(
                    f"profile {profile.label()}: FC layer {layer.name!r} has no "
                    "sfb timing (needed for the rebuild GEMM)"
                )
            rows = sync.rows * nodes
            out.append(
                _SyncedLayer(
                    lp.layer_id,
                    "SFB",
                    sync.late,
                    [],
                    4.0 * sync.rows * (sync.m + sync.n),
                    layer.sfb.rebuild_s(sync.m, sync.n, rows),
                    layer.sfb.weight_grad_s,
                )
            )
            continue
        sizes = []
        for chunk in range(lp.num_chunks):
            begin = chunk * lp.chunk_floats
            sizes.append(4.0 * max(0, min(lp.chunk_floats, sync.floats - begin)))
        out.append(_SyncedLayer(lp.layer_id, "PS", sync.late, sizes, 0.0, 0.0, 0.0))
    return out


# ----- one iteration ---------------------------------------------------------------------------
def predict_cell(
    profile: Profile,
    mode: str,
    nodes: int,
    link: Link,
    chunk_bytes: int = 1 << 20,
    buckets: Callable[[Profile], list[tuple[list[int], float]]] | None = None,
) -> CellPrediction:
    """The steady-state iteration of `mode` on `nodes` nodes (see the module docstring).
    `buckets` gives the all-reduce mode's buckets as (layer indices, bytes), default DDP's."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: want one of {', '.join(MODES)}")
    if nodes < 1:
        raise ValueError(f"{nodes} nodes (want >= 1)")
    layers = profile.layers
    planned = (
        {}
        if mode == "allreduce"
        else {s.index: s for s in _planned_layers(profile, mode, nodes, chunk_bytes)}
    )
    # Backward: layer L-1 down to 0; a layer's sync may start when its backward ends.
    now, backward_end = 0.0, {}
    compute = 0.0
    for index in range(len(layers) - 1, -1, -1):
        spent = layers[index].backward_s
        synced = planned.get(index)
        if synced is not None and synced.scheme == "SFB":
            spent = max(0.0, spent - synced.skipped_s)
        now += spent
        compute += spent
        backward_end[index] = now
    backward_s = now
    if mode == "allreduce":
        done, sent = _allreduce(profile, nodes, link, backward_end, buckets)
        start_forward = max([backward_s, *done.values()])
        waits_per_layer = False
    else:
        submit = {
            i: (backward_s if (s.late or mode == "ps-nooverlap") else backward_end[i])
            for i, s in planned.items()
        }
        done, sent = _communicate(planned, submit, nodes, link)
        waits_per_layer = mode != "ps-nooverlap"
        start_forward = backward_s if waits_per_layer else max([backward_s, *done.values()])
    # Forward: each layer waits for its own sync (deferred update) and rebuilds if SFB.
    now, rebuild = start_forward, 0.0
    for index, layer in enumerate(layers):
        synced = planned.get(index)
        if synced is not None:
            if waits_per_layer:
                now = max(now, done[index])
            if synced.scheme == "SFB":
                now += synced.rebuild_s
                rebuild += synced.rebuild_s
        now += layer.forward_s
        compute += layer.forward_s
    return CellPrediction(mode, nodes, now, compute, rebuild, now - compute - rebuild, sent)


def _communicate(
    planned: dict[int, _SyncedLayer], submit: dict[int, float], nodes: int, link: Link
) -> tuple[dict[int, float], float]:
    """When each layer's sync completes on one node, and the bytes that node sends."""
    if nodes == 1:  # the only shard is in-process: nothing crosses a link
        return dict(submit), 0.0
    uplink = Uplink(link.bytes_per_s)
    done: dict[int, float] = {}
    remote = (nodes - 1) / nodes  # a node's share of each chunk that is not its own
    sent = 0.0
    for index, layer in planned.items():
        if layer.scheme == "SFB":
            volume = (nodes - 1) * (layer.factor_bytes + FRAME_HEADER_BYTES)
            sent += volume

            def finish(t: float, index: int = index) -> None:
                done[index] = t + link.latency_s

            uplink.add(_Transfer(0, (index, 0), volume, link.bytes_per_s, submit[index], finish))
            continue
        turns = [layer.chunk_bytes[k : k + nodes] for k in range(0, len(layer.chunk_bytes), nodes)]
        left = [len(turns)]
        for turn_index, turn in enumerate(turns):
            volume = remote * (sum(turn) + FRAME_HEADER_BYTES * len(turn))
            cap = link.bytes_per_s * len(turn) / nodes
            sent += 2 * volume

            def replies(
                t: float, index=index, turn_index=turn_index, volume=volume, cap=cap, left=left
            ) -> None:
                def last(t2: float) -> None:
                    left[0] -= 1
                    if left[0] == 0:
                        done[index] = t2 + link.latency_s

                uplink.add(_Transfer(1, (index, turn_index), volume, cap, t + link.latency_s, last))

            uplink.add(_Transfer(0, (index, turn_index), volume, cap, submit[index], replies))
    uplink.run()
    return done, sent


def _allreduce(
    profile: Profile,
    nodes: int,
    link: Link,
    backward_end: dict[int, float],
    buckets: Callable[[Profile], list[tuple[list[int], float]]] | None,
) -> tuple[dict[int, float], float]:
    """DDP: each bucket's ring all-reduce starts when its last layer's backward is done
    and the previous bucket's all-reduce is; 2(P-1) steps of 1/P of the bucket each."""
    if buckets is None:
        from poseidon.experiments.buckets import ddp_buckets

        buckets = ddp_buckets
    done: dict[int, float] = {}
    if nodes == 1:
        return done, 0.0
    free, sent = 0.0, 0.0
    for layer_indices, size in buckets(profile):
        ready = max(backward_end[i] for i in layer_indices)
        volume = 2.0 * (nodes - 1) / nodes * size
        free = max(free, ready) + volume / link.bytes_per_s + 2 * (nodes - 1) * link.latency_s
        sent += volume
        done[min(layer_indices)] = free
    return done, sent


def predict(
    profile: Profile,
    modes: Sequence[str],
    nodes: Sequence[int],
    link: Link,
    chunk_bytes: int = 1 << 20,
) -> list[CellPrediction]:
    return [predict_cell(profile, m, p, link, chunk_bytes) for m in modes for p in nodes]
