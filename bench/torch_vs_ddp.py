"""Poseidon's DistributedDataParallel (exact, and with its lossy schemes allowed) beside
PyTorch's (gloo), plain, with the bf16 compression hook and with the PowerSGD hook (rank 1
and 4), training the same models on the same batches, with every emulated host's link
capped by tc in its own network namespace (needs root and iproute2). One run, side by side.

    sudo .venv/bin/python bench/torch_vs_ddp.py [--models fc,transformer,vgg]
        [--workers 1,2,4] [--rates-mbit 100,1000] [--warmup 3] [--iters 6] [--rounds 2]
        [--loss-steps 100] [--batch fc=32,transformer=8,vgg=16] [--systems a,b,...]
        [--accuracy 0.97 [--accuracy-steps 1500]]

Models (bench/torch_vs_ddp_worker.py): fc, the FC-heavy digits classifier of
examples/pytorch/mlp_digits.py (32 images per worker); transformer, the language model of
examples/pytorch/transformer_lm.py (8 sequences of 64 tokens per worker); vgg, a VGG-style
net for 32×32 images (16 per worker). Throughput is samples (images, or tokens) per second
of the whole job, at its slowest worker's pace; each cell is the median of --rounds runs,
the systems taking turns within a round. Then the loss curves: --loss-steps steps of the fc
model on real digits at P = max(--workers) on loopback, each system beside one process on
the global batch. With --accuracy, time to accuracy: the fc model on the digits at P =
max(--workers) over the slowest link, each system trained (same seeds, batches and learning
rate) until its held-out accuracy reaches the target; training seconds and steps. The bench
checks the targets of issue 12 and prints them.

Systems: poseidon (exact: PS and SFB per layer), poseidon-step (the same, wait="step"),
poseidon-bf16 / poseidon-powersgd-R / poseidon-auto (compression="bf16", "powersgd:R",
"auto:4": the cost model may pick those per layer, ranking by bytes), poseidon-auto-timed
(the same, ranking by the simulated iteration: the emulated link's rate as
POSEIDON_LINK_RATE, and each worker's own timings of the schemes' compute), ddp, ddp-fp16 (DDP's
fp16_compress_hook; its bf16 one needs NCCL), powersgd-1, powersgd-4 (DDP's PowerSGD hook).
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
SYSTEMS = (
    "poseidon",
    "poseidon-step",
    "poseidon-bf16",
    "poseidon-auto",
    "ddp",
    "ddp-fp16",
    "powersgd-1",
    "powersgd-4",
)
KNOWN_SYSTEMS = (*SYSTEMS, "poseidon-powersgd-1", "poseidon-powersgd-4", "poseidon-auto-timed")
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
        where = {"MASTER_ADDR": cluster.addresses[0], "GLOO_SOCKET_IFNAME": cluster.inner(rank),
                 "BENCH_LINK_BPS": f"{cluster.rate_bps:g}"}  # fmt: skip
    return clean_env(RANK=str(rank), WORLD_SIZE=str(workers), MASTER_PORT=str(port), **where)


def run(system: str, model: str, workers: int, cluster: EmulatedHosts | None,
        args: argparse.Namespace) -> list[str]:  # fmt: skip
    """The job's ranks, each in its emulated host's namespace; their outputs."""
    port = 29700 + (os.getpid() % 100) * 10
    commands, envs = [], []
    for rank in range(workers):
        prefix = cluster.exec_prefix(rank) if cluster is not None else []
        commands.append([*prefix, sys.executable, WORKER, system, model, str(args.batch[model]),
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
    samples: dict[str, list[float]] = {s: [] for s in args.systems}
    for round_ in range(args.rounds):
        order = args.systems if round_ % 2 == 0 else tuple(reversed(args.systems))
        for system in order:
            try:
                samples[system].append(throughput(system, model, workers, cluster, args))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"    {system} {model} P={workers} {rate:g} Mbit/s: {e}"[:3000], flush=True)
    for system in args.systems:
        got = samples[system]
        cells[(model, rate, system, workers)] = statistics.median(got) if got else math.nan
    row = "  ".join(f"{s} {cells[(model, rate, s, workers)]:9.1f}" for s in args.systems)
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
            lines.append(f"{'system':<20}" + "".join(f"{'P=' + str(p):>20}" for p in args.workers))
            for system in args.systems:
                row = []
                for p in args.workers:
                    value = cells[(model, rate, system, p)]
                    ours = cells[(model, rate, "poseidon", p)]
                    row.append(f"{value:10.1f} ({ours / value:4.2f}x)")
                lines.append(f"{system:<20}" + "".join(f"{c:>20}" for c in row))
            lines.append("")
    return "\n".join(lines)


def loss_curves(args: argparse.Namespace) -> dict[str, np.ndarray]:
    """Each system's loss per step (the mean of the ranks' losses on their rows, which is the
    global batch's loss) and one process's on the global batch ("single"), on loopback."""
    workers = max(args.workers)
    port = 29800 + (os.getpid() % 100) * 10
    curves = {}
    with tempfile.TemporaryDirectory() as directory:
        for system in ("single", *args.systems):
            count = 1 if system == "single" else workers
            batch = args.batch["fc"] * (workers if system == "single" else 1)
            files = [os.path.join(directory, f"{system}.{r}.npy") for r in range(count)]
            commands = [[sys.executable, WORKER, system, "fc", str(batch), "0",
                         str(args.loss_steps), f] for f in files]  # fmt: skip
            envs = [rank_env(r, count, port, None) for r in range(count)]
            if system == "single":
                envs[0].pop("WORLD_SIZE")
            start(commands, envs, f"the loss curve of {system}")
            curves[system] = np.mean([np.load(f) for f in files], axis=0)
    return curves


def loss_report(curves: dict[str, np.ndarray], systems: list[str]) -> tuple[str, bool]:
    """Each system's |loss − one process's| at a few steps and at worst; and whether Poseidon
    stays within the drift of DDP's exact all-reduce (float32 sums in another order, grown by
    training: the noise floor of any exact method)."""
    steps = len(curves["single"])
    marks = [s for s in (1, 10, 50, 100, 200) if s <= steps]
    lines = [
        f"{'system':<20}" + "".join(f"{'step ' + str(m):>11}" for m in marks) + f"{'worst':>11}"
    ]
    worst = {}
    for system in systems:
        gap = np.abs(curves[system] - curves["single"])
        worst[system] = float(gap.max())
        lines.append(f"{system:<20}" + "".join(f"{gap[m - 1]:11.1e}" for m in marks)
                     + f"{worst[system]:11.1e}")  # fmt: skip
    exact = worst.get("poseidon", 0.0) <= max(2 * worst.get("ddp", 0.0), 1e-4)
    return "\n".join(lines), exact


def time_to_accuracy(args: argparse.Namespace) -> dict[str, dict]:
    """Each system's training seconds and steps until the fc model's held-out accuracy on
    the digits reaches --accuracy, at P = max(--workers) over the slowest emulated link."""
    workers, rate = max(args.workers), min(args.rates_mbit)
    port = 29900 + (os.getpid() % 100) * 10
    results = {}
    with tempfile.TemporaryDirectory() as directory, EmulatedHosts(workers, rate * 1e6) as cluster:
        for system in args.systems:
            files = [os.path.join(directory, f"{system}.{r}.json") for r in range(workers)]
            commands = [[*cluster.exec_prefix(r), sys.executable, WORKER, system, "fc",
                         str(args.batch["fc"]), "0", str(args.accuracy_steps), f,
                         str(args.accuracy)] for r, f in enumerate(files)]  # fmt: skip
            envs = [rank_env(r, workers, port, cluster) for r in range(workers)]
            try:
                start(commands, envs, f"time to accuracy of {system}")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"    time to accuracy, {system}: {e}"[:3000], flush=True)
                continue
            with open(files[0]) as f:
                results[system] = json.load(f)
            got = results[system]
            print(f"  {system:<20} {got['steps']:5d} steps {got['seconds']:8.2f} s  accuracy "
                  f"{got['accuracy']:.4f}{'' if got['reached'] else ' (not reached)'}",
                  flush=True)  # fmt: skip
    return results


def parse_batches(parser: argparse.ArgumentParser, text: str) -> dict[str, int]:
    """--batch fc=8,vgg=4 -> {"fc": 8, "vgg": 4}; a bad item is a usage error naming it."""
    batches = {}
    for item in filter(None, text.split(",")):
        model, _, count = item.partition("=")
        if model not in BATCH or not count.isdigit() or int(count) < 1:
            parser.error(f"--batch: {item!r} is not MODEL=N with MODEL one of {sorted(BATCH)}"
                         " and N >= 1")  # fmt: skip
        batches[model] = int(count)
    return batches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="fc,transformer,vgg")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rates-mbit", default="100,1000")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loss-steps", type=int, default=100)
    parser.add_argument("--batch", default="", metavar="MODEL=N[,MODEL=N]",
                        help="per-worker batch (default: " +
                        ",".join(f"{m}={n}" for m, n in BATCH.items()) + ")")  # fmt: skip
    parser.add_argument("--out", help="write every cell to this JSON file as it is measured")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"which systems (of {', '.join(KNOWN_SYSTEMS)})")  # fmt: skip
    parser.add_argument(
        "--accuracy",
        type=float,
        help="also time each system to this held-out accuracy (fc, digits)",
    )
    parser.add_argument(
        "--accuracy-steps",
        type=int,
        default=1500,
        help="give up on the accuracy after this many steps",
    )
    args = parser.parse_args(argv)
    args.models = args.models.split(",")
    args.workers = [int(p) for p in args.workers.split(",")]
    args.rates_mbit = [float(r) for r in args.rates_mbit.split(",")]
    args.batch = {**BATCH, **parse_batches(parser, args.batch)}
    args.systems = args.systems.split(",")
    unknown = [s for s in args.systems if s not in KNOWN_SYSTEMS]
    if unknown:
        parser.error(f"--systems: {', '.join(unknown)}: want some of {', '.join(KNOWN_SYSTEMS)}")
    started = time.time()
    cells = measure(args)
    print()
    print(table(cells, args))
    p, slow = max(args.workers), min(args.rates_mbit)
    verdicts = []
    have = set(args.systems)
    if "fc" in args.models and p > 1 and {"poseidon", "ddp", "powersgd-4"} <= have:
        ddp = cells[("fc", slow, "poseidon", p)] / cells[("fc", slow, "ddp", p)]
        psgd = cells[("fc", slow, "poseidon", p)] / cells[("fc", slow, "powersgd-4", p)]
        verdicts += [f"fc, P={p}, {slow:g} Mbit/s: poseidon/ddp {ddp:.3f}x (target >= 1.3) -> "
                     f"{'met' if ddp >= 1.3 else 'MISSED'}",
                     f"fc, P={p}, {slow:g} Mbit/s: poseidon/powersgd-4 {psgd:.3f}x (target >= "
                     f"1.0) -> {'met' if psgd >= 1.0 else 'MISSED'}"]  # fmt: skip
    if "transformer" in args.models and p > 1 and {"poseidon", "ddp"} <= have:
        ratio = min(cells[("transformer", r, "poseidon", p)] / cells[("transformer", r, "ddp", p)]
                    for r in args.rates_mbit)  # fmt: skip
        verdicts.append(f"transformer, P={p}, worst link: poseidon/ddp {ratio:.3f}x (target >= "
                        f"0.95) -> {'met' if ratio >= 0.95 else 'MISSED'}")  # fmt: skip
    if "fc" in args.models and p > 1 and {"poseidon", "poseidon-step"} <= have:
        step = [cells[(m, r, "poseidon-step", p)] / cells[(m, r, "poseidon", p)]
                for m in args.models for r in args.rates_mbit]  # fmt: skip
        verdicts.append(f"wait='step' / wait='backward' at P={p}: {min(step):.2f}x .. "
                        f"{max(step):.2f}x over the models and links")  # fmt: skip
    if args.loss_steps:
        curves = loss_curves(args)
        report, exact = loss_report(curves, args.systems)
        print(f"loss curves, fc on digits, P={p}: |loss - one process on the global batch| "
              f"(its loss: {curves['single'][0]:.3f} at step 1, {curves['single'][-1]:.4f} at "
              f"step {args.loss_steps})\n{report}")  # fmt: skip
        verdicts.append("poseidon follows one process within DDP's own float drift -> "
                        f"{'met' if exact else 'MISSED'}")  # fmt: skip
    if args.accuracy:
        print(f"time to {args.accuracy:.0%} held-out accuracy, fc on digits, P={p}, "
              f"{slow:g} Mbit/s:")  # fmt: skip
        reached = time_to_accuracy(args)
        base = reached.get("ddp")
        for system, got in reached.items():
            ratio = (f"{base['seconds'] / got['seconds']:.2f}x ddp's speed" if base and
                     got["reached"] and base["reached"] else "")  # fmt: skip
            print(f"  {system:<20} {got['steps']:5d} steps {got['seconds']:8.2f} s "
                  f"{got['accuracy']:.4f} {ratio}")  # fmt: skip
    print("\n".join(verdicts))
    print(f"{time.time() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
