"""The engine's own host work per iteration on CPU, round by round.

Prints, per round, the median and the spread of what `poseidon profile` stores as a CPU
profile's `host_s` (poseidon/experiments/profile_host.py, Note [host work]): each solver step
(SGD with momentum and weight decay) minus the same net's layers and updates timed alone
right after it (docs/experiments.md §6.5: how much it moves from one run to the next).

    .venv/bin/python bench/solver_host_work.py bench/nets/unseen_b.prototxt
"""

from __future__ import annotations

import argparse
import statistics
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("net", help="the net's prototxt (its TRAIN phase is timed)")
    parser.add_argument("--batch", type=int, default=None, help="default: the prototxt's")
    parser.add_argument("--iterations", type=int, default=30, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)  # as the CPU profiles and the replay's workers run
    import caffe
    from poseidon.experiments.profile_host import host_samples
    from poseidon.experiments.profile_measure import host_seconds

    caffe.set_mode_cpu()
    for _ in range(args.rounds):
        samples = host_samples(args.net, args.batch, args.iterations, warmup=5)
        low, _, high = statistics.quantiles(samples, n=4)
        print(f"host {host_seconds(samples) * 1e3:.2f} ms per iteration (quartiles "
              f"{low * 1e3:.2f}-{high * 1e3:.2f} ms, {len(samples)} steps)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
