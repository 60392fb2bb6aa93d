"""How many of each emulated host's TCP connections have bytes to send, while a command runs.

Runs COMMAND (typically `poseidon experiment ... --emulate`) and, every `--interval` seconds
of wall time, reads each emulated host's TCP table (/proc/PID/net/tcp of a process in the
host's namespace: the namespace's sockets, whoever owns them). A connection's `tx_queue` there
is what its sender wrote and its receiver has not acknowledged: bytes not yet sent, waiting
in the host's queue, or on the wire. Prints, per host, over the samples in which the host had
anything to send, the share of them with 1, 2, 3, ... connections sending, and with 0, 1, 2,
... connections holding more than `--lowat` (the comm core's TCP_NOTSENT_LOWAT: a sender thread
may still be writing its frame into such a socket; as `tx_queue` counts bytes in flight too,
this is an upper bound on the sockets being written). With `-o` it keeps the samples (JSON).
Needs root (it reads other namespaces' processes).

    .venv/bin/python bench/socket_queues.py [--prefix pos] [-o samples.json] -- \\
        .venv/bin/poseidon experiment --model bench/nets/unseen_a.prototxt \\
        --profile bench/nets/unseen_a.cpu.json --emulate --gso off --byte-scale 1 \\
        --bandwidth 200mbit --nodes 4 --modes wfbp --iterations 20 --warmup 3 -o /tmp/cell.json

With `--simulate RESULTS --mode M --nodes P` it prints the same shares for that emulated
cell as the every-node simulation runs it (python/poseidon/experiments/every_node.py,
`--threads` sender threads per queue), weighted by time, its sockets' unsent bytes standing
for `tx_queue` (the simulation has no bytes in flight). Compare the connections sending:
"above the low-water mark" differs in kind between the two, a simulated socket counting the
whole rest of the frame its thread still writes, a real one holding at most about the mark
unsent (the thread waits outside it). No root needed:

    .venv/bin/python bench/socket_queues.py --simulate \\
        docs/results/packets/unseen_a.200mbit.s1.emulated.json --mode wfbp --nodes 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter

from poseidon.config import Config
from poseidon.experiments.emulation import TCP_GOODPUT_TBF, EmulationError, check_can_emulate
from poseidon.experiments.every_node import EveryNode, Stream, simulate_iteration
from poseidon.experiments.predict import Link
from poseidon.experiments.profile import load_profile
from poseidon.experiments.resolve import resolve_profile

ESTABLISHED = "01"


def namespace_pids(prefix: str) -> dict[int, list[int]]:
    """The processes in each emulated host's namespace (`<prefix>h<i>`), by host."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found = {}
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        number = name[len(prefix) + 1 :]
        if not name.startswith(f"{prefix}h") or not number.isdigit():
            continue
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
        found[int(number)] = [int(p) for p in pids.stdout.split() if p.isdigit()]
    return found


def parse_tcp_table(text: str) -> list[tuple[str, str, int, int]]:
    """(local address, remote address, tx_queue, rx_queue) of every established connection
    to another host in a /proc/net/tcp table (addresses as the kernel prints them,
    hexadecimal; connections within the host cross no link and are left out)."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 5 or fields[3] != ESTABLISHED:
            continue
        if fields[1].partition(":")[0] == fields[2].partition(":")[0]:
            continue
        tx, _, rx = fields[4].partition(":")
        rows.append((fields[1], fields[2], int(tx, 16), int(rx, 16)))
    return rows


def read_table(pids: list[int]) -> list[tuple[str, str, int, int]] | None:
    """The TCP table of the namespace the processes are in, None if none of them is left."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/net/tcp", encoding="ascii") as table:
                return parse_tcp_table(table.read())
        except OSError:
            continue
    return None


def summarize(samples: list[tuple[float, int, list]], lowat: int) -> dict[int, dict]:
    """Per host: over the samples in which it had bytes to send, the share with n
    connections sending and with n holding more than `lowat`."""
    sending: dict[int, Counter] = {}
    writing: dict[int, Counter] = {}
    for _, host, rows in samples:
        busy = [row for row in rows if row[2] > 0]
        if not busy:
            continue
        sending.setdefault(host, Counter())[len(busy)] += 1
        writing.setdefault(host, Counter())[sum(1 for row in busy if row[2] > lowat)] += 1
    above = shares(writing)
    return {host: {"samples": sum(sending[host].values()), "sending": share,
                   "above_lowat": above[host]}
            for host, share in shares(sending).items()}  # fmt: skip


def report(summary: dict[int, dict]) -> None:
    for host, stats in summary.items():
        sending = ", ".join(f"{n}: {share:.0%}" for n, share in stats["sending"].items())
        above = ", ".join(f"{n}: {share:.0%}" for n, share in stats["above_lowat"].items())
        mean = sum(n * share for n, share in stats["sending"].items())
        print(f"host {host}, while it has bytes to send: connections sending {sending} "
              f"(mean {mean:.2f}); above the low-water mark {above}")  # fmt: skip


def shares(counts: dict[int, Counter]) -> dict[int, dict[int, float]]:
    return {host: {n: c / sum(counter.values()) for n, c in sorted(counter.items())}
            for host, counter in sorted(counts.items())}  # fmt: skip


def simulate(path: str, mode: str, nodes: int, threads: int, lowat: int,
             profile_dirs: list[str]) -> dict[int, dict]:  # fmt: skip
    """summarize()'s shares for an emulated cell as the every-node simulation runs it, each
    stretch of simulated time weighted by its length."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    candidates = [os.path.join(d, data["profile"]) for d in profile_dirs]
    found = [c for c in candidates if os.path.exists(c)]
    profile = load_profile(found[0] if found else resolve_profile(data["profile"], data["model"]))
    link = Link(data["bandwidth_bps"], TCP_GOODPUT_TBF)
    sending: dict[int, Counter] = {}
    writing: dict[int, Counter] = {}

    def observe(start: float, end: float, streams: list[Stream]) -> None:
        by_host: dict[int, list[Stream]] = {}
        for stream in streams:
            by_host.setdefault(stream.up, []).append(stream)
        for host, busy in by_host.items():
            sending.setdefault(host, Counter())[len(busy)] += end - start
            above = sum(1 for stream in busy if stream.backlog > lowat)
            writing.setdefault(host, Counter())[above] += end - start

    every = EveryNode(lowat_bytes=lowat, depth_bytes=0.0, seeds=1)
    iteration = simulate_iteration(profile, mode, nodes, link, every, threads=threads,
                                   observe=observe)  # fmt: skip
    print(f"simulated iteration {iteration:.4f} s")
    above = shares(writing)
    return {host: {"sending": share, "above_lowat": above[host]}
            for host, share in shares(sending).items()}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="pos", help="the emulation's namespace prefix")
    parser.add_argument("--interval", type=float, default=0.005, help="seconds between samples")
    parser.add_argument("--lowat", type=int, default=Config.notsent_lowat_bytes,
                        help="the sockets' TCP_NOTSENT_LOWAT in the emulation's bytes "
                        "(default: the comm core's; run.py divides it by the byte "
                        "scale)")  # fmt: skip
    parser.add_argument("-o", "--output", help="write the samples here (JSON)")
    parser.add_argument("--simulate", metavar="RESULTS", help="an emulated cell's results "
                        "file: simulate the cell instead of running a command")  # fmt: skip
    parser.add_argument("--mode", help="with --simulate: the cell's mode")
    parser.add_argument("--nodes", type=int, help="with --simulate: the cell's node count")
    parser.add_argument("--threads", type=int, default=Config.comm_threads,
                        help="with --simulate: sender threads per send queue")  # fmt: skip
    parser.add_argument("--profile-dir", action="append", default=["bench/nets"],
                        help="with --simulate: where to look for the file's profile")  # fmt: skip
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND to run")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.simulate:
        if not args.mode or not args.nodes:
            parser.error("--simulate needs --mode and --nodes")
        simulated = simulate(args.simulate, args.mode, args.nodes, args.threads, args.lowat,
                             args.profile_dir)  # fmt: skip
        report(simulated)
        return 0
    if not command:
        parser.error("give the command to run after --")
    try:
        check_can_emulate()
    except EmulationError as e:
        sys.exit(f"socket_queues: {e}")
    job = subprocess.Popen(command)
    samples: list[tuple[float, int, list]] = []
    pids: dict[int, list[int]] = {}
    looked = 0.0
    start = time.monotonic()
    try:
        while job.poll() is None:
            now = time.monotonic()
            if now - looked > 0.5:  # hosts come and go with the cells
                pids, looked = namespace_pids(args.prefix), now
            for host, in_host in pids.items():
                rows = read_table(in_host)
                if rows:
                    samples.append((round(now - start, 4), host, rows))
            time.sleep(max(0.0, args.interval - (time.monotonic() - now)))
    finally:
        if job.poll() is None:
            job.kill()
        job.wait()
    summary = summarize(samples, args.lowat)
    report(summary)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            json.dump({"command": command, "interval_s": args.interval, "lowat": args.lowat,
                       "samples": samples, "summary": summary}, out)  # fmt: skip
    return job.returncode


if __name__ == "__main__":
    sys.exit(main())
