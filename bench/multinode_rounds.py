"""PS rounds simulated on every node, with TCP's uneven shares: how long a round runs past
the predictor's, where one node stands for all of them.

The predictor (poseidon/experiments/predict.py) simulates one node's uplink and lets it
stand for every node. Here every node is simulated with the network of
poseidon/experiments/every_node.py (Note [every node]: every host's uplink and downlink,
the frames in flight sharing them by weighted max-min with lognormal weights of spread
`sigma`, sigma = 0 being the predictor's fluid link and the round `ps_round_s` exactly; the
comm core's two send queues, `threads` sender threads each, freed at TCP_NOTSENT_LOWAT,
`--lowat`), one round of P pushes per chunk and P − 1 sums at a time. Rounds run one after
the other from a barrier, as bench/round_timeline.py runs them; the output is each sigma's
mean over the rounds and seeds of the predictor's miss, `ps_round_s` over the round's time,
less 1, as round_timeline prints it for the emulated rounds (docs/benchmarks.md, "The
round's tail and the frame size").

    .venv/bin/python bench/multinode_rounds.py [--workers 4] [--megabytes 4]
        [--chunk 1MiB] [--tensors 1] [--rate-mbit 25] [--sigma 0,0.3] [--rounds 6]
        [--seeds 4] [--threads 2] [--lowat 256KiB]
"""

from __future__ import annotations

import argparse
import random
import sys

from poseidon.config import Config, parse_bytes
from poseidon.experiments.emulation import TCP_GOODPUT_TBF
from poseidon.experiments.every_node import SHARD, WORKER, Network
from poseidon.experiments.predict import FRAME_HEADER_BYTES, Link, ps_round_s, tensor_chunks


def simulate_round(net: Network, p: int, layers: list[list[float]], round_number: int) -> float:
    """Every one of `p` nodes pushes every layer's chunks at once (the send queues take lower
    layers first); the time until every node has every sum."""
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
            net = Network(link, args.threads, sigma, random.Random(seed), args.lowat)
            rounds += [simulate_round(net, args.workers, layers, r) for r in range(args.rounds)]
        misses = [fluid / r - 1 for r in rounds]  # as bench/round_timeline.py prints them
        print(f"sigma {sigma:g}: the predictor's round misses by {sum(misses) / len(misses):+.1%} "
              f"on average ({min(misses):+.1%} to {max(misses):+.1%})", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
