"""Poseidon's DistributedDataParallel beside PyTorch's (gloo), with and without the PowerSGD
hook (rank 1 and 4), training the same models on the same batches, with every emulated
host's link capped by tc in its own network namespace (needs root and iproute2). One run,
side by side.

    sudo .venv/bin/python bench/torch_vs_ddp.py [--models fc,transformer,vgg]
        [--workers 1,2,4] [--rates-mbit 100,1000] [--warmup 3] [--iters 6] [--rounds 2]
        [--loss-steps 100]

Models (bench/torch_vs_ddp_worker.py): fc, the FC-heavy digits classifier of
examples/pytorch/mlp_digits.py (32 images per worker); transformer, the language model of
examples/pytorch/transformer_lm.py (8 sequences of 64 tokens per worker); vgg, a VGG-style
net for 32×32 images (16 per worker). Throughput is samples (images, or tokens) per second
of the whole job, at its slowest worker's pace; each cell is the median of --rounds runs,
the systems taking turns within a round. Then the loss curves: --loss-steps steps of the fc
model on real digits at P = max(--workers) on loopback, each system beside one process on
the global batch. The bench checks the targets of issue 12 and prints them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from poseidon.experiments.emulation import EmulatedHosts

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_vs_ddp_worker.py")
# poseidon-step: the same, the wait for the last rounds moved to the optimizer step.
SYSTEMS = ("poseidon", "poseidon-step", "ddp", "powersgd-1", "powersgd-4")
BATCH = {"fc": 32, "transformer": 8, "vgg": 16}
UNIT = {"fc": "images", "transformer": "tokens", "vgg": "images"}
RESULT = re.compile(r"RESULT rank=(\d+) samples_per_s=([0-9.]+)")
TIMEOUT_S = 900


def clean_env(**changes: str) -> dict[str, str]:
    """This process's environment without Poseidon's or a launcher's job settings."""
    launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT")  # fmt: skip
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("POSEIDON_") and k not in launcher}  # fmt: skip
    return {**env, "OMP_NUM_THREADS": "1", "POSEIDON_TIMEOUT_MS": "600000", **changes}


def start(commands: list[list[str]], envs: list[dict[str, str]], what: str,
          done: re.Pattern[str] | None = None) -> list[str]:  # fmt: skip
    """Run the ranks' commands to their end; their outputs (an error names the job). A rank
    that printed `done` and then failed did so tearing down: said, not fatal (gloo with the
    PowerSGD hook was seen to abort at exit, "terminate called without an active exception",
    after its measurement)."""
    processes = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for c, e in zip(commands, envs)]  # fmt: skip
    outputs = [p.communicate(timeout=TIMEOUT_S)[0] for p in processes]
    failed = [r for r, p in enumerate(processes) if p.returncode]
    if failed and done is not None and all(done.search(o) for o in outputs):
        print(f"    ({what}: rank(s) {failed} failed after measuring, at teardown)", flush=True)
    elif failed:
        raise RuntimeError(f"{what} failed:\n" + "\n".join(o[-3000:] for o in outputs))
    return outputs


def rank_env(rank: int, workers: int, port: int, cluster: EmulatedHosts | None) -> dict[str, str]:
    if cluster is None:
        where = {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    else:
        where = {"MASTER_ADDR": cluster.addresses[0], "GLOO_SOCKET_IFNAME": cluster.inner(rank)}
    return clean_env(RANK=str(rank), WORLD_SIZE=str(workers), MASTER_PORT=str(port), **where)


def run(system: str, model: str, workers: int, cluster: EmulatedHosts | None,
        args: argparse.Namespace) -> list[str]:  # fmt: skip
    """The job's ranks, each in its emulated host's namespace; their outputs."""
    port = 29700 + (os.getpid() % 100) * 10
    commands, envs = [], []
    for rank in range(workers):
        prefix = cluster.exec_prefix(rank) if cluster is not None else []
        commands.append([*prefix, sys.executable, WORKER, system, model, str(BATCH[model]),
                         str(args.warmup), str(args.iters)])  # fmt: skip
        envs.append(rank_env(rank, workers, port, cluster))
    return start(commands, envs, f"{system} {model} P={workers}", RESULT)


def throughput(system: str, model: str, workers: int, cluster, args) -> float:
    outputs = run(system, model, workers, cluster, args)
    rates = [float(v) for o in outputs for _, v in RESULT.findall(o)]
    if len(rates) != workers:
        raise RuntimeError(f"{system} {model} P={workers}: {len(rates)} results\n{outputs}")
    return min(rates) * workers  # the job runs at its slowest worker's pace


def measure(args) -> dict[tuple[str, float, str, int], float]:
    """Every cell (model, rate, system, workers): samples/s, the median of --rounds runs; NaN
    for a cell that failed (its error is printed, the rest goes on). P = 1 moves nothing over
    the network: measured once, at the first rate, and shown for every rate."""
    cells: dict[tuple[str, float, str, int], float] = {}
    for rate in args.rates_mbit:
        for workers in args.workers:
            if workers == 1 and rate != args.rates_mbit[0]:
                for key in [k for k in cells if k[1] == args.rates_mbit[0] and k[3] == 1]:
                    cells[(key[0], rate, key[2], 1)] = cells[key]
                continue
            with EmulatedHosts(workers, rate * 1e6) as cluster:
                for model in args.models:
                    measure_cell(cells, model, rate, workers, cluster, args)
            if args.out:
                save(cells, args.out)
    return cells


def measure_cell(cells, model: str, rate: float, workers: int, cluster, args) -> None:  # type: ignore[no-untyped-def]
    samples: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    for round_ in range(args.rounds):
        order = SYSTEMS if round_ % 2 == 0 else tuple(reversed(SYSTEMS))
        for system in order:
            try:
                samples[system].append(throughput(system, model, workers, cluster, args))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"    {system} {model} P={workers} {rate:g} Mbit/s: {e}"[:3000], flush=True)
    for system in SYSTEMS:
        got = samples[system]
        cells[(model, rate, system, workers)] = statistics.median(got) if got else math.nan
    row = "  ".join(f"{s} {cells[(model, rate, s, workers)]:9.1f}" for s in SYSTEMS)
    print(f"  {rate:g} Mbit/s P={workers} {model:11} {row}", flush=True)


def save(cells, path: str) -> None:  # type: ignore[no-untyped-def]
    rows = [{"model": m, "rate_mbit": r, "system": s, "workers": p, "samples_per_s": v}
            for (m, r, s, p), v in sorted(cells.items())]  # fmt: skip
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)


def table(cells, args) -> str:
    lines = []
    for model in args.models:
        for rate in args.rates_mbit:
            lines.append(f"{model}, {rate:g} Mbit/s: {UNIT[model]}/s (ratio poseidon / system)")
            lines.append(f"{'system':<12}" + "".join(f"{'P=' + str(p):>20}" for p in args.workers))
            for system in SYSTEMS:
                row = []
                for p in args.workers:
                    value = cells[(model, rate, system, p)]
                    ours = cells[(model, rate, "poseidon", p)]
                    row.append(f"{value:10.1f} ({ours / value:4.2f}x)")
                lines.append(f"{system:<12}" + "".join(f"{c:>20}" for c in row))
            lines.append("")
    return "\n".join(lines)


def loss_curves(args: argparse.Namespace) -> dict[str, np.ndarray]:
    """Each system's loss per step (the mean of the ranks' losses on their rows, which is the
    global batch's loss) and one process's on the global batch ("single"), on loopback."""
    workers = max(args.workers)
    port = 29800 + (os.getpid() % 100) * 10
    curves = {}
    with tempfile.TemporaryDirectory() as directory:
        for system in ("single", *SYSTEMS):
            count = 1 if system == "single" else workers
            batch = BATCH["fc"] * (workers if system == "single" else 1)
            files = [os.path.join(directory, f"{system}.{r}.npy") for r in range(count)]
            commands = [[sys.executable, WORKER, system, "fc", str(batch), "0",
                         str(args.loss_steps), f] for f in files]  # fmt: skip
            envs = [rank_env(r, count, port, None) for r in range(count)]
            if system == "single":
                envs[0].pop("WORLD_SIZE")
            start(commands, envs, f"the loss curve of {system}")
            curves[system] = np.mean([np.load(f) for f in files], axis=0)
    return curves


def loss_report(curves: dict[str, np.ndarray]) -> tuple[str, bool]:
    """Each system's |loss − one process's| at a few steps and at worst; and whether Poseidon
    stays within the drift of DDP's exact all-reduce (float32 sums in another order, grown by
    training: the noise floor of any exact method)."""
    steps = len(curves["single"])
    marks = [s for s in (1, 10, 50, 100, 200) if s <= steps]
    lines = [
        f"{'system':<14}" + "".join(f"{'step ' + str(m):>11}" for m in marks) + f"{'worst':>11}"
    ]
    worst = {}
    for system in SYSTEMS:
        gap = np.abs(curves[system] - curves["single"])
        worst[system] = float(gap.max())
        lines.append(f"{system:<14}" + "".join(f"{gap[m - 1]:11.1e}" for m in marks)
                     + f"{worst[system]:11.1e}")  # fmt: skip
    exact = worst["poseidon"] <= max(2 * worst["ddp"], 1e-4)
    return "\n".join(lines), exact


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="fc,transformer,vgg")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rates-mbit", default="100,1000")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loss-steps", type=int, default=100)
    parser.add_argument("--out", help="write every cell to this JSON file as it is measured")
    args = parser.parse_args(argv)
    args.models = args.models.split(",")
    args.workers = [int(p) for p in args.workers.split(",")]
    args.rates_mbit = [float(r) for r in args.rates_mbit.split(",")]
    started = time.time()
    cells = measure(args)
    print()
    print(table(cells, args))
    p, slow = max(args.workers), min(args.rates_mbit)
    verdicts = []
    if "fc" in args.models and p > 1:
        ddp = cells[("fc", slow, "poseidon", p)] / cells[("fc", slow, "ddp", p)]
        psgd = cells[("fc", slow, "poseidon", p)] / cells[("fc", slow, "powersgd-4", p)]
        verdicts += [f"fc, P={p}, {slow:g} Mbit/s: poseidon/ddp {ddp:.2f}x (target >= 1.3) -> "
                     f"{'met' if ddp >= 1.3 else 'MISSED'}",
                     f"fc, P={p}, {slow:g} Mbit/s: poseidon/powersgd-4 {psgd:.2f}x (target >= "
                     f"1.0) -> {'met' if psgd >= 1.0 else 'MISSED'}"]  # fmt: skip
    if "transformer" in args.models and p > 1:
        ratio = min(cells[("transformer", r, "poseidon", p)] / cells[("transformer", r, "ddp", p)]
                    for r in args.rates_mbit)  # fmt: skip
        verdicts.append(f"transformer, P={p}, worst link: poseidon/ddp {ratio:.2f}x (target >= "
                        f"0.95) -> {'met' if ratio >= 0.95 else 'MISSED'}")  # fmt: skip
    if "fc" in args.models and p > 1:
        step = [cells[(m, r, "poseidon-step", p)] / cells[(m, r, "poseidon", p)]
                for m in args.models for r in args.rates_mbit]  # fmt: skip
        verdicts.append(f"wait='step' / wait='backward' at P={p}: {min(step):.2f}x .. "
                        f"{max(step):.2f}x over the models and links")  # fmt: skip
    if args.loss_steps:
        curves = loss_curves(args)
        report, exact = loss_report(curves)
        print(f"loss curves, fc on digits, P={p}: |loss - one process on the global batch| "
              f"(its loss: {curves['single'][0]:.3f} at step 1, {curves['single'][-1]:.4f} at "
              f"step {args.loss_steps})\n{report}")  # fmt: skip
        verdicts.append("poseidon follows one process within DDP's own float drift -> "
                        f"{'met' if exact else 'MISSED'}")  # fmt: skip
    print("\n".join(verdicts))
    print(f"{time.time() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
