"""What happens when a job is interrupted, loses a peer, fills its disk or diverges: each
case run once on 127.0.0.1, timed, with the message the user sees last. The table of
docs/distributed.md ("What happens when…") comes from this script.

    .venv/bin/python bench/what_happens_when.py [--cases ctrl-c,kill-launcher,...]

Jobs are `poseidon launch -n 2 -s 2 -- caffe train` of a tiny net (tests/caffe/parallel/
job.py's data and net, a constant learning rate). The disk-full case needs root (a 256 KiB
tmpfs); it is reported as skipped otherwise. The handshake flood is measured by
tests/poseidon/test_handshake_flood.py (run it with -s for its numbers).
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.caffe.parallel.job import BATCH, CLASSES, NET, write_dataset  # noqa: E402
from tests.process_tree import command_line, descendants, wait_gone  # noqa: E402

CAFFE = [sys.executable, "-m", "caffe.tools.cli"]
LAUNCH = [sys.executable, "-m", "poseidon.cli", "launch", "-n", "2", "-s", "2"]
SOLVER = """net: "{net}"
base_lr: {lr}
momentum: 0.9
lr_policy: "fixed"
max_iter: {max_iter}
random_seed: 1701
solver_mode: CPU
display: 10
snapshot: {snapshot}
snapshot_prefix: "{prefix}"
"""


def write_solver(directory: Path, name: str, lr: float = 0.02, max_iter: int = 10_000_000,
                 snapshot: int = 0, prefix: Path | None = None) -> str:  # fmt: skip
    source = directory / "train_lmdb"
    if not source.exists():
        write_dataset(str(directory))
    net = directory / "net.prototxt"
    net.write_text(NET.format(source=source, batch=BATCH, classes=CLASSES))
    solver = directory / f"{name}.prototxt"
    solver.write_text(SOLVER.format(net=net, lr=lr, max_iter=max_iter, snapshot=snapshot,
                                    prefix=prefix or directory / name))  # fmt: skip
    return str(solver)


class Job:
    """A process whose output lines are timestamped as they arrive."""

    def __init__(self, command: list[str], cwd: Path) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)  # fmt: skip
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.seen: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, pattern: str, timeout_s: float = 60.0) -> tuple[float, re.Match]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                at, line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append((at, line))
            match = re.search(pattern, line)
            if match:
                return at, match
        raise RuntimeError(f"no {pattern!r} within {timeout_s}s:\n" +
                           "\n".join(x for _, x in self.seen[-30:]))  # fmt: skip

    def finish(self, timeout_s: float = 60.0) -> tuple[int, float, str]:
        """Status, when it ended (monotonic) and its last line."""
        status = self.process.wait(timeout_s)
        ended = time.monotonic()
        time.sleep(0.2)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return status, ended, self.seen[-1][1] if self.seen else ""


def training(directory: Path, name: str) -> Job:
    """A 2-worker job with a snapshot every 10 iterations, past iteration 20."""
    solver = write_solver(directory, name, snapshot=10)
    job = Job([*LAUNCH, "--", *CAFFE, "train", "--solver", solver], directory)
    job.wait_for(r"\[worker 0\] I.* Iteration 20 \(")
    return job


def snapshots(directory: Path, name: str) -> str:
    """The newest snapshot of run `name` and how many there are."""
    found = sorted(directory.glob(f"{name}_iter_*.caffemodel"), key=lambda p: p.stat().st_mtime)
    return f"newest {found[-1].name} of {len(found)}" if found else "nothing"


def worker_process(job: Job, rank: int) -> int:
    supervisor = int(next(re.search(rf"started worker {rank} \(pid (\d+)\)", x).group(1)
                          for _, x in job.seen if f"started worker {rank} (" in x))  # fmt: skip
    return next(p for p in descendants(supervisor) if "caffe.tools" in command_line(p))


def signal_launcher(signum: int) -> Callable[[Path], dict[str, str]]:
    def case(directory: Path) -> dict[str, str]:
        job = training(directory, "signal")
        sent = time.monotonic()
        job.process.send_signal(signum)
        status, ended, last = job.finish()
        return {"time": f"{ended - sent:.2f} s to exit {status}", "last": last,
                "saved": snapshots(directory, "signal")}  # fmt: skip

    return case


def kill_launcher(directory: Path) -> dict[str, str]:
    job = training(directory, "orphan")
    tree = descendants(job.process.pid)
    sent = time.monotonic()
    job.process.kill()
    left = wait_gone(tree, 30.0)
    gone = time.monotonic() - sent
    return {"time": f"{gone:.2f} s until all {len(tree)} processes were gone"
                    + (f" ({len(left)} left!)" if left else ""),
            "last": "(the launcher is dead: no output)",
            "saved": snapshots(directory, "orphan")}  # fmt: skip


def peer_fault(signum: int) -> Callable[[Path], dict[str, str]]:
    def case(directory: Path) -> dict[str, str]:
        job = training(directory, "fault")
        victim = worker_process(job, 1)
        sent = time.monotonic()
        os.kill(victim, signum)
        try:
            aborted, _ = job.wait_for(r"\[coordinator\] .*aborting the job: ", 60)
            status, ended, last = job.finish()
        finally:
            if signum == signal.SIGSTOP:
                os.kill(victim, signal.SIGKILL)
        return {"time": f"{aborted - sent:.2f} s to the abort, launcher exit "
                        f"{ended - aborted:.2f} s later (status {status})", "last": last,
                "saved": snapshots(directory, "fault")}  # fmt: skip

    return case


def disk_full(directory: Path) -> dict[str, str]:
    if os.geteuid() != 0:
        return {"time": "skipped (needs root for a tmpfs)", "last": "", "saved": ""}
    full = directory / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(full)], check=True)
    try:
        solver = write_solver(directory, "disk", max_iter=1000, snapshot=5,
                              prefix=full / "disk")  # fmt: skip
        job = Job([*CAFFE, "train", "--solver", solver], directory)
        started = time.monotonic()
        status, ended, last = job.finish(120)
        from caffe.formats.weights_io import read_caffemodel, read_solverstate

        newest = max(full.glob("disk_iter_*.solverstate"), key=lambda p: p.stat().st_mtime)
        state, _ = read_solverstate(str(newest))  # raises if it were damaged
        read_caffemodel(str(newest.with_suffix(".caffemodel")))
        stray = [p.name for p in full.iterdir() if p.name.endswith(".tmp")]
        saved = f"{newest.name} (iter {state.iter}) reads back; {len(stray)} .tmp files left"
        return {"time": f"{ended - started:.2f} s run, exit {status}", "last": last,
                "saved": saved}  # fmt: skip
    finally:
        subprocess.run(["umount", str(full)], check=False)


def divergence(directory: Path) -> dict[str, str]:
    solver = write_solver(directory, "diverge", lr=1e6, max_iter=1000, snapshot=5)
    job = Job([*CAFFE, "train", "--solver", solver], directory)
    started = time.monotonic()
    status, ended, last = job.finish(120)
    first = next((x for _, x in job.seen if "non-finite" in x or "= nan" in x), "")
    return {"time": f"{ended - started:.2f} s run, exit {status}; first warning: {first[-110:]}",
            "last": last, "saved": snapshots(directory, "diverge")}  # fmt: skip


CASES: dict[str, Callable[[Path], dict[str, str]]] = {
    "ctrl-c": signal_launcher(signal.SIGINT),
    "sigterm": signal_launcher(signal.SIGTERM),
    "sighup": signal_launcher(signal.SIGHUP),
    "kill-launcher": kill_launcher,
    "dead-worker": peer_fault(signal.SIGKILL),
    "frozen-worker": peer_fault(signal.SIGSTOP),
    "disk-full": disk_full,
    "divergence": divergence,
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    print("| case | measured | last line the user sees | on disk |\n|---|---|---|---|")
    for name in args.cases.split(","):
        with tempfile.TemporaryDirectory(prefix=f"whw-{name}-") as tmp:
            row = CASES[name](Path(tmp))
        last = row["last"].replace("|", "\\|")
        print(f"| {name} | {row['time']} | `{last}` | {row['saved']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
