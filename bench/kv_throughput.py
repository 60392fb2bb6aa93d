"""KV-store push-pull throughput on loopback, beside gloo allreduce and iperf3.

For P1 = P2 = P in {1, 2, 4} and tensors of 1, 4, 64 and 256 MB, in one run:
  - push-pull, two layouts of P workers, P server shards and the coordinator;
    each worker pushes a tensor filled with rank+1 and waits until it holds
    the sum; a round's time is its slowest worker's:
      "colocated": worker r's process also runs shard r and reaches it
        in-process (Config.local_server), the other shards over TCP — the
        paper's layout, whose cost is 2·S·(P1+P2−2)/P2 per node; shard r sums
        worker r's chunks in place (checked: every round of shard r);
      "tcp": every shard is its own process, all traffic over TCP;
  - torch.distributed all_reduce (gloo backend) of the same tensor, P processes;
  - iperf3 on 127.0.0.1: one TCP stream one way, and both ways at once
    (--bidir), the loopback TCP limit.
Every round is checked (every element equals P(P+1)/2). Prints a table of
median times and ratios. Never part of the test suite.

    .venv/bin/python bench/kv_throughput.py [--sizes-mb 1,4,64,256] [--ps 1,2,4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

TOKEN = "kv-bench"
MB = 1 << 20


def reps_for(size_mb: int) -> int:
    return 20 if size_mb <= 4 else (8 if size_mb <= 64 else 4)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_config(role: str, rank: int, p: int, coordinator: str):
    """Settings for one node; POSEIDON_* variables (chunk size, comm threads, socket
    buffers...) apply, so the benchmark can be rerun with other settings."""
    from poseidon.config import Config

    return Config.from_env(
        role=role,
        rank=rank,
        num_workers=p,
        num_servers=p,
        coordinator=coordinator,
        token=TOKEN,
        listen="127.0.0.1:0",
        timeout_ms=300_000,
    ).to_native()


# ---- push-pull ---------------------------------------------------------------------------------


def server_main(rank: int, p: int, coordinator: str) -> None:
    from poseidon import _C

    _C.KVServer(node_config("server", rank, p, coordinator)).run()


def worker_main(
    rank: int, p: int, coordinator: str, sizes_mb: list[int], colocated: bool, out: mp.Queue
) -> None:
    from poseidon import _C

    cfg = node_config("worker", rank, p, coordinator)
    shard = None
    if colocated:
        # Shard `rank` lives in this process; run() releases the GIL.
        shard = _C.KVServer(node_config("server", rank, p, coordinator))
        shard_thread = threading.Thread(target=shard.run, daemon=True)
        shard_thread.start()
        cfg.local_server = shard.local_address
    w = _C.Worker(cfg)
    w.connect()
    specs = [
        _C.LayerSpec(
            i, f"t{mb}MB", _C.LayerKind.OTHER, mb * MB // 4, 1, 1, mb * MB // 4, _C.SchemeChoice.PS
        )
        for i, mb in enumerate(sizes_mb)
    ]
    w.plan(specs)
    tensors = [np.empty(mb * MB // 4, dtype=np.float32) for mb in sizes_mb]
    for i, t in enumerate(tensors):
        w.register_layer(i, t)
    want = p * (p + 1) / 2
    times: dict[int, list[float]] = {}
    for i, mb in enumerate(sizes_mb):
        t = tensors[i]
        samples = []
        for it in range(reps_for(mb) + 1):  # the first round warms up
            t.fill(rank + 1)
            w.barrier(f"{mb}-{it}")
            t0 = time.perf_counter()
            w.push_pull(i, it).wait()
            samples.append(time.perf_counter() - t0)
            w.barrier(f"{mb}-{it}-done")  # check only once every worker has stopped the clock
            if not t.min() == want == t.max():  # no temporary the size of t
                raise AssertionError(f"push-pull {mb} MB P={p}: wrong sum on worker {rank}")
        times[mb] = samples[1:]
    w.shutdown()
    if shard is not None:
        shard_thread.join(60)
        stats = shard.stats()
        if stats.rounds_in_place != stats.rounds_completed:  # every round beside its worker
            raise AssertionError(
                f"shard {rank}: {stats.rounds_in_place} of {stats.rounds_completed} rounds in place"
            )
    out.put((rank, times))


def run_push_pull(p: int, sizes_mb: list[int], colocated: bool) -> dict[int, float]:
    from poseidon import _C

    ctx = mp.get_context("spawn")
    coordinator = _C.Coordinator(node_config("coordinator", 0, p, "127.0.0.1:0"))
    failure: list[BaseException] = []

    def run_coordinator() -> None:
        try:
            coordinator.run()
        except BaseException as e:
            failure.append(e)

    ct = threading.Thread(target=run_coordinator, daemon=True)
    ct.start()
    out: mp.Queue = ctx.Queue()
    procs = []
    if not colocated:
        procs += [
            ctx.Process(target=server_main, args=(s, p, coordinator.address)) for s in range(p)
        ]
    procs += [
        ctx.Process(target=worker_main, args=(r, p, coordinator.address, sizes_mb, colocated, out))
        for r in range(p)
    ]
    medians = run_and_collect(procs, out, p, sizes_mb, f"push-pull P={p}")
    ct.join(60)
    if failure:
        raise RuntimeError(f"push-pull P={p}: coordinator failed: {failure[0]}")
    return medians


def run_and_collect(procs: list, out: mp.Queue, p: int, sizes_mb: list[int], what: str):
    """Start `procs`, take the P ranks' round times from `out`, and return per size the
    median over rounds of the slowest rank's time (a round ends when its last rank is done)."""
    for pr in procs:
        pr.start()
    results = [out.get(timeout=900) for _ in range(p)]
    for pr in procs:
        pr.join(60)
        if pr.exitcode != 0:
            raise RuntimeError(f"{what}: a process exited with {pr.exitcode}")
    return {
        mb: statistics.median(max(r[1][mb][k] for r in results) for k in range(reps_for(mb)))
        for mb in sizes_mb
    }


# ---- gloo allreduce ------------------------------------------------------------------------------


def gloo_main(rank: int, p: int, port: int, sizes_mb: list[int], out: mp.Queue) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=p)
    want = p * (p + 1) / 2
    times = {}
    for mb in sizes_mb:
        t = torch.empty(mb * MB // 4, dtype=torch.float32)
        samples = []
        for _ in range(reps_for(mb) + 1):
            t.fill_(rank + 1)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            samples.append(time.perf_counter() - t0)
            dist.barrier()  # check only once every rank has stopped the clock
            if not (t.min().item() == want == t.max().item()):
                raise AssertionError(f"gloo {mb} MB P={p}: wrong sum on rank {rank}")
        times[mb] = samples[1:]
    dist.destroy_process_group()
    out.put((rank, times))


def run_gloo(p: int, sizes_mb: list[int]) -> dict[int, float]:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=gloo_main, args=(r, p, port, sizes_mb, out)) for r in range(p)]
    return run_and_collect(procs, out, p, sizes_mb, f"gloo P={p}")


# ---- iperf3 --------------------------------------------------------------------------------------


def iperf3(bidir: bool, seconds: int = 4) -> float:
    """Loopback TCP rate in bytes/s (both directions summed with --bidir)."""
    if shutil.which("iperf3") is None:
        raise RuntimeError("iperf3 not found (apt-get install -y iperf3)")
    port = free_port()
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        time.sleep(0.3)
        cmd = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"]
        if bidir:
            cmd.append("--bidir")
        report = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    finally:
        server.wait(30)
    end = report["end"]
    rate = end["sum_received"]["bits_per_second"]
    if bidir:
        rate += end["sum_received_bidir_reverse"]["bits_per_second"]
    return rate / 8


# ---- main ----------------------------------------------------------------------------------------


def main() -> int:
    # One compute thread per process everywhere (numpy's OpenBLAS pool and torch's
    # OpenMP pool otherwise spin on the 2 cores the transfers need).
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-mb", default="1,4,64,256")
    ap.add_argument("--ps", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=3, help="turns each contender takes")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes_mb.split(",")]
    ps = [int(x) for x in args.ps.split(",")]

    one_way = statistics.median(iperf3(bidir=False) for _ in range(args.rounds))
    both_ways = statistics.median(iperf3(bidir=True) for _ in range(args.rounds))
    print(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start;"
        f" iperf3 127.0.0.1: one stream {one_way / 1e9:.2f} GB/s one way,"
        f" {both_ways / 1e9:.2f} GB/s both ways at once (--bidir, summed)"
    )
    print("push-pull moves S up and S down per worker. 'wire' = 2·S / time with every byte on")
    print("TCP (layout 'tcp', P = 1): bytes crossing loopback per second, to compare with")
    print("iperf3 --bidir. 'colocated': each worker runs its shard in-process (paper layout).")
    print()
    header = (
        f"{'P':>2} {'MB':>5} {'colocated ms':>13} {'tcp ms':>9} {'gloo ms':>9} "
        f"{'gloo/colocated':>15} {'gloo/tcp':>9} {'tcp wire GB/s':>14} {'wire/iperf3 bidir':>18}"
    )
    print(header)
    print("-" * len(header))
    misses = []
    checked = set()  # which targets had a cell measured
    for p in ps:
        # The three contenders take turns, `rounds` times, so that a change of
        # load on the (shared, noisy) machine hits all three alike; each cell
        # is the median of its rounds.
        runs: dict[str, list[dict[int, float]]] = {"col": [], "tcp": [], "gloo": []}
        for r in range(args.rounds):
            order = ["col", "tcp", "gloo"][r % 3 :] + ["col", "tcp", "gloo"][: r % 3]
            for name in order:
                if name == "gloo":
                    runs[name].append(run_gloo(p, sizes))
                else:
                    runs[name].append(run_push_pull(p, sizes, colocated=name == "col"))
        col, tcp, gl = (
            {mb: statistics.median(x[mb] for x in runs[name]) for mb in sizes}
            for name in ("col", "tcp", "gloo")
        )
        for mb in sizes:
            s = mb * MB
            wire = 2 * s / tcp[mb]
            print(
                f"{p:>2} {mb:>5} {col[mb] * 1e3:>13.2f} {tcp[mb] * 1e3:>9.2f} {gl[mb] * 1e3:>9.2f} "
                f"{gl[mb] / col[mb]:>15.2f} {gl[mb] / tcp[mb]:>9.2f} "
                + (
                    f"{wire / 1e9:>14.2f} {wire / both_ways:>18.0%}"
                    if p == 1
                    else f"{'-':>14} {'-':>18}"
                ),
                flush=True,
            )
            if p > 1:
                checked.add("colocated push-pull no slower than gloo for P >= 2")
            if p == 1 and mb >= 64:
                checked.add("tcp push-pull >= 70% of iperf3 --bidir at P = 1 (64 MB and up)")
            if p > 1 and gl[mb] < col[mb]:
                misses.append(
                    f"P={p} {mb} MB: colocated push-pull {col[mb] / gl[mb]:.2f}x gloo's time"
                )
            if p == 1 and mb >= 64 and wire < 0.7 * both_ways:
                misses.append(
                    f"P=1 {mb} MB: tcp push-pull at {wire / both_ways:.0%} of iperf3 --bidir"
                )
    print()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print("all sums checked: every element of every round equals P(P+1)/2")
    print("at P = 1 gloo's all_reduce moves no byte; push-pull there is measured against iperf3")
    if misses:
        print("targets missed:\n  " + "\n  ".join(misses))
    elif not checked:
        print("no target cell measured (they are P >= 2, and P = 1 at 64 MB and up)")
    else:
        print("targets met:\n  " + "\n  ".join(sorted(checked)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
