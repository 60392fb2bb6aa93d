"""Iteration throughput vs number of workers: Caffe+PS (ps-nooverlap), Caffe+WFBP (wfbp)
and Poseidon (WFBP + HybComm) beside PyTorch DDP (gloo) training the same architecture,
once on unlimited loopback and once with every emulated host's link capped by tc in
its own network namespace (needs root and iproute2). One run, side by side.

    sudo .venv/bin/python bench/scaling.py [--workers 1,2,4] [--rate-mbit 100]
                                           [--batch 16] [--warmup 2] [--iters 5]
                                           [--compression auto:4,bf16]

P1 workers and P2 = P1 shards, one worker and one shard per emulated host (the paper's
colocated setting); synthetic data (DummyData); weak scaling (batch per worker fixed).
The bench checks itself: the three Poseidon modes compute the same weights (checksums
agree), and prints a table of images/s and a PNG plot (docs/scaling.png). --compression adds
Poseidon with each POSEIDON_COMPRESSION given (lossy: its weights differ, unchecked), told
the capped link's rate (POSEIDON_LINK_RATE) so that it plans by time.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scaling_net import SOLVER, prototxt  # noqa: E402

from poseidon.experiments.emulation import EmulatedHosts  # noqa: E402

MODES = ("ps-nooverlap", "wfbp", "poseidon")
RESULT = re.compile(r"RESULT rank=(\d+) iters_per_s=([0-9.]+)(?: checksum=(\S+))?")
TIMEOUT_S = 1800


def write_solver(directory: str, batch: int) -> str:
    net = os.path.join(directory, "net.prototxt")
    with open(net, "w") as f:
        f.write(prototxt(batch))
    solver = os.path.join(directory, "solver.prototxt")
    with open(solver, "w") as f:
        f.write(SOLVER.format(net=net))
    return solver


def results(output: str) -> list[tuple[int, float, float | None]]:
    found = [(int(r), float(v), float(c) if c else None) for r, v, c in RESULT.findall(output)]
    if not found:
        raise RuntimeError(f"no RESULT line in:\n{output[-4000:]}")
    return found


def run_poseidon(mode, workers, cluster, solver, args, extra_env=None) -> tuple[float, float]:
    command = [sys.executable, "-m", "poseidon.cli", "launch", "-n", str(workers),
               "-s", str(workers), "--sync", mode, "--timeout-ms", "600000"]  # fmt: skip
    if cluster is not None:
        command += ["--hostfile", cluster.hostfile(), "--ssh", cluster.ssh_wrapper(),
                    "--port", "29650"]  # fmt: skip
    command += ["--", sys.executable, os.path.join(HERE, "scaling_worker.py"), solver,
                str(args.warmup), str(args.iters)]  # fmt: skip
    env = {**os.environ, "GLOG_minloglevel": "1", "OMP_NUM_THREADS": "1", **(extra_env or {})}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} P={workers} failed:\n{done.stdout[-4000:]}")
    found = results(done.stdout)
    rate = min(v for _, v, _ in found)  # the job runs at its slowest worker's pace
    checksums = {c for _, _, c in found}
    if len(checksums) != 1:
        raise RuntimeError(f"{mode} P={workers}: workers disagree on weights: {checksums}")
    return rate, checksums.pop()


def run_ddp(workers, cluster, args) -> float:
    address = cluster.addresses[0] if cluster is not None else "127.0.0.1"
    processes = []
    for rank in range(workers):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(workers),
               "MASTER_ADDR": address, "MASTER_PORT": "29660", "OMP_NUM_THREADS": "1"}  # fmt: skip
        prefix = []
        if cluster is not None:
            prefix = cluster.exec_prefix(rank)
            env["GLOO_SOCKET_IFNAME"] = f"posv{rank}"
        else:
            env["GLOO_SOCKET_IFNAME"] = "lo"
        command = [*prefix, sys.executable, os.path.join(HERE, "scaling_ddp.py"),
                   str(args.batch), str(args.warmup), str(args.iters)]  # fmt: skip
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))  # fmt: skip
    outputs = [p.communicate(timeout=TIMEOUT_S)[0] for p in processes]
    if any(p.returncode for p in processes):
        raise RuntimeError("DDP failed:\n" + "\n".join(o[-2000:] for o in outputs))
    return min(v for o in outputs for _, v, _ in results(o))


def measure(network: str, args, solver: str) -> dict[tuple[str, int], float]:
    rates: dict[tuple[str, int], float] = {}
    for workers in args.workers:
        cluster = None
        if network == "capped":
            cluster = EmulatedHosts(workers, args.rate_mbit * 1e6).__enter__()
        try:
            sums = {}
            for mode in MODES:
                rates[(mode, workers)], sums[mode] = run_poseidon(mode, workers, cluster, solver,
                                                                  args)  # fmt: skip
                print(f"  {network:8} P={workers} {mode:13} {rates[(mode, workers)]:8.3f} it/s",
                      flush=True)  # fmt: skip
            spread = (max(sums.values()) - min(sums.values())) / max(sums.values())
            if spread > 1e-4:
                raise RuntimeError(f"modes disagree on the weights at P={workers}: {sums}")
            for compression in args.compression:
                env = {"POSEIDON_COMPRESSION": compression}
                if cluster is not None:
                    env["POSEIDON_LINK_RATE"] = f"{args.rate_mbit:g}mbit"
                system = lossy_system(compression)
                rates[(system, workers)], _ = run_poseidon("poseidon", workers, cluster, solver,
                                                           args, env)  # fmt: skip
                print(f"  {network:8} P={workers} {system:13} {rates[(system, workers)]:8.3f} "
                      "it/s", flush=True)  # fmt: skip
            rates[("ddp", workers)] = run_ddp(workers, cluster, args)
            print(f"  {network:8} P={workers} {'ddp (gloo)':13} {rates[('ddp', workers)]:8.3f}"
                  " it/s", flush=True)  # fmt: skip
        finally:
            if cluster is not None:
                cluster.__exit__(None, None, None)
    return rates


def lossy_system(compression: str) -> str:
    return f"poseidon {compression}"


def systems(args) -> list[str]:
    return [*MODES, *(lossy_system(c) for c in args.compression), "ddp"]


def table(network: str, rates, args) -> str:
    lines = [f"{network}: images/s (speed-up over the same system at P=1)",
             f"{'system':<20}" + "".join(f"{'P=' + str(p):>18}" for p in args.workers)]  # fmt: skip
    for mode in systems(args):
        cells = []
        for p in args.workers:
            images = rates[(mode, p)] * p * args.batch
            base = rates[(mode, args.workers[0])] * args.workers[0] * args.batch
            cells.append(f"{images:10.1f} ({images / base:4.2f}x)")
        lines.append(f"{mode:<20}" + "".join(f"{c:>18}" for c in cells))
    return "\n".join(lines)


def plot(all_rates, args, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(all_rates), figsize=(5 * len(all_rates), 4))
    axes = axes if len(all_rates) > 1 else [axes]
    for axis, (network, rates) in zip(axes, all_rates.items()):
        for mode in systems(args):
            images = [rates[(mode, p)] * p * args.batch for p in args.workers]
            label = "PyTorch DDP (gloo)" if mode == "ddp" else mode
            axis.plot(args.workers, images, marker="o", label=label)
        axis.set_title(network)
        axis.set_xlabel("workers (P1 = P2)")
        axis.set_ylabel("images / s")
        axis.set_xticks(args.workers)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rate-mbit", type=float, default=100.0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--networks", default="loopback,capped")
    parser.add_argument(
        "--compression", default="", help="POSEIDON_COMPRESSION values to add, e.g. auto:4,bf16"
    )
    parser.add_argument("--plot", default=os.path.join(HERE, "..", "docs", "scaling.png"))
    args = parser.parse_args(argv)
    args.workers = [int(p) for p in args.workers.split(",")]
    args.compression = [c for c in args.compression.split(",") if c]
    started = time.time()
    with tempfile.TemporaryDirectory() as directory:
        solver = write_solver(directory, args.batch)
        all_rates = {}
        for network in args.networks.split(","):
            label = network if network == "loopback" else f"capped {args.rate_mbit:g} Mbit/s"
            print(f"{label}:", flush=True)
            all_rates[label] = measure(network, args, solver)
    print()
    for network, rates in all_rates.items():
        print(table(network, rates, args))
        print()
    capped = [r for n, r in all_rates.items() if n.startswith("capped")]
    if capped and max(args.workers) > 1:
        rates, p = capped[0], max(args.workers)
        print(
            f"capped, P={p}: poseidon/wfbp {rates[('poseidon', p)] / rates[('wfbp', p)]:.2f}x "
            f"(target >= 1.5), wfbp/ps-nooverlap "
            f"{rates[('wfbp', p)] / rates[('ps-nooverlap', p)]:.2f}x (target >= 1.0), "
            f"poseidon/ddp {rates[('poseidon', p)] / rates[('ddp', p)]:.2f}x (target >= 1.3)"
        )
    plot(all_rates, args, args.plot)
    print(f"plot: {os.path.abspath(args.plot)}; {time.time() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
