"""One worker of an experiment cell, started by `poseidon experiment` through the launcher:

    python -m poseidon.experiments.worker --model NET.prototxt [--batch K]
        [--profile P.json --dilation D --byte-scale S] [--warmup W] [--iterations N]
        [--device cpu|cuda] [--threads T]

With --profile it trains the replay of the profiled net (poseidon/experiments/replay.py),
otherwise the real net (its data layers must need no files: DummyData). The sync mode, rank
and peers come from the POSEIDON_* variables the launcher sets, exactly as for `caffe train`:
the same caffe.parallel attach. After a barrier it runs W + N + 1 iterations in one step() call
and times the N after the first W, from the start of one iteration to the start of another
(Note [timed window]); then it prints one line,
`RESULT {json}`: iteration_s (undilated), the bytes it moved per iteration, its clock's
statistics, a checksum of its weights (the experiment checks that workers agree) and the
plan's layers served other than by PS.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from poseidon.experiments.run import RESULT_MARK


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="poseidon.experiments.worker")
    p.add_argument("--model", required=True, help="net prototxt")
    p.add_argument("--batch", type=int, help="override the data layers' batch")
    p.add_argument("--profile", help="replay this compute profile instead of computing")
    p.add_argument("--dilation", type=float, default=1.0)
    p.add_argument("--byte-scale", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch threads (real compute)")
    return p.parse_args(argv)


def solver_parameter(net: Any, device: str) -> Any:
    """SGD with momentum and weight decay, as the paper's models train; nothing else runs
    (no test, display or snapshot) so that an iteration is forward, backward and update."""
    from caffe.proto import caffe_pb2
    from poseidon.experiments.profile_measure import LEARNING_RATE, MOMENTUM, WEIGHT_DECAY

    param = caffe_pb2.SolverParameter()
    param.net_param.CopyFrom(net)
    param.type = "SGD"
    # The update a CPU profile times (profile_measure._update_op) uses the same values.
    param.base_lr, param.momentum, param.weight_decay = LEARNING_RATE, MOMENTUM, WEIGHT_DECAY
    param.lr_policy = "fixed"
    param.max_iter = 1 << 30
    param.display = 0
    param.snapshot = 0
    param.snapshot_after_train = False
    param.random_seed = 7
    param.solver_mode = (
        caffe_pb2.SolverParameter.GPU if device == "cuda" else caffe_pb2.SolverParameter.CPU
    )
    return param


def build_net_param(args: argparse.Namespace) -> Any:
    from caffe.formats.proto_io import read_net_param
    from poseidon.experiments.netspec import set_batch

    net = read_net_param(args.model)
    if args.batch:
        set_batch(net, args.batch, args.model)
    if not args.profile:
        return net
    from poseidon.experiments.clock import configure
    from poseidon.experiments.profile import load_profile
    from poseidon.experiments.replay import replay_net_param

    profile = load_profile(args.profile)
    # A CPU is its own host: its profile's times already hold each layer's host work, and
    # the syncer's host work (copies, sums) comes on top instead of overlapping (Note
    # [device clock]). A GPU's queue hides host work up to the clock's slack.
    configure(args.dilation, host_is_device=profile.device.get("kind") == "cpu")
    return replay_net_param(net, profile, args.byte_scale, args.model)


def traffic_bytes(sync: Any) -> tuple[int, int]:
    """(sent, received) so far by this worker, all layers."""
    if hasattr(sync, "traffic"):
        per_layer = sync.traffic().values()
        return sum(s for s, _ in per_layer), sum(r for _, r in per_layer)
    return 0, 0


@dataclass(frozen=True)
class Mark:
    """What a worker has spent and moved when an iteration starts."""

    clock_s: float  # time.perf_counter()
    cpu_s: float  # this process's CPU time
    sent: int
    received: int
    charged_s: float  # the replay clock's charged compute
    late_s: float  # and how late it ran
    idle_s: float  # and how long the device idled (the clock's restarts)
    restarts: int


class IterationMarks:
    """A solver callback that records a Mark when each of the `wanted` iterations (counted
    from 0 at attach) starts; the others cost a counter."""

    def __init__(self, sync: Any, clock: Any, wanted: tuple[int, ...]) -> None:
        self.sync, self.clock, self.wanted = sync, clock, wanted
        self.started = 0
        self.marks: list[Mark] = []

    def on_start(self) -> None:
        if self.started in self.wanted:
            sent, received = traffic_bytes(self.sync)
            stats = self.clock.stats
            self.marks.append(Mark(time.perf_counter(), time.process_time(), sent, received,
                                   stats.charged_s, stats.late_s, stats.idle_s,
                                   stats.restarts))  # fmt: skip
        self.started += 1

    def on_gradients_ready(self) -> None:
        pass


def timed_window(solver: Any, sync: Any, clock: Any, warmup: int, n: int) -> tuple[Mark, Mark]:
    """Run warmup + n + 1 iterations; the Marks at the start of iteration `warmup` and of
    iteration `warmup + n`.

    Note [timed window]: one step() call, timed from the start of one iteration to the start
    of another, and one iteration more so that the last timed one ends as every other does.
    A step() call completes every pending sync before it returns (caffe/solvers/solver.py:
    the flush), so timing whole calls counts one iteration with nothing in flight at its
    start and one drain that no forward pass overlaps: VGG19-22K WFBP on 8 emulated 10 GbE
    nodes read 1.474 s that way at dilation 16, while its iterations inside that window took
    1.40-1.41 s each."""
    if n < 1 or warmup < 0:
        raise ValueError(f"a timed window of {n} iterations after {warmup} warm-up ones "
                         "(want n >= 1, warmup >= 0)")  # fmt: skip
    marks = IterationMarks(sync, clock, (warmup, warmup + n))
    handle = solver.add_callback(marks.on_start, marks.on_gradients_ready)
    try:
        solver.step(warmup + n + 1)
    finally:
        handle.remove()
    if len(marks.marks) < 2:
        raise RuntimeError(f"the job stopped after {marks.started} iterations, before the "
                           f"{warmup} warm-up and {n} timed ones were done")  # fmt: skip
    return marks.marks[0], marks.marks[1]


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(max(1, args.threads))
    logging.getLogger("caffe").setLevel(logging.WARNING)
    from caffe.parallel import attach_from_environment, prepare_worker
    from caffe.solvers import get_solver
    from poseidon.experiments.clock import device_clock

    prepare_worker()
    param = solver_parameter(build_net_param(args), args.device)
    mode = "GPU" if args.device == "cuda" else "CPU"
    if args.profile:
        from poseidon.experiments.replay import ReplaySolver

        solver = ReplaySolver(param, mode=mode)
    else:
        solver = get_solver(param, mode=mode)
    # A replay's weights are the same placeholders on every worker: no broadcast needed
    # (rank 0's uplink would carry every SFB layer P-1 times, minutes when dilated).
    sync = attach_from_environment(solver, broadcast_weights=not args.profile)
    error: BaseException | None = None
    try:
        sync.barrier("timed")
        n = args.iterations
        first, last = timed_window(solver, sync, device_clock(), args.warmup, n)
        sync.barrier("done")
        elapsed = last.clock_s - first.clock_s
        dilation = args.dilation if args.profile else 1.0
        return {
            "rank": solver_rank_of(sync),
            "iteration_s": elapsed / n / dilation,
            "wall_iteration_s": elapsed / n,
            "bytes_sent": (last.sent - first.sent) / n,
            "bytes_received": (last.received - first.received) / n,
            "compute_s": (last.charged_s - first.charged_s) / n,
            "late_s": (last.late_s - first.late_s) / n / dilation,
            "idle_s": (last.idle_s - first.idle_s) / n / dilation,
            "restarts": (last.restarts - first.restarts) / n,
            # This process's CPU time (all its threads) per iteration, real seconds: what a
            # node costs the machine that emulates it (run.py: choose_dilation).
            "host_cpu_s": (last.cpu_s - first.cpu_s) / n,
            "checksum": float(solver.net.param_data.double().sum()),
            "schemes": planned_schemes(sync),
        }
    except BaseException as e:
        error = e
        raise
    finally:
        sync.close(error)


def planned_schemes(sync: Any) -> dict[str, str]:
    """The layers the plan serves other than by PS (SFB and the lossy schemes), by name;
    empty for the all-reduce baseline."""
    from poseidon import _C
    from poseidon.plan import BROADCAST_NAME

    plan = getattr(sync, "plan", None)
    if plan is None:
        return {}
    return {lp.name: _C.scheme_name(lp.scheme) for lp in plan.layers
            if lp.scheme != _C.Scheme.PS and lp.name != BROADCAST_NAME}  # fmt: skip


def solver_rank_of(sync: Any) -> int:
    from caffe.common import solver_rank

    return int(getattr(sync, "rank", solver_rank()))


def main(argv: list[str] | None = None) -> int:
    result = run(parse_args(argv))
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
