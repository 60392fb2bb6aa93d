"""Predict an iteration's time on P nodes from a compute profile, without running anything.

The model is the system as built, one worker and one shard per node (the paper's
layout), every node alike:

- Compute: the profile's per-layer forward, backward and update times, in net order (a
  deferred update runs when its layer's sync is in, before its forward), and a CPU
  profile's host work (`host_s`, profile_host.py's Note [host work]) in equal shares with
  each layer's forward. An FC layer
  synchronised by SFB skips its dW share of backward and, before its next forward,
  rebuilds the gradient from K·P rows at the profile's GEMM rate (SfbTiming.rebuild_s).
- Bytes: the plan of the C++ cost model (`poseidon._C.make_plan`, the coordinator's own
  function): each layer's scheme and its PS chunks and their shards. A PS chunk crosses a
  node's link when its shard is elsewhere; its sum comes back once every worker pushed it.
- Links: every node has a full-duplex link of `bandwidth × goodput` bytes/s each way.
  Every node does the same, so one node's uplink is simulated (its downlink mirrors it):
  frames from the worker's and the shard's send queues, whole frames in priority order,
  `threads` at a time per queue (poseidon/experiments/uplink.py, Note [two queues, whole
  frames]).
- The bulk-synchronous round of a PS layer: its chunks are pushed in turns of P (Note
  [push order]); a turn's sums go back once the turn's pushes are in. A turn of m < P
  chunks reaches only m shards, whose links carry all of it: the turn moves at m/P of the
  rate at most.
- Lossy schemes (`compression`): a BF16 layer is a PS layer of 2-byte floats. A PowerSGD
  layer's round is two PS rounds one after the other, part 0 ([P | rest]) then part 1 (Q);
  encoding P delays the backward after the layer by its GEMM (the training thread runs it),
  encoding Q runs between the two rounds (a continuation thread) and decoding before the
  layer's forward: the plan's own estimates of those phases (cost_model.h), made at the
  profile's GEMM rate for r rows (profile_layout.gemm_rate).
- WFBP: a layer's sync starts when its backward ends and must be complete (and, for SFB,
  rebuilt) before its forward in the next iteration. ps-nooverlap sends every layer after
  the whole backward and waits for all before updating. allreduce is DDP's: buckets of
  consecutive layers (caffe/parallel/allreduce.py's layout), each a ring all-reduce of
  2·(P−1)/P of its bytes per node, one after the other as backward produces them; the
  update waits for the last.

Every iteration begins with nothing in flight (each layer's sync is waited on before its
next forward), so one backward pass and the forward that follows are one period.

Note [several workers per node]. With G workers per node (`Layout`, `--workers-per-node`)
the workers compute in parallel, each on its own batch. Local aggregation (the default,
POSEIDON_WORKERS_PER_HOST = G) plans as the job does (P1 = nodes·G, one shard per node,
G per machine: the cost model's Note [local aggregation]) and simulates the node's link as
one worker's with P = nodes, a machine's factors being its G workers' rows; each layer's
local stage (`SchemeEstimate.local_bytes` at the `local` rate) delays its transfer by half
and its completion by the other half. The flat layout (`poseidon-flat`: every worker a node
of the paper's layout, P1 = P2 = nodes·G) gives each worker and its shard 1/G of the link
(but a turn's few shards receive through their hosts' whole links, `_ps_frames`), and what
goes to the G−1 workers and shards of its own host does not cross it. All-reduce
is one ring over all nodes·G workers in rank order, so each node's link carries one hop per
step: 2·(P−1)/P of a bucket, P = nodes·G.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from poseidon.config import SYNC_MODES
from poseidon.experiments.profile import Profile
from poseidon.experiments.run import DEFAULT_CHUNK_BYTES
from poseidon.experiments.uplink import SHARD, WORKER, Frame, Uplink

MODES = SYNC_MODES
TUNED = "poseidon-tuned"  # Poseidon with per-layer schemes chosen by time (tune.py)
FRAME_HEADER_BYTES = 48  # poseidon/include/poseidon/internal/frame.h
# TCP payload per Ethernet frame on the wire (MTU 1500, TCP timestamps; the preamble,
# inter-frame gap and FCS count), with its share of the delayed ACKs (a 90-byte frame per
# two segments) a link loaded both ways carries too: what a real 10 GbE link delivers.
TCP_GOODPUT_ETHERNET = 1448 / (1538 + 90 / 2)


@dataclass(frozen=True)
class Link:
    """A node's link: bits/s each way, the fraction TCP's payload gets, one-way latency."""

    bandwidth_bps: float
    goodput: float = TCP_GOODPUT_ETHERNET
    latency_s: float = 25e-6

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_bps / 8 * self.goodput


@dataclass(frozen=True)
class Layout:
    """How a cell's workers sit on its nodes: `per_node` workers behind each node's one link.
    With `aggregate` (local aggregation, POSEIDON_WORKERS_PER_HOST) a node's workers sum
    inside it first and only its leader's traffic crosses the link, the local stage moving at
    `local` (None: free); without, every worker pushes its own (P2 = every worker's shard)."""

    per_node: int = 1
    aggregate: bool = True
    local: Link | None = None

    def label(self, mode: str) -> str:
        """A cell's mode as reports name it: `poseidon` (the paper's layout or local
        aggregation), `poseidon-flat` (several workers per node, no aggregation)."""
        if self.per_node == 1 or mode == "allreduce" or self.aggregate:
            return mode
        return f"{mode}-flat"


PAPER_LAYOUT = Layout()


# Note [saturated cells]. Against the emulation (docs/experiments.md §6.5) the predictor
# is within ±2.9% on the zoo's sweeps (±3.5% on the unseen nets) wherever a node's link is
# busy for less than 70% of the iteration, and so is the all-reduce at any load; the PS modes
# on a busier link ran up to 26% longer than predicted (the predictor read +0.8% to −20.6%
# of them; the links stand idle, bench/link_use.py measured): a round waits for the slowest
# of P workers' pushes and for its owner's replies, and the model's one node stands for all
# of them. `poseidon predict` says so beside those cells rather than let them pass for as
# sure as the rest.
SATURATED_LINK_BUSY = 0.7
PS_MODES = ("ps-nooverlap", "wfbp", "poseidon", "poseidon-tuned")


@dataclass
class CellPrediction:
    mode: str
    nodes: int
    iteration_s: float
    compute_s: float  # forward, backward (SFB skips dW) and the solver's updates
    rebuild_s: float  # SFB rebuild GEMMs
    wait_s: float  # the rest: time the device waits for communication
    bytes_per_node: float  # sent by one node per iteration (= received)
    layer_schemes: dict[str, str] = field(default_factory=dict)  # the overrides it ran with
    workers_per_node: int = 1
    # Where its iteration was simulated node by node (every_node.py): the fluid model's
    # iteration and the simulation's, between which it lies (Note [between the bounds]).
    bounds_s: tuple[float, float] | None = None

    @property
    def every_node(self) -> bool:
        """Whether its iteration was simulated node by node (every_node.py)."""
        return self.bounds_s is not None

    def link_busy(self, link: Link) -> float:
        """The share of the iteration one node's link spends sending (bytes over goodput)."""
        return self.bytes_per_node / link.bytes_per_s / self.iteration_s

    def saturated(self, link: Link) -> bool:
        """A PS mode on a link busy for most of the iteration: where the prediction is a
        lower bound (Note [saturated cells])."""
        mode = self.mode.removesuffix("-flat")
        return mode in PS_MODES and self.link_busy(link) >= SATURATED_LINK_BUSY


# ----- the plan of one cell ------------------------------------------------------------------
@dataclass
class _SyncedLayer:
    index: int
    scheme: str  # "PS", "SFB", "BF16" or "PowerSGD"
    late: bool
    chunk_bytes: list[float]  # PS, BF16, PowerSGD's part 0: the sizes of its chunks, in order
    factor_bytes: float  # SFB: one worker's factors
    rebuild_s: float  # SFB: the rebuild GEMM on P nodes; PowerSGD: decoding
    skipped_s: float  # SFB: the dW share of backward it skips
    second_chunk_bytes: list[float] = field(default_factory=list)  # PowerSGD: part 1's
    encode_p_s: float = 0.0  # PowerSGD: on the training thread, after the layer's backward
    encode_q_s: float = 0.0  # PowerSGD: between its two rounds
    local_s: float = 0.0  # local aggregation: the local stage, half before and half after
    first_chunk: int = 0  # PS: the plan's global index of its first chunk (its shard: mod P2)


@dataclass(frozen=True)
class Compression:
    """What a cell may compress: POSEIDON_COMPRESSION's kind and PowerSGD's rank."""

    kind: str = "none"
    powersgd_rank: int = 4


EXACT = Compression()  # the paper's behaviour: no lossy scheme allowed


def planned_layers(
    profile: Profile,
    mode: str,
    nodes: int,
    chunk_bytes: int,
    layer_schemes: dict[str, str] | None = None,
    link: Link | None = None,
    compression: Compression = Compression(),
    layout: Layout = PAPER_LAYOUT,
) -> list[_SyncedLayer]:
    from poseidon import _C
    from poseidon.experiments.profile_layout import gemm_rate, profile_plan

    g = layout.per_node
    aggregate = g > 1 and layout.aggregate
    workers = nodes * g
    rates = None
    if compression.kind != "none" and link is not None:
        # The coordinator's time model on this cell's link and the profile's GEMM rate.
        # Bytes sent + received per second: both directions at once (Config.rates).
        rates = _C.Rates(2 * link.bytes_per_s, gemm_rate(profile, compression.powersgd_rank))
    plan = profile_plan(profile, mode, workers, chunk_bytes, layer_schemes, compression.kind,
                        compression.powersgd_rank, rates, servers=nodes if aggregate else None,
                        workers_per_host=g if aggregate else 1)  # fmt: skip
    # A machine's factors: its G workers' rows (local aggregation), else one worker's.
    factor_rows = g if aggregate else 1
    local_rate = 2 * layout.local.bytes_per_s if (aggregate and layout.local) else 0.0
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
            rows = sync.rows * workers
            out.append(
                _SyncedLayer(
                    lp.layer_id,
                    "SFB",
                    sync.late,
                    [],
                    4.0 * factor_rows * sync.rows * (sync.m + sync.n),
                    layer.sfb.rebuild_s(sync.m, sync.n, rows),
                    layer.sfb.weight_grad_s,
                    local_s=lp.estimate.local_bytes / local_rate if local_rate else 0.0,
                )
            )
            continue
        parts = [_chunk_bytes(p) for p in lp.parts]
        local_s = lp.estimate.local_bytes / local_rate if local_rate else 0.0
        if lp.scheme == _C.Scheme.BF16:
            out.append(_SyncedLayer(lp.layer_id, "BF16", sync.late, [b / 2 for b in parts[0]],
                                    0.0, 0.0, 0.0, local_s=local_s,
                                    first_chunk=lp.first_chunk))  # fmt: skip
        elif lp.scheme == _C.Scheme.POWERSGD:
            e = lp.estimate  # the cost model's phases at the profile's GEMM rate
            out.append(_SyncedLayer(lp.layer_id, "PowerSGD", sync.late, parts[0], 0.0, e.finish_s,
                                    0.0, parts[1], e.encode_s, e.between_s,
                                    local_s))  # fmt: skip
        else:
            out.append(_SyncedLayer(lp.layer_id, "PS", sync.late, parts[0], 0.0, 0.0, 0.0,
                                    local_s=local_s, first_chunk=lp.first_chunk))  # fmt: skip
    return out


def _chunk_bytes(part) -> list[float]:  # type: ignore[no-untyped-def]
    """The sizes of a plan part's chunks, in order (the last one may be short)."""
    return [4.0 * min(part.chunk_floats, part.num_floats - c * part.chunk_floats)
            for c in range(part.num_chunks)]  # fmt: skip


# ----- one iteration ---------------------------------------------------------------------------
def predict_cell(
    profile: Profile,
    mode: str,
    nodes: int,
    link: Link,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    buckets: Callable[[Profile], list[tuple[list[int], float]]] | None = None,
    threads: int = 2,
    layer_schemes: dict[str, str] | None = None,
    compression: Compression = Compression(),
    layout: Layout = PAPER_LAYOUT,
) -> CellPrediction:
    """The steady-state iteration of `mode` on `nodes` nodes (see the module docstring).
    `buckets` gives the all-reduce mode's buckets as (layer indices, bytes), default DDP's;
    `layer_schemes` overrides BestScheme for named layers (POSEIDON_LAYER_SCHEMES);
    `compression` lets the plan pick lossy schemes (POSEIDON_COMPRESSION); `layout` puts
    several workers on each node (Note [several workers per node])."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: want one of {', '.join(MODES)}")
    if nodes < 1:
        raise ValueError(f"{nodes} nodes (want >= 1)")
    layers = profile.layers
    planned = {}
    g = layout.per_node
    flat = g > 1 and not layout.aggregate
    # A pusher's link: the node's, or a flat worker's 1/G share of it.
    pusher_link = link_share(link, g) if flat else link
    if mode != "allreduce":
        chosen = planned_layers(profile, mode, nodes, chunk_bytes, layer_schemes, pusher_link,
                                compression, layout)  # fmt: skip
        planned = {s.index: s for s in chosen}
    host_step = host_share_s(profile)
    backward_end, backward_s = backward_pass(layers, planned)
    compute = backward_s
    if mode == "allreduce":  # one ring over every worker: each node's link carries one hop
        ring_link = link
        if nodes == 1 and g > 1:  # the ring never leaves the machine
            ring_link = layout.local or Link(math.inf, 1.0, 0.0)
        done, sent = _allreduce(profile, nodes * g, ring_link, backward_end, buckets)
        if nodes == 1:
            sent = 0.0  # nothing crossed a network link
        waits_per_layer = False
    else:
        submit = hand_over_times(planned, backward_end, mode)
        if not flat:
            done, sent = _communicate(planned, submit, nodes, link, chunk_bytes, threads)
            done = {i: t + planned[i].local_s / 2 for i, t in done.items()}
        else:  # every worker a node of its own, G of them behind one link
            done, sent = _communicate(planned, submit, nodes * g, pusher_link, chunk_bytes,
                                      threads, colocated=g)  # fmt: skip
            sent *= g  # the node's G workers' bytes
        waits_per_layer = mode != "ps-nooverlap"
    now, forward_compute, rebuild = forward_pass(layers, planned, backward_s, done,
                                                 waits_per_layer, host_step)  # fmt: skip
    compute += forward_compute
    wait = now - compute - rebuild
    chosen = dict(layer_schemes or {}) if mode == "poseidon" else {}
    return CellPrediction(layout.label(mode), nodes, now, compute, rebuild, wait, sent, chosen, g)


def host_share_s(profile: Profile) -> float:
    """A CPU's own host work (Note [host work]): an equal share with each layer's forward,
    as the replay spends it (replay.py)."""
    return profile.host_s / len(profile.layers)


def backward_pass(layers: list, planned: dict[int, _SyncedLayer]) -> tuple[dict[int, float], float]:
    """When each layer's backward ends (layer L−1 down to 0; a layer's sync may start then),
    from the iteration's start, and the compute it took: SFB skips its dW share, PowerSGD
    encodes P before the round can start."""
    now, backward_end = 0.0, {}
    for index in range(len(layers) - 1, -1, -1):
        spent = layers[index].backward_s
        synced = planned.get(index)
        if synced is not None and synced.scheme == "SFB":
            spent = max(0.0, spent - synced.skipped_s)
        if synced is not None:
            spent += synced.encode_p_s
        now += spent
        backward_end[index] = now
    return backward_end, now


def hand_over_times(planned: dict[int, _SyncedLayer], backward_end: dict[int, float],
                    mode: str) -> dict[int, float]:  # fmt: skip
    """When each synchronised layer is handed over: at its backward's end (WFBP), or after
    the whole backward (a late layer; every layer of ps-nooverlap), plus half its local stage."""
    backward_s = max(backward_end.values(), default=0.0)
    return {
        i: (backward_s if (s.late or mode == "ps-nooverlap") else backward_end[i]) + s.local_s / 2
        for i, s in planned.items()
    }


def forward_pass(layers: list, planned: dict[int, _SyncedLayer], backward_s: float,
                 done: dict[int, float], waits_per_layer: bool,
                 host_step: float) -> tuple[float, float, float]:  # fmt: skip
    """The forward pass after the backward (times from the iteration's start), given when
    each layer's sync is in: when it ends, the compute it took and the rebuilds'. Updates: a
    synchronised layer's when its sync is in (deferred, before its forward); the rest (frozen
    layers, and every layer without deferral) before the forward starts, which without
    deferral also waits for every sync."""
    start = backward_s if waits_per_layer else max([backward_s, *done.values()])
    deferred = {i for i in planned if waits_per_layer}
    now = start + sum(x.update_s for i, x in enumerate(layers) if i not in deferred)
    compute = sum(x.update_s for x in layers)
    rebuild = 0.0
    for index, layer in enumerate(layers):
        synced = planned.get(index)
        if synced is not None:
            if waits_per_layer:
                now = max(now, done[index])
            if synced.scheme in ("SFB", "PowerSGD"):  # the rebuild; PowerSGD's decode
                now += synced.rebuild_s
                rebuild += synced.rebuild_s
            if index in deferred:
                now += layer.update_s
        now += layer.forward_s + host_step
        compute += layer.forward_s + host_step
    return now, compute, rebuild


def ps_round_s(
    floats: int,
    nodes: int,
    link: Link,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int = 2,
    tensors: int = 1,
) -> float:
    """One push-pull round of `tensors` tensors of `floats` floats in all (equal parts, all
    handed over at once) on `nodes` nodes, one worker and one shard each, as the predictor
    models PS layers' rounds (chunked as the coordinator's plan cuts them): what
    bench/kv_capped.py and bench/round_timeline.py measure on emulated links."""
    parts = tensor_chunks(floats, nodes, chunk_bytes, tensors)
    planned = {i: _SyncedLayer(i, "PS", False, chunks, 0.0, 0.0, 0.0)
               for i, chunks in enumerate(parts)}  # fmt: skip
    done, _ = _communicate(planned, dict.fromkeys(planned, 0.0), nodes, link, chunk_bytes,
                           threads)  # fmt: skip
    return max(done.values())


def tensor_chunks(floats: int, nodes: int, chunk_bytes: int, tensors: int = 1) -> list[list[float]]:
    """The chunk sizes, in bytes, of `tensors` PS tensors of `floats` floats in all (equal
    parts) on `nodes` workers and shards, as the coordinator's plan cuts them."""
    from poseidon import _C

    each = floats // tensors
    specs = [_C.LayerSpec(i, f"t{i}", _C.LayerKind.OTHER, each, 1, 1, each, _C.SchemeChoice.PS)
             for i in range(tensors)]  # fmt: skip
    return [
        _chunk_bytes(lp.parts[0]) for lp in _C.make_plan(specs, nodes, nodes, chunk_bytes).layers
    ]


def link_share(link: Link, workers: int) -> Link:
    """One worker's share of a node's link that `workers` workers push through at once."""
    return Link(link.bandwidth_bps / workers, link.goodput, link.latency_s)


def _communicate(
    planned: dict[int, _SyncedLayer],
    submit: dict[int, float],
    nodes: int,
    link: Link,
    chunk_bytes: int,
    threads: int,
    colocated: int = 1,
) -> tuple[dict[int, float], float]:
    """When each layer's sync completes on one node, and the bytes that node sends.
    `colocated`: the nodes that share this one's host (Note [several workers per node]):
    what goes between them does not cross its link."""
    if nodes == colocated:  # every shard is on this host: nothing crosses a link
        return dict(submit), 0.0
    uplink = Uplink(link.bytes_per_s, threads)
    done: dict[int, float] = {}
    sent = 0.0
    for index, layer in planned.items():
        if layer.scheme == "SFB":
            sent += _sfb_frames(uplink, index, layer, submit[index], nodes, link, chunk_bytes,
                                done, colocated)  # fmt: skip
        elif layer.scheme == "PowerSGD":
            sent += _powersgd_frames(uplink, index, layer, submit[index], nodes, link, threads,
                                     done, colocated)  # fmt: skip
        else:
            sent += _ps_frames(uplink, index, layer, submit[index], nodes, link, threads,
                               functools.partial(done.__setitem__, index),
                               colocated=colocated)  # fmt: skip
    uplink.run()
    return done, sent


def _powersgd_frames(uplink, index, layer, ready, nodes, link, threads, done,  # type: ignore[no-untyped-def]
                     colocated=1) -> float:  # fmt: skip
    """Part 0 as a PS round; when its sums are in, encoding Q, then part 1 as a PS round."""
    first = _SyncedLayer(index, "PS", layer.late, layer.chunk_bytes, 0.0, 0.0, 0.0)
    second = _SyncedLayer(index, "PS", layer.late, layer.second_chunk_bytes, 0.0, 0.0, 0.0)

    def part_0_done(t: float) -> None:
        # Part 1's chunks are numbered after part 0's (the core's priority order).
        _ps_frames(uplink, index, second, t + layer.encode_q_s, nodes, link, threads,
                   functools.partial(done.__setitem__, index),
                   order=len(layer.chunk_bytes), colocated=colocated)  # fmt: skip

    sent = _ps_frames(uplink, index, first, ready, nodes, link, threads, part_0_done,
                      colocated=colocated)  # fmt: skip
    # Part 1's bytes, counted now (its frames join the uplink when part 0 is done).
    return sent + _ps_sent_bytes(layer.second_chunk_bytes, nodes, colocated)


def _ps_sent_bytes(chunk_bytes: list[float], nodes: int, colocated: int = 1) -> float:
    """What one node sends for a PS round of chunks `chunk_bytes` (Note [push order]): the
    (P−c)/P of each chunk the shards of its host (c of them) do not own, pushed, and as much
    again in replies."""
    remote = (nodes - colocated) / nodes
    return 2 * remote * sum(size + FRAME_HEADER_BYTES for size in chunk_bytes)


def _sfb_frames(uplink, index, layer, ready, nodes, link, chunk_bytes, done,  # type: ignore[no-untyped-def]
                colocated=1) -> float:  # fmt: skip
    """A worker's factors to each of the P−c others off its host, cut at the chunk size."""
    peers = nodes - colocated
    pieces = max(1, math.ceil(layer.factor_bytes / chunk_bytes))
    size = layer.factor_bytes / pieces + FRAME_HEADER_BYTES
    left = [peers * pieces]

    def arrived(t: float) -> None:
        left[0] -= 1
        if left[0] == 0:
            done[index] = t + link.latency_s

    for k in range(left[0]):
        # Factors go to the peer workers, not their shards: other connections (peer ids
        # after the shards'), which a sender thread may write beside a push to that node.
        uplink.add(Frame(WORKER, (index, k), size, link.bytes_per_s, ready, peers + k % peers,
                         arrived))  # fmt: skip
    return left[0] * size


def _ps_frames(uplink, index, layer, ready, nodes, link, threads, on_done, order=0,  # type: ignore[no-untyped-def]
               colocated=1) -> float:  # fmt: skip
    """A PS layer in turns of P chunks (Note [push order]). Of a turn of m chunks a node
    pushes the ones no shard of its host owns, m·(P−c)/P on average (c = `colocated` nodes
    per host, 1 in the paper's layout), as that many frames; its shard returns each chunk it
    owns to the P−c others off its host once every push is in, m·(P−c)/P frames on average
    too. A turn of m < P chunks reaches only m shards, whose links carry it all: its frames
    move at (m/P)·rate in all, or (c·m/P)·rate when `link` is 1/c of a host's link (the
    flat layout), as each of those shards receives through its whole host's link.
    `on_done(t)` is called when the last sum is in; returns the bytes the node sends."""
    turns = [layer.chunk_bytes[k : k + nodes] for k in range(0, len(layer.chunk_bytes), nodes)]
    remaining_turns = [len(turns)]
    peers = nodes - colocated
    for turn_number, turn in enumerate(turns):
        m = len(turn)
        volume = peers / nodes * (sum(turn) + FRAME_HEADER_BYTES * m)
        count = max(1, round(m * peers / nodes))
        cap = link.bytes_per_s
        if m < nodes:  # the m shards' hosts' links, c times this node's share each
            cap = link.bytes_per_s * colocated * m / nodes / min(threads, count)
        pushes_left = [count]

        def replies(t: float, first=order, volume=volume, count=count, cap=cap,
                    pushes_left=pushes_left) -> None:  # fmt: skip
            pushes_left[0] -= 1
            if pushes_left[0]:
                return
            replies_left = [count]

            def returned(t2: float) -> None:
                replies_left[0] -= 1
                if replies_left[0] == 0:
                    remaining_turns[0] -= 1
                    if remaining_turns[0] == 0:
                        on_done(t2 + link.latency_s)

            for k in range(count):  # one chunk's sum to each of the others in turn
                uplink.add(Frame(SHARD, (index, first + k), volume / count, cap,
                                 t + link.latency_s, k % peers, returned))  # fmt: skip

        for k in range(count):  # each turn starts one shard further (Note [push order])
            peer = (turn_number + k) % peers
            uplink.add(Frame(WORKER, (index, order + k), volume / count, cap, ready, peer,
                             replies))  # fmt: skip
        order += count
    return _ps_sent_bytes(layer.chunk_bytes, nodes, colocated)


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
        from poseidon.experiments.profile_layout import ddp_buckets

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
