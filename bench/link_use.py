"""How busy the emulated links were while a command ran: tc's byte and drop counters, sampled.

Runs COMMAND (typically `poseidon experiment ... --emulate`) and, while it runs, reads every
emulated host's two token buckets (poseidon/experiments/emulation.py: the host's uplink inside
its namespace, and the bridge port's egress towards it, its downlink) every `--interval`
seconds. Prints, per host and direction, the link's use — bytes tc counted (headers included)
over what its rate could carry — as the mean, median and quartiles of `--window`-second
windows from the first to the last in which the link was more than a quarter used (the job's
set-up and teardown left out), the packets tc dropped because its queue was full, and what
its queue held (tc's backlog, 90th percentile and most of the samples, in KB and in ms at
the link's wall-clock rate: how long a packet that joins it waits). The
predictor's "link busy" is the same thing counted in TCP payload (bytes over goodput), so a
cell the predictor calls 90% busy should read about 90% here if the link is used as it
models it. Needs root (it reads other namespaces' qdiscs).

    sudo .venv/bin/python bench/link_use.py [--prefix pos] -- \\
        .venv/bin/poseidon experiment --model bench/nets/unseen_a.prototxt \\
        --profile bench/nets/unseen_a.cpu.json --emulate --bandwidth 200mbit --nodes 4 \\
        --modes wfbp --iterations 20 --warmup 3 -o /tmp/cell.json
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict

from poseidon.experiments.emulation import EmulationError, check_can_emulate

SENT = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+)")
BACKLOG = re.compile(r"\bbacklog (\d+)([KM]?)b\b")
RATE = re.compile(r"\brate (\d+(?:\.\d+)?)([KMG]?)bit\b")
UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9}
SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20}  # tc's sizes count in 1024s


def parse_qdisc(text: str) -> tuple[float, int, int, int] | None:
    """(rate in bits/s, bytes sent, packets dropped, bytes queued) of a tbf in `tc -s qdisc
    show` output, None if there is none."""
    rate, sent, backlog = RATE.search(text), SENT.search(text), BACKLOG.search(text)
    if rate is None or sent is None:
        return None
    queued = int(backlog.group(1)) * SIZE_UNITS[backlog.group(2)] if backlog else 0
    return (float(rate.group(1)) * UNITS[rate.group(2)], int(sent.group(1)), int(sent.group(3)),
            queued)  # fmt: skip


def read_qdisc(command: list[str]) -> tuple[float, int, int, int] | None:
    """parse_qdisc of the device's qdiscs now, None if the command fails or finds no tbf."""
    done = subprocess.run(command, capture_output=True, text=True)
    return parse_qdisc(done.stdout) if done.returncode == 0 else None


def sample(prefix: str) -> dict[tuple[int, str], tuple[float, int, int, int]]:
    """Every emulated host's (rate, bytes, drops, backlog) per direction, now."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in listing.splitlines() if line.split()]
    numbers = [name[len(prefix) + 1 :] for name in names if name.startswith(f"{prefix}h")]
    hosts = sorted(int(number) for number in numbers if number.isdigit())
    out = {}
    for host in hosts:
        up = read_qdisc(["ip", "netns", "exec", f"{prefix}h{host}", "tc", "-s", "qdisc", "show",
                         "dev", f"{prefix}v{host}"])  # fmt: skip
        down = read_qdisc(["tc", "-s", "qdisc", "show", "dev", f"{prefix}b{host}"])
        for direction, counters in (("up", up), ("down", down)):
            if counters is not None:
                out[(host, direction)] = counters
    return out


def queue_held(samples: list[tuple[float, tuple[float, int, int, int]]]) -> tuple[float, float]:
    """The 90th percentile and the most of the backlog over the samples, in bytes."""
    held = sorted(counters[3] for _, counters in samples)
    if not held:
        return 0.0, 0.0
    return float(held[min(len(held) - 1, int(0.9 * len(held)))]), float(held[-1])


def use_per_window(
    samples: list[tuple[float, tuple[float, int, int, int]]], window: float, floor: float = 0.25
) -> tuple[list[float], int]:
    """The link's use in each window of `window` seconds while the job ran on it (from the
    first window above `floor` to the last: setup and teardown left out, the quiet moments
    of the job kept), and the packets dropped. A counter that went back (the emulation set
    its hosts up again) starts a new run."""
    uses, drops = [], 0
    start = 0
    for i in range(1, len(samples) + 1):
        if i < len(samples) and samples[i][1][1] >= samples[i - 1][1][1]:
            continue
        run = samples[start:i]
        drops += run[-1][1][2] - run[0][1][2]
        t0, first = run[0]
        windows = []
        for t, counters in run[1:]:
            if t - t0 >= window:
                windows.append((counters[1] - first[1]) * 8 / (counters[0] * (t - t0)))
                t0, first = t, counters
        busy = [k for k, use in enumerate(windows) if use >= floor]
        if busy:
            uses += windows[busy[0] : busy[-1] + 1]
        start = i
    return uses, drops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="pos", help="the emulation's namespace prefix")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    parser.add_argument("--window", type=float, default=1.0, help="seconds per use window")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND to run")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    try:
        check_can_emulate()  # other namespaces' qdiscs: root and iproute2, as the emulation
    except EmulationError as e:
        parser.error(str(e))
    series: dict[tuple[int, str], list] = defaultdict(list)
    child = subprocess.Popen(command)
    while child.poll() is None:
        now = time.monotonic()
        for key, counters in sample(args.prefix).items():
            series[key].append((now, counters))
        time.sleep(args.interval)
    if not series:
        print(f"no emulated links of prefix {args.prefix!r} seen while the command ran")
        return child.returncode or 1
    print(f"link use per {args.window:g} s window while the job ran (tc bytes / rate)")
    print(f"{'host':>4} {'direction':>9} {'windows':>7} {'mean':>6} {'median':>7} "
          f"{'quartiles':>13} {'drops':>6}  queue p90 / most (KB, ms)")  # fmt: skip
    for (host, direction), samples in sorted(series.items()):
        uses, drops = use_per_window(samples, args.window)
        if len(uses) < 2:
            continue
        q1, median, q3 = statistics.quantiles(uses, n=4)
        mean = statistics.fmean(uses)
        p90, most = queue_held(samples)
        ms = 8e3 / samples[-1][1][0]  # milliseconds per byte at the link's rate
        print(f"{host:>4} {direction:>9} {len(uses):>7} {mean:>6.0%} {median:>7.0%} "
              f"{q1:>6.0%}-{q3:<6.0%} {drops:>6}  {p90 / 1e3:.0f} / {most / 1e3:.0f} KB, "
              f"{p90 * ms:.1f} / {most * ms:.1f} ms")  # fmt: skip
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
