"""Faults on one host of an emulated cluster (docs/distributed.md, "What happens when…"):
four hosts, each its own network namespace, `poseidon launch --hostfile` of a `caffe train`
job over the emulation's ssh stand-in. Mid-run, on host 2 (not the coordinator's): its
worker killed with -9, frozen with SIGSTOP, its link taken down, or every process of its
namespace killed. Every process on every host ends within 10 s of the event, the launcher's
last line names the host's worker or shard and what happened, and no process is left in any
namespace; the last snapshot then resumes, on the same hosts, to the weights of a run that
was never disturbed. Needs root and iproute2 (else skipped)."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from poseidon.experiments.emulation import EmulatedHosts
from tests.process_tree import command_line

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"),
        reason="emulated hosts need root and iproute2",
    ),
]
# FAULT_HOSTS=16 gives docs/distributed.md's 16-host figures (by hand: minutes on 2 cores).
HOSTS, VICTIM = int(os.environ.get("FAULT_HOSTS", "4")), 2


def namespace_pids(namespace: str) -> set[int]:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return {int(p) for p in listed.stdout.split()}


def left_behind(hosts: EmulatedHosts, deadline: float) -> dict[str, set[int]]:
    """Each namespace's processes once none is left, or at `deadline` (monotonic). A child
    that the launcher's exit orphaned may still be exiting at that instant (a zombie, its
    command line gone) and be reaped a moment later: only what outlives the deadline is left
    behind."""
    while True:
        left = {ns: namespace_pids(ns) for ns in hosts.namespaces}
        if not any(left.values()) or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def start_job(hosts: EmulatedHosts, solver: str,
              *flags: str) -> tuple[subprocess.Popen, queue.Queue]:  # fmt: skip
    command = [sys.executable, "-m", "poseidon.cli", "launch", "-n", str(HOSTS),
               "--hostfile", hosts.hostfile(), "--ssh", hosts.ssh_wrapper(),
               "--port", "29750", "--", sys.executable, "-m", "caffe.tools.cli", "train",
               "--solver", solver, *flags]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOG_minloglevel": "0"}  # its Iteration lines
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)  # fmt: skip
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        assert launcher.stdout is not None
        for line in launcher.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return launcher, lines


def wait_training(lines: queue.Queue, seen: list[str], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            seen.append(lines.get(timeout=0.5))
        except queue.Empty:
            continue
        if re.search(r"Iteration [1-9]\d*", seen[-1]):
            return
    raise AssertionError("the job did not start training:\n" + "".join(seen)[-4000:])


def victim_worker(hosts: EmulatedHosts) -> int:
    lines = {p: command_line(p) for p in namespace_pids(hosts.namespaces[VICTIM])}
    pids = [p for p, line in lines.items() if "caffe.tools.cli" in line and "supervise" not in line]
    assert len(pids) == 1, lines
    return pids[0]


def inject(fault: str, hosts: EmulatedHosts) -> None:
    namespace = hosts.namespaces[VICTIM]
    if fault == "kill":
        os.kill(victim_worker(hosts), signal.SIGKILL)
    elif fault == "stop":
        os.kill(victim_worker(hosts), signal.SIGSTOP)
    elif fault == "link":
        subprocess.run(["ip", "netns", "exec", namespace, "ip", "link", "set",
                        hosts.inner(VICTIM), "down"], check=True)  # fmt: skip
    elif fault == "namespace":
        for pid in namespace_pids(namespace):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def restore_link(hosts: EmulatedHosts) -> None:
    """Host 2's link up again, and the other hosts' failed neighbour entries for it gone
    (an address that stopped answering ARP is refused at once until its entry expires)."""
    subprocess.run(["ip", "netns", "exec", hosts.namespaces[VICTIM], "ip", "link", "set",
                    hosts.inner(VICTIM), "up"], check=True)  # fmt: skip
    for namespace in hosts.namespaces:
        subprocess.run(["ip", "netns", "exec", namespace, "ip", "neigh", "flush", "all"],
                       check=True)  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        probe = f"import socket; socket.create_connection(('{hosts.addresses[VICTIM]}', 9), 1)"
        reached = subprocess.run(["ip", "netns", "exec", hosts.namespaces[0], sys.executable,
                                  "-c", probe], capture_output=True, text=True)  # fmt: skip
        if "refused" in reached.stderr or reached.returncode == 0:
            return  # host 2 answers (nothing listens on port 9: a refusal is an answer)
        time.sleep(0.2)
    raise AssertionError(f"host {VICTIM} unreachable after its link came back up")


WHAT = {
    "kill": r"is gone|connection (reset|closed)",
    "stop": r"missed heartbeats",
    "link": r"missed heartbeats|is gone|timed out",
    "namespace": r"is gone|connection (reset|closed)",
}


ITERS = 400  # long enough for every fault to land mid-run; snapshots every 10


def solver_of(directory: Path, name: str) -> str:
    from tests.caffe.parallel.job import BATCH, write_solver

    snapshots = f'display: 1\nsnapshot: 10\nsnapshot_prefix: "{directory / name}"'
    return write_solver(str(directory), BATCH, ITERS, name=name, snapshots=snapshots)


def run_to_end(hosts: EmulatedHosts, solver: str, *flags: str) -> str:
    launcher, lines = start_job(hosts, solver, *flags)
    status = launcher.wait(timeout=240)
    time.sleep(0.5)
    output = []
    while not lines.empty():
        output.append(lines.get())
    assert status == 0, "".join(output)[-3000:]
    return "".join(output)


def final_weights(prefix: Path) -> dict[str, np.ndarray]:
    from caffe.formats.weights_io import read_caffemodel

    layers = read_caffemodel(f"{prefix}_iter_{ITERS}.caffemodel").layers
    return {f"{layer.name}/{i}": np.array(blob.data, np.float32).reshape(-1)
            for layer in layers for i, blob in enumerate(layer.blobs)}  # fmt: skip


def assert_same_training(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """Equal up to the order of the shards' sums: with four workers a sum's rounding depends
    on the order the pushes arrive in, which no two runs share (two workers' sums are exact
    either way, so test_job_ends.py compares bit for bit)."""
    assert set(got) == set(want)
    for name, value in want.items():
        scale = max(float(np.abs(value).max()), 1e-6)
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4 * scale, err_msg=name)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, np.ndarray]:
    """The weights of the job run to its end on the same emulated hosts, never disturbed."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    with EmulatedHosts(HOSTS, None, prefix="pft") as hosts:
        run_to_end(hosts, solver_of(directory, "whole"))
    return final_weights(directory / "whole")


# The link case failed 2 times in about 15 runs on 2026-12-04, its message not kept, before
# left_behind waited for the deadline (a child the launcher's exit orphaned, still exiting,
# had been counted as left behind: the likely cause); since then it passed 21 runs of 21
# (2026-12-06, beside an emulation that kept the cores busy).
@pytest.mark.parametrize("fault", list(WHAT))
def test_a_fault_on_one_host_ends_every_process_within_10s_naming_it(
    tmp_path, fault, uninterrupted
):
    solver = solver_of(tmp_path, "run")
    with EmulatedHosts(HOSTS, None, prefix="pft") as hosts:
        launcher, lines = start_job(hosts, solver)
        seen: list[str] = []
        try:
            wait_training(lines, seen)
            time.sleep(1.0)
            started = time.monotonic()
            inject(fault, hosts)
            status = launcher.wait(timeout=30)
            elapsed = time.monotonic() - started
            left = left_behind(hosts, deadline=started + 10)
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
        time.sleep(0.5)
        while not lines.empty():
            seen.append(lines.get())
        output = "".join(seen)
        last = ([line for line in seen if line.startswith("[launch]")] or [""])[-1]
        print(f"{fault}: the launcher ended {elapsed:.2f} s after the event, status {status}; "
              f"its last line: {last.strip()}")  # fmt: skip
        assert status != 0, output[-3000:]
        assert elapsed < 10, output[-3000:]
        victim = hosts.addresses[VICTIM]
        assert victim in last and re.search(WHAT[fault], last), last
        assert not any(left.values()), {ns: [command_line(p) for p in pids]
                                        for ns, pids in left.items() if pids}  # fmt: skip
        # The last snapshot resumes, on the same hosts, to the undisturbed run's weights.
        if fault == "link":
            restore_link(hosts)
        states = sorted(tmp_path.glob("run_iter_*.solverstate"),
                        key=lambda p: int(p.stem.rsplit("_", 1)[1]))  # fmt: skip
        assert states, output[-3000:]
        assert int(states[-1].stem.rsplit("_", 1)[1]) < ITERS  # it was mid-run
        resumed = run_to_end(hosts, solver, "--snapshot", str(states[-1]))
        assert f"Restoring previous solver status from {states[-1]}" in resumed
        assert not re.search(r"\] Iteration 1 \(", resumed), "it started over"
    assert_same_training(final_weights(tmp_path / "run"), uninterrupted)
