"""A worker killed mid-training stops the whole job within seconds, with a message that
names the worker, the layer and the iteration; the last snapshot is intact and training
resumes from it with --snapshot."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

from caffe.formats.weights_io import read_caffemodel, read_solverstate
from tests.caffe.parallel.job import write_solver

SNAPSHOTS = 'snapshot: 5\nsnapshot_prefix: "{prefix}"\ndisplay: 5'
CAFFE = [sys.executable, "-m", "caffe.tools.cli"]
LAUNCH = [sys.executable, "-m", "poseidon.cli", "launch"]


def start(command: list[str], cwd: str) -> tuple[subprocess.Popen, queue.Queue]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOG_minloglevel": "0"}
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()
    return process, lines


def wait_for(lines: queue.Queue, pattern: str, seen: list[str], timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(
        f"no line matching {pattern!r} within {timeout}s:\n{''.join(seen)[-3000:]}"
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_mid_run(tmp_path, launch_args: list[str], workers: int, victim: int,
                 snapshot_at: int) -> tuple[list[str], list[int]]:  # fmt: skip
    """`poseidon launch LAUNCH_ARGS -- caffe train` of a solver snapshotting every 5
    iterations into tmp_path/snap; once iteration `snapshot_at` is saved, kill -9 worker
    `victim`. Checks that the job stopped, failing, within 10 s; returns every line it printed
    and the workers' pids."""
    solver = write_solver(str(tmp_path), 4, 100000,
                          snapshots=SNAPSHOTS.format(prefix=str(tmp_path / "snap")))  # fmt: skip
    launcher, lines = start([*LAUNCH, *launch_args, "--", *CAFFE, "train", "--solver", solver],
                            str(tmp_path))  # fmt: skip
    seen: list[str] = []
    pids = [int(wait_for(lines, rf"started worker {r} \(pid (\d+)\)", seen).group(1))
            for r in range(workers)]  # fmt: skip
    wait_for(lines, rf"Snapshotting solver state .*_iter_{snapshot_at}\.solverstate", seen)
    os.kill(pids[victim], signal.SIGKILL)
    killed_at = time.monotonic()
    launcher.wait(timeout=30)
    elapsed = time.monotonic() - killed_at
    time.sleep(0.5)
    while not lines.empty():
        seen.append(lines.get())
    assert elapsed < 10, f"job took {elapsed:.1f}s to stop"
    assert launcher.returncode != 0
    return seen, pids


def test_killed_worker_stops_the_job_and_the_snapshot_resumes(tmp_path):
    seen, pids = kill_mid_run(tmp_path, ["-n", "2", "-s", "2"], 2, victim=1, snapshot_at=15)
    output = "".join(seen)
    fatal = [line for line in seen if line.startswith("[worker 0] F")]
    assert fatal, output[-3000:]
    # Worker 1's process also ran shard 1: either may be the first peer found gone.
    assert re.search(
        r"layer \d+ \(\w+\) iteration \d+ failed: (worker 1 .* is gone|server 1 .*"
        r"is gone.*\[shard 1 ran inside worker 1's process\])",
        fatal[0],
    ), fatal[0]
    assert "Traceback" not in output
    assert not any(alive(pid) for pid in pids)

    # The newest snapshot pair is complete and readable...
    states = sorted(tmp_path.glob("snap_iter_*.solverstate"), key=os.path.getmtime)
    latest = states[-1]
    iteration = int(re.search(r"_iter_(\d+)", latest.name).group(1))
    state, history = read_solverstate(str(latest))
    assert state.iter == iteration and len(history) == 8
    weights = read_caffemodel(str(tmp_path / f"snap_iter_{iteration}.caffemodel"))
    assert [layer.name for layer in weights.layers if layer.blobs] == ["conv1", "conv2", "ip1",
                                                                     "ip2"]  # fmt: skip
    # ... and a distributed run resumes from it.
    resume = write_solver(str(tmp_path), 4, iteration + 3, name="resume",
                          snapshots=SNAPSHOTS.format(prefix=str(tmp_path / "again")))  # fmt: skip
    result = subprocess.run([*LAUNCH, "-n", "2", "-s", "1", "--", *CAFFE, "train", "--solver",
                             resume, "--snapshot", str(latest)], cwd=str(tmp_path),
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "GLOG_minloglevel": "0"})  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    assert f"Restoring previous solver status from {latest}" in result.stdout
    assert (tmp_path / f"again_iter_{iteration + 3}.caffemodel").exists()


def test_a_diverging_worker_ends_the_job_with_its_error(tmp_path):
    """Each worker checks its own loss and gradients (caffe/solvers/divergence.py); the first to
    reach --nonfinite_limit raises, and the job's abort path ends the others."""
    solver = write_solver(str(tmp_path), 4, 1000)
    with open(solver) as f:
        text = f.read()
    with open(solver, "w") as f:
        f.write(text.replace("base_lr: 0.05", "base_lr: 1e6"))
    started = time.monotonic()
    result = subprocess.run([*LAUNCH, "-n", "2", "-s", "1", "--", *CAFFE, "train", "--solver",
                             solver, "--nonfinite_limit", "3"], cwd=str(tmp_path),
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OMP_NUM_THREADS": "1",
                                 "GLOG_minloglevel": "0"})  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert time.monotonic() - started < 60
    assert re.search(r"\[worker \d\] W.*Iteration \d+: loss = nan in output 'loss'", output)
    stop = r"\[worker \d\] F.*training diverged: the loss or gradient has been non-finite for 3 "
    assert re.search(stop + "consecutive iterations", output), output[-3000:]
    assert "Traceback" not in output
