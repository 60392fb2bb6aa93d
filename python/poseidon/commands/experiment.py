"""Run the paper's scaling experiment: iteration time, images/s and speed-up of each sync
mode on each node count, on emulated nodes (`--emulate`: network namespaces with links
capped by tc; needs root) or on a real cluster (`--hostfile`, over ssh), computing for real
(the model with DummyData) or replaying a compute profile (`--profile`). Prints a table;
`-o` writes the JSON, `--plot` the figure. See docs/experiments.md."""

from __future__ import annotations

import argparse

from poseidon.experiments.emulation import DEFAULT_QUEUE_MS

HELP = "run a scaling experiment on emulated nodes or a real cluster (speed-up per mode)"
DEFAULT_MODES = "ps-nooverlap,wfbp,poseidon,allreduce"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="zoo name (e.g. vgg19_22k) or net prototxt")
    p.add_argument(
        "--profile",
        help="compute profile: a file, or a models/profiles name "
        "such as titanx-maxwell (required with --emulate)",
    )
    p.add_argument("--nodes", default="1,2,4,8,16", help="node counts, e.g. 1,2,4,8,16")
    p.add_argument("--bandwidth", help="link speed of each node, e.g. 10gbit, 25GbE, 100mbit")
    p.add_argument(
        "--modes",
        default=DEFAULT_MODES,
        help="sync modes, comma-separated; poseidon-tuned: Poseidon with per-layer PS/SFB "
        "chosen by predicted time (needs --profile)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--emulate",
        action="store_true",
        help="on this machine: one network namespace per node (root)",
    )
    where.add_argument("--hostfile", help="a real cluster: lines 'host [slots=N]', over ssh")
    p.add_argument("--ssh", help="ssh command for --hostfile (default: ssh -o BatchMode=yes)")
    p.add_argument("--iterations", type=int, default=5, help="timed iterations per cell")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run each cell N times; the JSON keeps the run of median time and "
                   "lists every run's (runs_s)")  # fmt: skip
    p.add_argument("--batch", type=int, help="batch per node (default: the profile's)")
    p.add_argument("--dilation", type=float, help="time dilation (default: chosen, see docs)")
    p.add_argument("--byte-scale", type=int, help="byte scale, a power of two (default: chosen)")
    p.add_argument("--chunk-bytes", type=int, default=None,
                   help="PS chunk size, bytes of the real cluster (default 1 MiB; "
                   "POSEIDON_CHUNK_BYTES); replayed, divided by the byte scale")  # fmt: skip
    p.add_argument("--queue-ms", type=float, default=None,
                   help="--emulate: each link's queue, in milliseconds at the link's emulated "
                   f"rate (default {DEFAULT_QUEUE_MS:g}; docs/experiments.md §2)")  # fmt: skip
    p.add_argument("--gso", choices=("on", "off"), default=None,
                   help="--emulate: 'off' makes TCP send single packets through the links, "
                   "not 64 KiB super-packets (default on; docs/experiments.md §2)")  # fmt: skip
    p.add_argument("--threads", type=int, default=1,
                   help="real compute: torch threads per worker (default 1)")  # fmt: skip
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="real compute on a cluster: cpu or cuda",
    )
    p.add_argument(
        "--quick", action="store_true", help="nodes 1 and 2, 2 timed iterations after 1 warm-up"
    )
    p.add_argument(
        "--timeline",
        help="directory for each cell's Chrome traces "
        "(<mode>-P<nodes>.<rank>.json; replayed times are dilated)",
    )
    p.add_argument("--compression", default="none",
                   help="lossy schemes the plan may pick (POSEIDON_COMPRESSION): none, bf16, "
                        "powersgd[:R] or auto[:R]; planned by time on the link "
                        "(docs/communication.md §5)")  # fmt: skip
    p.add_argument("--powersgd-rank", type=int, default=4, help="PowerSGD's rank (default 4)")
    p.add_argument("--workers-per-node", type=int, default=1, metavar="G",
                   help="G workers on each node (e.g. GPUs per machine): each mode with local "
                   "aggregation (POSEIDON_WORKERS_PER_HOST) and, as MODE-flat, without; "
                   "all-reduce as one ring over every worker")  # fmt: skip
    p.add_argument("-o", "--output", help="write the results as JSON (after every cell)")
    p.add_argument("--plot", help="write a PNG of speed-up against nodes")


def run(args: argparse.Namespace) -> int:
    from poseidon.commands._common import fail
    from poseidon.experiments.emulation import EmulationError
    from poseidon.experiments.experiment import ExperimentRequest, run_experiment

    try:
        request = ExperimentRequest.from_args(args)
    except (ValueError, EmulationError) as e:
        return fail("experiment", e)
    return run_experiment(request)
