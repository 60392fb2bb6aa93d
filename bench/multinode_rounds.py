"""PS rounds simulated on every node, with TCP's uneven shares: how long a round runs past
the predictor's, where one node stands for all of them.

The predictor (poseidon/experiments/predict.py) simulates one node's uplink and lets it
stand for every node: all nodes alike, a round's pushes all in when this node's are. Here
every node is simulated: P nodes, each with an uplink and a downlink of the predictor's
goodput; each frame a flow from its sender to its receiver; every frame in flight sharing
the links it crosses by weighted max-min (what TCP's flows converge to, unevenly), its
weight drawn once per frame from a lognormal of spread `sigma` (1 on average: sigma = 0 is
the predictor's fluid link, and the round is `ps_round_s` exactly). As in the comm core,
each node sends from a worker queue (its pushes) and a shard queue (its sums), `threads`
sender threads each, a thread taking the most urgent frame to a peer that no other thread
of its queue is writing to, and free again once the frame's rest fits under the socket's
TCP_NOTSENT_LOWAT (`--lowat`, the comm core's setting: the kernel sends that rest while
the thread writes another frame); a chunk's owner is its global index mod P, a worker pushes a
turn starting with the shard after its own (kv_worker.cc, Note [push order]), and a shard
returns a sum once all P pushes of it are in, starting with the next node
(kv_server.cc). Rounds run one after the other from a barrier, as bench/round_timeline.py
runs them; the output is each sigma's mean over the rounds and seeds of the predictor's
miss, `ps_round_s` over the round's time, less 1, as round_timeline prints it for the
emulated rounds (docs/benchmarks.md, "The round's tail and the frame size").

    .venv/bin/python bench/multinode_rounds.py [--workers 4] [--megabytes 4]
        [--chunk 1MiB] [--tensors 1] [--rate-mbit 25] [--sigma 0,0.3] [--rounds 6]
        [--seeds 4] [--threads 2] [--lowat 256KiB]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from poseidon.config import Config, parse_bytes
from poseidon.experiments.emulation import TCP_GOODPUT_TBF
from poseidon.experiments.predict import FRAME_HEADER_BYTES, Link, ps_round_s, tensor_chunks

WORKER, SHARD = 0, 1


@dataclass
class Flow:
    src: int
    dst: int
    left: float  # bytes
    weight: float
    on_done: Callable[[float], None]
    priority: tuple = ()
    queue: int = WORKER


def max_min_rates(flows: list[Flow], capacity: float) -> list[float]:
    """Weighted max-min fair rates: each flow crosses its sender's uplink and its receiver's
    downlink, all of `capacity` bytes/s; the links fill in turn, the most contended first."""
    links: dict[tuple[int, int], list[int]] = {}
    for k, flow in enumerate(flows):
        links.setdefault((0, flow.src), []).append(k)
        links.setdefault((1, flow.dst), []).append(k)
    left = dict.fromkeys(links, capacity)
    rate = [0.0] * len(flows)
    frozen = [False] * len(flows)
    while not all(frozen):
        step, tightest = math.inf, None
        for link, members in links.items():
            weight = sum(flows[k].weight for k in members if not frozen[k])
            if weight > 0 and left[link] / weight < step:
                step, tightest = left[link] / weight, link
        if tightest is None:
            break
        for link, members in links.items():
            left[link] -= step * sum(flows[k].weight for k in members if not frozen[k])
        for k, flow in enumerate(flows):
            if not frozen[k]:
                rate[k] += step * flow.weight
        for link, members in links.items():
            if link == tightest or left[link] <= 1e-9 * capacity:
                for k in members:
                    frozen[k] = True
    return rate


@dataclass
class Network:
    nodes: int
    link: Link
    threads: int
    sigma: float
    rng: random.Random
    lowat: float  # TCP_NOTSENT_LOWAT: a frame's last bytes wait in the socket, not a thread
    now: float = 0.0
    queued: dict[tuple[int, int], list] = field(default_factory=dict)
    sending: list[Flow] = field(default_factory=list)
    count: int = 0

    def send(self, src: int, queue: int, dst: int, size: float, priority: tuple,
             on_done: Callable[[float], None]) -> None:  # fmt: skip
        weight = math.exp(self.sigma * self.rng.gauss(0.0, 1.0) - self.sigma**2 / 2)
        flow = Flow(src, dst, size, weight, on_done, priority, queue)
        heapq.heappush(self.queued.setdefault((src, queue), []), (priority, self.count, flow))
        self.count += 1

    def _take(self) -> None:
        """Free sender threads take the most urgent frames to peers nobody is writing to."""
        for (src, queue), heap in self.queued.items():
            ours = [f for f in self.sending if f.src == src and f.queue == queue]
            busy = {f.dst for f in ours}
            mine = [f for f in ours if f.left > self.lowat]  # a thread still writes it
            skipped = []
            while heap and len(mine) < self.threads:
                entry = heapq.heappop(heap)
                if entry[2].dst in busy:
                    skipped.append(entry)
                    continue
                self.sending.append(entry[2])
                if entry[2].left > self.lowat:
                    mine.append(entry[2])
                busy.add(entry[2].dst)
            for entry in skipped:
                heapq.heappush(heap, entry)

    def run(self) -> None:
        """Until every frame (and those their on_done sends) is through."""
        while self.sending or any(self.queued.values()):
            self._take()
            rates = max_min_rates(self.sending, self.link.bytes_per_s)
            step = min(f.left / r for f, r in zip(self.sending, rates) if r > 0)
            # ... or until a frame's rest fits in its socket, which frees its thread.
            step = min([step] + [(f.left - self.lowat) / r for f, r in zip(self.sending, rates)
                                 if r > 0 and f.left > self.lowat])  # fmt: skip
            self.now += step
            done = []
            for flow, rate in zip(self.sending, rates):
                flow.left -= rate * step
                if flow.left <= 1e-6 * max(1.0, rate * step):
                    done.append(flow)
            for flow in done:
                self.sending.remove(flow)
                flow.on_done(self.now + self.link.latency_s)


def simulate_round(net: Network, layers: list[list[float]], round_number: int) -> float:
    """Every node pushes every layer's chunks at once (the send queues take lower layers
    first); the time until every node has every sum."""
    p = net.nodes
    start = net.now
    global_index, first = {}, 0  # a chunk's index over all layers; its shard is that mod P
    for index, chunks in enumerate(layers):
        for c in range(len(chunks)):
            global_index[(index, c)] = first + c
        first += len(chunks)
    owner = {key: g % p for key, g in global_index.items()}
    pushes_in: dict[tuple[int, int], int] = {}
    replies_left = [p * sum(len(chunks) for chunks in layers)]
    finished = [start]

    def reply_in(t: float) -> None:
        replies_left[0] -= 1
        finished[0] = max(finished[0], t)

    def push_in(t: float, index: int, c: int) -> None:
        key = (index, c)
        pushes_in[key] = pushes_in.get(key, 0) + 1
        if pushes_in[key] < p:
            return
        shard = owner[key]
        reply_in(t)  # its own worker's copy is in place
        for turn in range(1, p):  # the others, starting with the next node
            worker = (shard + turn) % p
            net.send(shard, SHARD, worker, layers[index][c] + FRAME_HEADER_BYTES,
                     (round_number, index, c), reply_in)  # fmt: skip

    for worker in range(p):
        for index, chunks in enumerate(layers):
            for c, size in enumerate(chunks):
                shard = owner[(index, c)]
                if shard == worker:
                    push_in(start, index, c)
                    continue
                g = global_index[(index, c)]  # its place among the layer's frames
                priority = (round_number, index, (g // p) * p + (g % p - worker) % p)
                net.send(worker, WORKER, shard, size + FRAME_HEADER_BYTES, priority,
                         lambda t, index=index, c=c: push_in(t, index, c))  # fmt: skip
    net.run()
    if replies_left[0]:
        raise RuntimeError(f"round {round_number}: {replies_left[0]} sums never arrived")
    net.now = finished[0]
    return finished[0] - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--megabytes", type=float, default=4.0)
    parser.add_argument("--chunk", default="1MiB")
    parser.add_argument("--tensors", type=int, default=1)
    parser.add_argument("--rate-mbit", type=float, default=25.0)
    parser.add_argument("--threads", type=int, default=Config.comm_threads)
    parser.add_argument("--lowat", type=lambda text: parse_bytes(text, "--lowat"),
                        default=Config.notsent_lowat_bytes,
                        help="TCP_NOTSENT_LOWAT (POSEIDON_NOTSENT_LOWAT)")  # fmt: skip
    parser.add_argument("--sigma", default="0,0.3",
                        help="spreads of the frames' shares, comma-separated")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args(argv)
    chunk = parse_bytes(args.chunk, "--chunk")
    link = Link(args.rate_mbit * 1e6, TCP_GOODPUT_TBF)
    floats = int(args.megabytes * 2**20) // 4
    layers = tensor_chunks(floats, args.workers, chunk, args.tensors)
    fluid = ps_round_s(floats, args.workers, link, chunk, args.threads, args.tensors)
    frames = sorted({round(size / 1024) for chunks in layers for size in chunks})
    print(f"P = {args.workers}, {args.megabytes:g} MiB in {args.tensors} tensor(s), "
          f"{args.chunk} chunks (frames of {'/'.join(map(str, frames))} KiB), "
          f"{args.rate_mbit:g} Mbit/s; predictor's round {fluid:.3f} s")  # fmt: skip
    for sigma in (float(s) for s in args.sigma.split(",")):
        rounds = []
        for seed in range(args.seeds):
            net = Network(args.workers, link, args.threads, sigma, random.Random(seed),
                          args.lowat)  # fmt: skip
            rounds += [simulate_round(net, layers, r) for r in range(args.rounds)]
        misses = [fluid / r - 1 for r in rounds]  # as bench/round_timeline.py prints them
        print(f"sigma {sigma:g}: the predictor's round misses by {sum(misses) / len(misses):+.1%} "
              f"on average ({min(misses):+.1%} to {max(misses):+.1%})", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
