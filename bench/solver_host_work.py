"""The engine's own host work per iteration on CPU: a solver step against its parts.

Times `Solver.step(1)` of a net (SGD with momentum and weight decay, the update a CPU profile
charges) and, right after on the same net, each layer's forward and backward alone
(`caffe.tools.layer_timing.time_layers`, what `poseidon profile` measures), and prints

    host = step − Σ layers − Σ updates

per round, medians of `--iterations` steps, each part measured now as `poseidon profile`
measures it (so the machine's speed of the day cancels out). This is what a real CPU node
spends besides what its profile holds (the solver's and the net's Python between layers);
docs/experiments.md §6.5 sets it beside the replay's.

    .venv/bin/python bench/solver_host_work.py bench/nets/unseen_b.prototxt
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("net", help="the net's prototxt (its TRAIN phase is timed)")
    parser.add_argument("--iterations", type=int, default=30, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)  # as the CPU profiles and the replay's workers run
    import caffe
    from caffe.proto import caffe_pb2
    from caffe.tools.layer_timing import time_layers
    from poseidon.experiments.profile_measure import _update_samples

    param = caffe_pb2.SolverParameter()
    param.net = args.net
    param.base_lr, param.momentum, param.weight_decay = 0.001, 0.9, 5e-4
    param.lr_policy, param.max_iter, param.display = "fixed", 1 << 30, 0
    param.snapshot_after_train = False
    solver = caffe.SGDSolver(param)
    net = solver.net
    for _ in range(args.rounds):
        solver.step(5)  # warm-up
        steps = []
        for _ in range(args.iterations):
            start = time.perf_counter()
            solver.step(1)
            steps.append(time.perf_counter() - start)
        timed = time_layers(net, args.iterations)
        layers = sum(
            statistics.median(t.forward_s[i] for t in timed)
            + statistics.median(t.backward_s[i] for t in timed)
            for i in range(len(net.layers))
        )
        updates = _update_samples(net, args.iterations)  # each layer's, as profiled
        update = sum(statistics.median(times) for times in updates.values())
        step = statistics.median(steps)
        print(f"step {step * 1e3:.2f} ms = layers {layers * 1e3:.2f} + update {update * 1e3:.2f}"
              f" + host {(step - layers - update) * 1e3:.2f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
