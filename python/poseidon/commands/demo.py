"""The demo: LeNet on scikit-learn's digits (as MNIST-like LMDBs), trained by P1
workers and P2 KV-store shards on this machine with Poseidon, printing the HybComm plan
and Caffe's log lines, and checking the final test accuracy (target ≥ 97%).

Each worker reads batch 64/P1 from its shard of the data, so the job trains exactly like
the single-process `caffe train` of models/lenet/lenet_digits_solver.prototxt (global
batch 64): P1 workers × batch K = one process × batch P1·K.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

HELP = "train LeNet on the digits with local workers and shards (the README's demo)"
GLOBAL_BATCH = 64
TARGET_ACCURACY = 0.97
SOLVER = "lenet_digits_solver.prototxt"
NET = "lenet_digits_train_test.prototxt"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from poseidon.config import SYNC_MODES

    p.add_argument("-n", "--workers", type=int, default=2, help="P1 (default 2)")
    p.add_argument("-s", "--servers", type=int, default=2, help="P2 (default 2)")
    p.add_argument("--sync", choices=SYNC_MODES, default="poseidon")
    p.add_argument("--dir", default=os.path.join("runs", "demo"), help="working directory")
    p.add_argument("--timeline", help="write each worker's Chrome trace here")
    p.add_argument(
        "--prepare-only",
        action="store_true",
        help="write the data, solver and net for -n workers into --dir and exit, for a "
        "cluster started another way (docker/compose.yaml: docs/deploy.md)",
    )


def models_dir() -> str:
    """The first zoo (poseidon/experiments/resolve.py: POSEIDON_MODELS, ./models, the
    checkout's, the installed copy) that holds LeNet's solver."""
    from poseidon.experiments.resolve import models_dirs

    for path in models_dirs():
        if (path / "lenet" / SOLVER).is_file():
            return str(path.resolve())
    raise FileNotFoundError(f"models/lenet/{SOLVER} not found (set POSEIDON_MODELS to a "
                            "models/ directory)")  # fmt: skip


def prepare(directory: str, workers: int) -> None:
    """Digits LMDBs (once) and the LeNet solver/net with batch 64/P1 per worker."""
    from caffe.formats.proto_io import read_net_param, write_text
    from caffe.proto import caffe_pb2
    from caffe.tools.convert_digits import convert_digits

    os.makedirs(directory, exist_ok=True)
    if not os.path.isdir(os.path.join(directory, "digits_test_lmdb")):
        train, test = convert_digits(directory)
        print(f"[demo] digits: {train} training and {test} test images in {directory}")
    lenet = os.path.join(models_dir(), "lenet")
    with open(os.path.join(lenet, SOLVER)) as f:
        solver_text = f.read()
    with open(os.path.join(directory, SOLVER), "w") as f:
        f.write(solver_text)
    net = read_net_param(os.path.join(lenet, NET))
    for layer in net.layer:
        training = any(r.phase == caffe_pb2.TRAIN for r in layer.include)
        if layer.type == "Data" and training:
            layer.data_param.batch_size = GLOBAL_BATCH // workers
    write_text(os.path.join(directory, NET), net)


def run(args: argparse.Namespace) -> int:
    from poseidon.commands._common import fail
    from poseidon.launch import JobSpec, run_job

    if args.workers < 1 or args.servers < 1 or GLOBAL_BATCH % args.workers:
        return fail("demo", f"-n must divide {GLOBAL_BATCH} and -s must be >= 1")
    try:
        prepare(args.dir, args.workers)
    except (OSError, RuntimeError) as e:
        return fail("demo", e)
    if args.prepare_only:
        batch = GLOBAL_BATCH // args.workers
        print(f"[demo] {SOLVER}, {NET} (batch {batch} for each of {args.workers} workers) "
              f"and the digits LMDBs are in {args.dir}", flush=True)  # fmt: skip
        return 0
    timeline = os.path.abspath(args.timeline) if args.timeline else ""
    print(
        f"[demo] LeNet on digits: {args.workers} workers x batch "
        f"{GLOBAL_BATCH // args.workers}, {args.servers} shards, sync {args.sync}",
        flush=True,
    )
    command = [sys.executable, "-m", "caffe.tools.cli", "train", "--solver", SOLVER]
    spec = JobSpec(command=command, num_workers=args.workers, num_servers=args.servers,
                   sync=args.sync, timeline=timeline)  # fmt: skip
    capture = _Tee(sys.stdout)
    previous = os.getcwd()
    os.chdir(args.dir)
    try:
        status = run_job(spec, out=capture)
    finally:
        os.chdir(previous)
    if status != 0:
        return status
    accuracy = capture.last_accuracy
    if accuracy is None:
        return fail("demo", "training ended without a test accuracy line", 1)
    verdict = "reached" if accuracy >= TARGET_ACCURACY else "MISSED"
    print(f"[demo] final test accuracy {accuracy:.2%} ({verdict} the {TARGET_ACCURACY:.0%} "
          f"target); snapshots in {args.dir}", flush=True)  # fmt: skip
    return 0 if accuracy >= TARGET_ACCURACY else 1


class _Tee:
    """Passes the job's output through and remembers worker 0's last test accuracy."""

    ACCURACY = re.compile(r"\[worker 0\].*Test net output #\d+: accuracy = ([0-9.eE+-]+)")

    def __init__(self, out) -> None:
        self.out = out
        self.last_accuracy: float | None = None

    def write(self, text: str) -> None:
        for match in self.ACCURACY.finditer(text):
            self.last_accuracy = float(match.group(1))
        self.out.write(text)

    def flush(self) -> None:
        self.out.flush()
