"""Every node simulated: the predictor's iteration with all nodes' links and TCP's uneven
shares, for the cells where one node cannot stand for all (predict.py, Note [saturated
cells]).

Note [every node]. The predictor simulates one node's uplink and lets it stand for every
node: all nodes alike, a round's pushes all in when this node's are. On a busy link that is
optimistic (docs/experiments.md §6.5), because the nodes are not alike: a layer of fewer
chunks than shards belongs to a few shards, whose links alone return its sums; TCP does not
share a link evenly among its connections; so some node's pushes or sums come in late,
every other node waits for them, and a node that waited starts its next backward late,
which shifts the next rounds of all (the workers' drift; bench/round_spread.py measured
hand-overs 61 ms apart). Here every process is simulated, over a few iterations:

- Compute: each process runs the predictor's backward and forward (predict.py:
  `backward_pass`, `forward_pass`): it hands its layers over as the predictor does, and its
  forward waits for each layer's sync as the predictor's does, on its own sums' arrival.
- Frames: a PS chunk's push goes to its shard (the plan's global chunk index mod P2) in the
  comm core's push order (kv_worker.cc, Note [push order]); the shard returns the sum once
  all P pushes are in, to the next worker first (kv_server.cc, Note [reply order]); an SFB
  layer's factors go to every other worker, cut at the chunk size. What goes between two
  processes of one host does not cross a link and arrives at once. With local aggregation
  each node's leader is the one process on its links.
- Sending: each process has a worker queue (pushes, factors) and a shard queue (sums),
  `threads` sender threads each, and one connection per peer and kind; a thread writes the
  most urgent frame (older iteration, lower layer, earlier chunk) to a connection no other
  thread of its queue is writing to, and is free again once the frame's rest fits under
  TCP_NOTSENT_LOWAT (the kernel sends that rest while the thread writes another frame).
  A connection takes its next frame once its socket holds at most `depth` bytes (64 KiB
  by default, chosen against the emulation: see `Network`), which then leave before it.
- Links: each host has an uplink and a downlink of the predictor's goodput; the frames in
  flight share them by weighted max-min (what TCP's flows converge to), each frame's weight
  drawn once from a lognormal of spread `sigma` with mean 1 (0 by default: even shares).

With even shares on a net whose every layer is a whole number of turns of P chunks, every
process is alike and the iteration is the predictor's (tests/poseidon/experiments/
test_every_node.py). The iteration reported is the slowest process's mean over the timed
iterations after the warm-up ones, as the emulation reports it (worker.py), averaged over
`seeds` draws. Five iterations reach the steady state: unseen_a's WFBP at 4 nodes reads
0.7203 s over 3 after 2 warm-up ones and 0.7208 s over 20 after 3 (as its emulation is
timed).

Note [between the bounds]. The fluid model (predict.py) is a lower bound on a saturated
cell: its link never idles while a byte waits. The simulation idles its links more than the
emulated ones: a frame to a busy downlink holds its sender's uplink share down at once
(max-min, nothing queued in between), where a switch port's queue lets the uplink run ahead
and TCP's shares are not max-min. Of 28 emulated saturated PS cells, 15 fall between the
two and the rest within 6% of the nearer (docs/experiments.md §6.5, "Between the bounds"),
and where in between swings with the details of the sharing: unseen_a's WFBP at 4 nodes,
emulated 0.663 s, simulated to 0.633-0.740 s with a downlink queue of 0.75 to 6 times the
emulation's, 0.635 s with proportionally fair shares and 0.702 s with TCP Reno's (α = 2),
against 0.578 s fluid and 0.721 s max-min (scratch edits, not kept). No one of those is
the emulation's, so `simulated` reports the point `blend` of the way from the bound to the
simulation (the midpoint by default: the estimate whose worst error over the range is
least) and both ends as the cell's `bounds_s`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from poseidon.config import Config
from poseidon.experiments.predict import (
    EXACT,
    FRAME_HEADER_BYTES,
    PAPER_LAYOUT,
    PS_MODES,
    CellPrediction,
    Compression,
    Layout,
    Link,
    backward_pass,
    forward_pass,
    hand_over_times,
    host_share_s,
    link_share,
    planned_layers,
)
from poseidon.experiments.profile import Profile
from poseidon.experiments.run import DEFAULT_CHUNK_BYTES

WORKER, SHARD = 0, 1  # a process's two send queues
PEER = 2  # the connection kind of factors between workers (beside pushes to the shard)


@dataclass
class Stream:
    """One connection's bytes in the sockets of its sender: the frames written to it, sent
    in that order (a TCP connection is first in, first out), from host `up`'s uplink to host
    `down`'s downlink; `weight` is its head frame's share of the links (Note [every node])."""

    up: int
    down: int
    weight: float = 1.0
    frames: deque = field(default_factory=deque)  # [bytes left, on_done] in the socket
    backlog: float = 0.0  # bytes written and not yet sent
    owner: tuple = ()  # (sender, queue)


def max_min_rates(streams: list[Stream], capacity: float) -> list[float]:
    """Weighted max-min fair rates: each stream crosses its sender's uplink and its
    receiver's downlink, all of `capacity` bytes/s; the links fill in turn, the most
    contended first (progressive filling: every unfrozen stream moves at `level` × its
    weight)."""
    members: dict[tuple[int, int], list[int]] = {}
    for k, stream in enumerate(streams):
        members.setdefault((0, stream.up), []).append(k)
        members.setdefault((1, stream.down), []).append(k)
    weight = {link: sum(streams[k].weight for k in ks) for link, ks in members.items()}
    unfrozen = {link: len(ks) for link, ks in members.items()}
    left = dict.fromkeys(members, capacity)
    rate = [0.0] * len(streams)
    frozen = [False] * len(streams)
    level = 0.0
    active = set(members)
    while active:
        step = min(left[link] / weight[link] for link in active)
        level += step
        for link in active:
            left[link] -= step * weight[link]
        for link in [link for link in active if left[link] <= 1e-9 * capacity]:
            for k in members[link]:
                if frozen[k]:
                    continue
                frozen[k] = True
                rate[k] = level * streams[k].weight
                for crossed in ((0, streams[k].up), (1, streams[k].down)):
                    weight[crossed] -= streams[k].weight
                    unfrozen[crossed] -= 1
        active = {link for link in active if unfrozen[link] > 0}
    return rate


@dataclass
class Network:
    """Processes on hosts (`host_of`), their send queues and sockets, and the hosts' links.

    A sender thread writes a frame into its connection's socket, which takes bytes while
    fewer than `lowat` of them wait unsent there (TCP_NOTSENT_LOWAT): the thread is free
    once the frame's last byte is in, that is once the connection's unsent bytes are at most
    `lowat`. The socket sends in the order written, and takes the next frame once it holds at
    most `depth` bytes (at most `lowat`): with `depth` = `lowat` a thread may write a second
    frame to a peer behind the first, and a more urgent frame queued later waits behind both,
    as the socket's buffer allows; with 0 the next frame is chosen when the last one is sent.
    A thread takes the most urgent queued frame to a connection that no thread of its queue
    is writing to and whose socket takes a frame.

    Against the emulation (docs/experiments.md §6.5): emulated with single packets
    (`--gso off`), VGG19-22K's 2 GbE Poseidon cell reads 0.9871 s and simulates to 0.9870 s
    with `depth` 0 and the emulation's low-water mark; emulated with GSO's 64 KiB
    super-packets, which the links pass and drop whole (emulation.py, Note [packets, not
    GSO bursts]), a `depth` of one super-packet fitted it, so `depth` stands for the links'
    grain, not for a socket's."""

    link: Link
    threads: int
    sigma: float
    rng: random.Random
    lowat: float
    host_of: Callable[[int], int] = lambda process: process
    depth: float = 0.0  # bytes a socket holds ahead of a new frame (at most `lowat`)
    # Called with (from, to, the streams with bytes to send) for every stretch of time in
    # which they and their rates stay as they are: what bench/socket_queues.py compares.
    observe: Callable[[float, float, list[Stream]], None] | None = None
    now: float = 0.0
    # (sender, queue) -> connection -> its frames by priority
    queued: dict[tuple[int, int], dict[tuple, list]] = field(default_factory=dict)
    streams: dict[tuple, Stream] = field(default_factory=dict)  # (sender, queue, connection)
    changed: set[tuple[int, int]] = field(default_factory=set)
    events: list = field(default_factory=list)  # (time, count, callback)
    count: int = 0

    def at(self, time: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self.events, (time, self.count, callback))
        self.count += 1

    def send(self, src: int, queue: int, dst: int, size: float, priority: tuple,
             on_done: Callable[[float], None], kind: int | None = None) -> None:  # fmt: skip
        """Queue a frame; `on_done(t)` runs when it has arrived (at once between processes
        of one host). `kind`: its connection's (default: the other queue's, SHARD for a
        push, WORKER for a sum)."""
        up, down = self.host_of(src), self.host_of(dst)
        if up == down:
            now = self.now
            self.at(now, lambda: on_done(now))
            return
        connection = (dst, SHARD - queue if kind is None else kind)
        key = (src, queue, connection)
        if key not in self.streams:
            self.streams[key] = Stream(up, down, owner=(src, queue))
        waiting = self.queued.setdefault((src, queue), {}).setdefault(connection, [])
        heapq.heappush(waiting, (priority, self.count, size, on_done))
        self.count += 1
        self.changed.add((src, queue))

    def _ahead(self) -> float:
        """The bytes a socket may hold ahead of a new frame: `depth`, at most `lowat`."""
        return min(self.depth, self.lowat)

    def _takes(self, stream: Stream) -> bool:
        """Whether the stream's socket takes another frame."""
        return stream.backlog - self._ahead() <= 1e-3  # bytes

    def _writing(self, stream: Stream) -> bool:
        """Whether a thread is still writing the stream's last frame into its socket."""
        return stream.backlog - self.lowat > 1e-3  # bytes

    def _take(self) -> None:
        """Free sender threads write the most urgent frames (only where something changed: a
        frame queued, or one of the queue's sockets took its last frame or emptied)."""
        for owner in self.changed:
            waiting = self.queued.get(owner)
            if not waiting:
                continue
            src, queue = owner
            writing = sum(
                1 for c in waiting if self._writing(self.streams[(src, queue, c)])
            )  # fmt: skip
            while writing < self.threads:
                heads = [(heap[0], c) for c, heap in waiting.items()
                         if heap and self._takes(self.streams[(src, queue, c)])]  # fmt: skip
                if not heads:
                    break
                _, connection = min(heads)
                _, _, size, on_done = heapq.heappop(waiting[connection])
                stream = self.streams[(src, queue, connection)]
                if not stream.frames:  # a new head frame: its share of the links
                    stream.weight = self._weight()
                stream.frames.append([size, on_done])
                stream.backlog += size
                writing += self._writing(stream)
        self.changed.clear()

    def _weight(self) -> float:
        return math.exp(self.sigma * self.rng.gauss(0.0, 1.0) - self.sigma**2 / 2)

    def run(self) -> None:
        """Until every frame is through and every event (and what they start) has run."""
        capacity = self.link.bytes_per_s
        while True:
            self._take()
            active = [s for s in self.streams.values() if s.frames]
            rates = max_min_rates(active, capacity) if active else []
            step = math.inf
            for stream, rate in zip(active, rates):
                if rate > 0:
                    step = min(step, stream.frames[0][0] / rate)
                    if self._writing(stream):  # ... or until its last frame is all in
                        step = min(step, (stream.backlog - self.lowat) / rate)
                    if not self._takes(stream):  # ... or until its socket takes a frame
                        step = min(step, (stream.backlog - self._ahead()) / rate)
            until = min(self.now + step, self.events[0][0] if self.events else math.inf)
            if until == math.inf:
                return
            if self.observe is not None and until > self.now:
                self.observe(self.now, until, active)
            elapsed, self.now = until - self.now, until
            arrival = self.now + self.link.latency_s
            for stream, rate in zip(active, rates):
                moved = rate * elapsed
                was = self._writing(stream), self._takes(stream)
                stream.backlog -= moved
                head = stream.frames[0]
                head[0] -= moved
                if head[0] <= 1e-6 * max(1.0, moved):
                    stream.frames.popleft()
                    stream.backlog = sum(f[0] for f in stream.frames)
                    self.at(arrival, lambda done=head[1], t=arrival: done(t))
                    if stream.frames:
                        stream.weight = self._weight()
                    self.changed.add(stream.owner)
                elif was != (self._writing(stream), self._takes(stream)):
                    self.changed.add(stream.owner)
            while self.events and self.events[0][0] <= self.now:
                _, _, callback = heapq.heappop(self.events)
                callback()


@dataclass(frozen=True)
class EveryNode:
    """How to simulate every node (Note [every node]): the shares' spread, the sockets'
    TCP_NOTSENT_LOWAT and the bytes they hold ahead of a new frame (`Network`), the warm-up
    and timed iterations, and the random draws averaged."""

    sigma: float = 0.0
    lowat_bytes: float = Config.notsent_lowat_bytes
    # Chosen on two emulated cells (docs/experiments.md §6.5, "Every node simulated"), all
    # run with GSO on: the emulation's 64 KiB super-packet rather than a socket's depth
    # (`Network`). bench/predictor_vs_emulation.py takes 0 for cells run with `--gso off`,
    # whose links carry single packets.
    depth_bytes: float = 64 * 1024
    warmup: int = 2
    iterations: int = 3
    seeds: int = 2
    # Where a simulated cell's estimate lies from the fluid bound (0) to the simulation (1):
    # Note [between the bounds].
    blend: float = 0.5


def simulate_iteration(
    profile: Profile,
    mode: str,
    nodes: int,
    link: Link,
    every: EveryNode = EveryNode(),
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int = 2,
    layer_schemes: dict[str, str] | None = None,
    layout: Layout = PAPER_LAYOUT,
    observe: Callable[[float, float, list[Stream]], None] | None = None,
) -> float:
    """The iteration of a PS mode with every node simulated (Note [every node]): one worker
    per node, or several per node flat (each a process with its own queues, behind its host's
    links) or with local aggregation (the node's leader the one process on its links, each
    layer's local stage half before its hand-over and half after its sums, as predict.py's
    Note [several workers per node] has it)."""
    if mode not in PS_MODES or mode == "poseidon-tuned":
        raise ValueError(f"mode {mode!r}: every node is simulated for {', '.join(PS_MODES[:3])}")
    flat = layout.per_node > 1 and not layout.aggregate
    g = layout.per_node if flat else 1  # processes per host on the links
    chosen = planned_layers(profile, mode, nodes, chunk_bytes, layer_schemes,
                             link_share(link, g), layout=layout)  # fmt: skip
    planned = {s.index: s for s in chosen}
    for synced in planned.values():
        if synced.scheme == "PowerSGD":  # POSEIDON_LAYER_SCHEMES may ask for it by name
            raise ValueError(f"layer {profile.layers[synced.index].name!r}: PowerSGD's two "
                             "rounds are not simulated node by node")  # fmt: skip
    times = []
    for seed in range(every.seeds):
        times.append(_one_draw(profile, planned, mode, nodes * g, g, link, every, threads,
                               chunk_bytes, seed, observe))  # fmt: skip
    return sum(times) / len(times)


def _one_draw(
    profile, planned, mode, processes, per_host, link, every, threads, chunk_bytes, seed, observe
) -> float:  # type: ignore[no-untyped-def]
    layers = profile.layers
    backward_end, backward_s = backward_pass(layers, planned)
    submit = hand_over_times(planned, backward_end, mode)
    host_step = host_share_s(profile)
    waits_per_layer = mode != "ps-nooverlap"
    net = Network(link, threads, every.sigma, random.Random(seed), every.lowat_bytes,
                  lambda process: process // per_host, depth=every.depth_bytes,
                  observe=observe)  # fmt: skip
    last = every.warmup + every.iterations
    starts: list[list[float]] = [[] for _ in range(processes)]
    done: dict[tuple[int, int], dict[int, float]] = {}  # (process, iteration): layer -> time
    arrived: dict[tuple, int] = {}  # pushes of a chunk at its shard; sums or factors at a worker
    pieces = {i: max(1, math.ceil(s.factor_bytes / chunk_bytes))  # an SFB layer's frames per peer
              for i, s in planned.items() if s.scheme == "SFB"}  # fmt: skip

    def count(key: tuple) -> int:
        arrived[key] = arrived.get(key, 0) + 1
        return arrived[key]

    def begin(w: int, k: int, t0: float) -> None:
        starts[w].append(t0)
        if k == last:
            return
        done[(w, k)] = {}
        if not planned:
            end, _, _ = forward_pass(layers, planned, backward_s, {}, waits_per_layer, host_step)
            net.at(t0 + end, lambda: begin(w, k + 1, t0 + end))
        for i in planned:
            net.at(t0 + submit[i], lambda i=i: hand_over(w, k, i))

    def layer_in(w: int, k: int, i: int, t: float) -> None:
        t0 = starts[w][k]
        got = done[(w, k)]
        got[i] = t - t0 + planned[i].local_s / 2
        if len(got) == len(planned):
            end, _, _ = forward_pass(layers, planned, backward_s, got, waits_per_layer, host_step)
            del done[(w, k)]
            begin(w, k + 1, t0 + end)

    def hand_over(w: int, k: int, i: int) -> None:
        synced = planned[i]
        if synced.scheme == "SFB":
            if processes == 1:
                layer_in(w, k, i, net.now)
            size = synced.factor_bytes / pieces[i] + FRAME_HEADER_BYTES
            for piece in range(pieces[i]):
                for turn in range(1, processes):
                    dst = (w + turn) % processes
                    net.send(w, WORKER, dst, size, (k, i, piece * processes + turn),
                             lambda t, dst=dst: factor_in(dst, k, i, t), kind=PEER)  # fmt: skip
            return
        chunks = synced.chunk_bytes
        for c, size in enumerate(chunks):
            g = synced.first_chunk + c
            shard = g % processes
            if shard == w:
                push_in(k, i, c, net.now)
                continue
            order = len(chunks) + (g // processes) * processes + (g - w) % processes
            net.send(w, WORKER, shard, size + FRAME_HEADER_BYTES, (k, i, order),
                     lambda t, c=c: push_in(k, i, c, t))  # fmt: skip

    def factor_in(w: int, k: int, i: int, t: float) -> None:
        if count(("factor", w, k, i)) == pieces[i] * (processes - 1):
            layer_in(w, k, i, t)

    def push_in(k: int, i: int, c: int, t: float) -> None:
        if count(("push", k, i, c)) < processes:
            return
        synced = planned[i]
        shard = (synced.first_chunk + c) % processes
        sum_in(shard, k, i, t)  # its own worker's copy is in place
        for turn in range(1, processes):  # the others, starting with the next worker
            dst = (shard + turn) % processes
            net.send(shard, SHARD, dst, synced.chunk_bytes[c] + FRAME_HEADER_BYTES, (k, i, c),
                     lambda t2, dst=dst: sum_in(dst, k, i, t2))  # fmt: skip

    def sum_in(w: int, k: int, i: int, t: float) -> None:
        if count(("sum", w, k, i)) == len(planned[i].chunk_bytes):
            layer_in(w, k, i, t)

    for w in range(processes):
        begin(w, 0, 0.0)
    net.run()
    unfinished = [w for w in range(processes) if len(starts[w]) <= last]
    if unfinished:
        raise RuntimeError(
            f"{mode} on {processes} processes: processes {unfinished} never "
            f"finished iteration {last} (a frame or sum the simulation lost)"
        )
    return max((s[last] - s[every.warmup]) / every.iterations for s in starts)


def simulated(
    cell: CellPrediction,
    profile: Profile,
    link: Link,
    every: EveryNode,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int = 2,
    layout: Layout = PAPER_LAYOUT,
    compression: Compression = EXACT,
) -> CellPrediction:
    """A cell of the predictor (with the per-layer schemes it ran with), simulated node by
    node if it is a PS mode on a saturated link (Note [saturated cells]) with exact schemes:
    its iteration `every.blend` of the way from the fluid bound to the simulation (Note
    [between the bounds]); otherwise unchanged."""
    mode = cell.mode.removesuffix("-flat")
    lossy = mode == "poseidon" and compression.kind != "none"
    lossy = lossy or "powersgd" in cell.layer_schemes.values()
    if mode not in PS_MODES or cell.nodes == 1 or lossy or not cell.saturated(link):
        return cell
    base = "poseidon" if mode == "poseidon-tuned" else mode
    iteration = simulate_iteration(profile, base, cell.nodes, link, every, chunk_bytes, threads,
                                   cell.layer_schemes or None, layout)  # fmt: skip
    estimate = cell.iteration_s + every.blend * (iteration - cell.iteration_s)
    return replace(cell, iteration_s=estimate, bounds_s=(cell.iteration_s, iteration),
                   wait_s=estimate - cell.compute_s - cell.rebuild_s)  # fmt: skip
