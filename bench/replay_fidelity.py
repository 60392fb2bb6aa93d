"""Replay fidelity: real training and the replay of its CPU profile on the same emulated
hosts agree in iteration time (target: within 10%, every mode, P = 1, 2, 4).

    sudo .venv/bin/python bench/replay_fidelity.py [--nodes 1,2,4] [--bandwidth 200mbit]
                                    [--iterations 10] [--min-seconds 3] [-o fidelity.json]

The net is bench/scaling_net.py's (FC-heavy, 5.4 M parameters, batch 16), small enough to
train for real here. For each node count P the profile is measured the way each emulated
node sees this machine: one thread per worker, P copies measuring at once on the 2 cores
(`poseidon profile --threads 1 --copies P`); then `poseidon experiment --emulate` runs the
real net (DummyData) and the replay of that profile on the same namespaces and links,
and the table compares them cell by cell.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scaling_net import prototxt  # noqa: E402

MODES = "ps-nooverlap,wfbp,poseidon,allreduce"


def poseidon(*args: str) -> list[str]:
    return [sys.executable, "-m", "poseidon.cli", *args]


def run(command: list[str]) -> None:
    print("$", " ".join(command), flush=True)
    env = {**os.environ, "GLOG_minloglevel": "1"}
    subprocess.run(command, check=True, env=env)


def cells(path: str) -> dict[tuple[str, int], float]:
    with open(path, encoding="utf-8") as f:
        return {(c["mode"], c["nodes"]): c["iteration_s"] for c in json.load(f)["cells"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="1,2,4")
    parser.add_argument("--bandwidth", default="200mbit")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=10, help="timed iterations, at least")
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=3.0,
        help="a cell whose real run timed less than this is run again (real and replay) "
        "with enough iterations: one short cell is mostly noise",
    )
    parser.add_argument("-o", "--output", help="write both tables as JSON")
    args = parser.parse_args(argv)
    nodes = [int(p) for p in args.nodes.split(",")]
    real: dict[tuple[str, int], float] = {}
    replay: dict[tuple[str, int], float] = {}
    iterations: dict[tuple[str, int], int] = {}
    with tempfile.TemporaryDirectory() as directory:
        net = os.path.join(directory, "scaling_net.prototxt")
        with open(net, "w", encoding="utf-8") as f:
            f.write(prototxt(args.batch))

        def experiment(p: int, modes: list[str], count: int, profile: str | None) -> dict:
            what = "replay" if profile else "real"
            out = os.path.join(directory, f"{what}{p}-{count}.json")
            command = ["experiment", "--model", net, "--emulate", "--bandwidth", args.bandwidth,
                       "--modes", ",".join(modes), "--iterations", str(count), "--nodes",
                       str(p), "-o", out]  # fmt: skip
            if profile:
                command += ["--profile", profile, "--dilation", "1"]
            run(poseidon(*command))
            return cells(out)

        for p in nodes:
            profile = os.path.join(directory, f"scaling_net.copies{p}.json")
            run(poseidon("profile", "--model", net, "--threads", "1", "--copies", str(p),
                         "--iterations", "10", "-o", profile))  # fmt: skip
            modes = MODES.split(",")
            real.update(experiment(p, modes, args.iterations, None))
            for mode in modes:
                needed = math.ceil(args.min_seconds / real[(mode, p)])
                iterations[(mode, p)] = max(args.iterations, needed)
            for mode in modes:
                if iterations[(mode, p)] > args.iterations:
                    real.update(experiment(p, [mode], iterations[(mode, p)], None))
            for count in sorted({iterations[(m, p)] for m in modes}):
                group = [m for m in modes if iterations[(m, p)] == count]
                replay.update(experiment(p, group, count, profile))
    print(f"\n{'mode':<14}{'P':>3}{'iters':>7}{'real s':>10}{'replay s':>10}{'replay/real':>13}")
    worst = 0.0
    rows = []
    for (mode, p), seconds in sorted(real.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ratio = replay[(mode, p)] / seconds
        worst = max(worst, abs(ratio - 1))
        count = iterations[(mode, p)]
        rows.append({"mode": mode, "nodes": p, "iterations": count, "real_s": seconds,
                     "replay_s": replay[(mode, p)], "ratio": ratio})  # fmt: skip
        print(f"{mode:<14}{p:>3}{count:>7}{seconds:>10.4f}{replay[(mode, p)]:>10.4f}{ratio:>13.3f}")
    print(f"worst |replay/real - 1| = {worst:.1%} (target <= 10%)")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "command": " ".join(sys.argv),
                    "date": time.strftime("%Y-%m-%d"),
                    "bandwidth": args.bandwidth,
                    "batch": args.batch,
                    "worst": worst,
                    "cells": rows,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
