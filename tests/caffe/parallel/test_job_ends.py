"""How a `poseidon launch -- caffe train` job ends when its user or its machine intervenes:
Ctrl-C, SIGTERM and SIGHUP stop every worker at one agreed iteration with a final snapshot
that resumes to the weights of an uninterrupted run; a launcher killed outright takes its
whole job with it; a frozen worker ends the job promptly, and the launcher's last line
names it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from caffe.formats.weights_io import read_caffemodel
from tests.caffe.parallel.job import BATCH, CLASSES, NET, write_dataset
from tests.caffe.parallel.test_faults import start, wait_for
from tests.process_tree import alive, command_line, descendants, wait_gone

CAFFE = [sys.executable, "-m", "caffe.tools.cli"]
LAUNCH = [sys.executable, "-m", "poseidon.cli", "launch", "-n", "2", "-s", "2"]
# A constant rate, so that every iteration moves the weights (a decayed rate would make
# equal weights at the end prove nothing).
SOLVER = """net: "{net}"
base_lr: 0.02
momentum: 0.9
weight_decay: 0.0005
lr_policy: "fixed"
max_iter: {max_iter}
random_seed: 1701
solver_mode: CPU
display: 10
snapshot: 0
snapshot_prefix: "{prefix}"
"""


def write_case(directory: str, name: str, max_iter: int) -> str:
    source = os.path.join(directory, "train_lmdb")
    if not os.path.exists(source):
        write_dataset(directory)
    net = os.path.join(directory, "net.prototxt")
    if not os.path.exists(net):
        with open(net, "w") as f:
            f.write(NET.format(source=source, batch=BATCH, classes=CLASSES))
    solver = os.path.join(directory, f"{name}.prototxt")
    with open(solver, "w") as f:
        f.write(SOLVER.format(net=net, max_iter=max_iter, prefix=os.path.join(directory, name)))
    return solver


def ended(launcher: subprocess.Popen, lines, seen: list[str], timeout_s: float = 60) -> int:
    """The launcher's status; on a timeout, fails with its output."""
    try:
        return launcher.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        launcher.kill()
        output = drain(lines, seen)[-5000:]
        raise AssertionError(f"still running after {timeout_s}s:\n{output}") from None


def drain(lines, seen: list[str]) -> str:
    time.sleep(0.2)
    while not lines.empty():
        seen.append(lines.get())
    return "".join(seen)


def run_to_end(command: list[str], cwd: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return result.stdout


def weights(path: str) -> dict[str, np.ndarray]:
    net = read_caffemodel(path)
    return {f"{layer.name}/{i}": np.array(blob.data, np.float32)
            for layer in net.layers for i, blob in enumerate(layer.blobs)}  # fmt: skip


def start_training(tmp_path, name: str, until: int, env: tuple[str, ...] = ()):
    """A 2-worker job that would train for a very long time, past iteration `until`;
    returns the launcher, its output queue and the lines seen so far."""
    solver = write_case(str(tmp_path), name, 10_000_000)
    launcher, lines = start([*env, *LAUNCH, "--", *CAFFE, "train", "--solver", solver],
                            str(tmp_path))  # fmt: skip
    seen: list[str] = []
    wait_for(lines, rf"\[worker 0\] I.* Iteration {until} \(", seen)
    return launcher, lines, seen


def stop_iteration(output: str, rank: int) -> int:
    found = re.findall(rf"\[worker {rank}\] I.* every worker will stop at iteration (\d+)", output)
    assert len(found) == 1, output[-3000:]
    return int(found[0])


def test_ctrl_c_stops_at_one_iteration_and_the_snapshot_resumes_exactly(tmp_path):
    directory = str(tmp_path)
    launcher, lines, seen = start_training(tmp_path, "interrupted", 30)
    tree = descendants(launcher.pid)
    launcher.send_signal(signal.SIGINT)
    assert ended(launcher, lines, seen) == 130
    output = drain(lines, seen)
    # Both workers stopped at the iteration the coordinator decided, exited 0, and rank 0
    # wrote the final snapshot there; nothing of the job is left.
    stop_at = stop_iteration(output, 0)
    assert stop_iteration(output, 1) == stop_at >= 30
    assert "[worker 0] I" in output and "Optimization stopped early." in output
    assert "job stopped on SIGINT; every process ended cleanly" in output.splitlines()[-1]
    state = tmp_path / f"interrupted_iter_{stop_at}.solverstate"
    assert state.exists() and (tmp_path / f"interrupted_iter_{stop_at}.caffemodel").exists()
    assert not wait_gone(tree, 5.0)

    # Resuming from it ends where an uninterrupted run ends, bit for bit (P1 = 2: a sum of
    # two pushes is the same in either order).
    end = stop_at + 12
    resumed = write_case(directory, "resumed", end)
    run_to_end([*LAUNCH, "--", *CAFFE, "train", "--solver", resumed, "--snapshot", str(state)],
               directory)  # fmt: skip
    reference = write_case(directory, "reference", end)
    run_to_end([*LAUNCH, "--", *CAFFE, "train", "--solver", reference], directory)
    got = weights(str(tmp_path / f"resumed_iter_{end}.caffemodel"))
    want = weights(str(tmp_path / f"reference_iter_{end}.caffemodel"))
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_to_the_launcher_stop_like_ctrl_c(tmp_path, sig):
    launcher, lines, seen = start_training(tmp_path, "job", 10)
    launcher.send_signal(sig)
    assert ended(launcher, lines, seen) == 128 + sig
    output = drain(lines, seen)
    stop_at = stop_iteration(output, 0)
    assert stop_iteration(output, 1) == stop_at
    assert "Caught SIGTERM: stop." in output  # SIGHUP reaches the workers as SIGTERM
    assert (tmp_path / f"job_iter_{stop_at}.caffemodel").exists()


def test_a_killed_launcher_takes_its_whole_job_with_it(tmp_path):
    launcher, _lines, _seen = start_training(tmp_path, "orphan", 10)
    tree = descendants(launcher.pid)
    lines_of = [command_line(pid) for pid in tree]
    supervisors = [line for line in lines_of if "poseidon.supervise" in line]
    workers = [line for line in lines_of if "caffe.tools.cli train" in line]
    assert len(supervisors) == 3 and len(workers) == 2 + 2  # (the supervisors name it too)
    launcher.kill()
    killed_at = time.monotonic()
    left = wait_gone(tree, 10.0)
    assert not left, {pid: command_line(pid) for pid in left}
    elapsed = time.monotonic() - killed_at
    # The workers lost their lifeline and stopped as on SIGTERM: rank 0 saved the run.
    snapshots = list(tmp_path.glob("orphan_iter_*.caffemodel"))
    assert len(snapshots) == 1, f"{elapsed:.1f}s"


def test_a_frozen_worker_ends_the_job_promptly_and_is_named_last(tmp_path):
    env = ("env", "POSEIDON_HEARTBEAT_TIMEOUT_MS=2000")
    launcher, lines, seen = start_training(tmp_path, "frozen", 10, env)
    started = next(x for x in seen if "started worker 1 (pid" in x)
    supervisor = int(re.search(r"\(pid (\d+)\)", started).group(1))
    frozen = [pid for pid in descendants(supervisor) if "caffe.tools" in command_line(pid)]
    assert len(frozen) == 1
    os.kill(frozen[0], signal.SIGSTOP)
    try:
        wait_for(lines, r"\[coordinator\] .*aborting the job: ", seen, timeout=30)
        aborted_at = time.monotonic()
        status = launcher.wait(timeout=30)
        elapsed = time.monotonic() - aborted_at
    finally:
        if alive(frozen[0]):
            os.kill(frozen[0], signal.SIGKILL)
    output = drain(lines, seen)
    assert status != 0
    assert elapsed < 2.0, f"the launcher exited {elapsed:.1f}s after the abort"
    last = output.strip().splitlines()[-1]
    assert re.match(r"\[launch\] job failed: worker 1 \(127\.0\.0\.1:\d+\) missed heartbeats",
                    last), last  # fmt: skip
    assert not alive(frozen[0])


SCRIPT = """
import sys
from caffe.parallel import attach_from_environment, prepare_worker
from caffe.solvers import get_solver

prepare_worker()
solver = get_solver(sys.argv[1])
sync = attach_from_environment(solver)
solver.step(2)
if sys.argv[2] == "raise" and sync.rank == 1:
    raise RuntimeError("the user's script failed on purpose")
# no sync.close(): the interpreter's exit closes it
print("RESULT", sync.rank, float(solver.net.param_data.double().sum()), flush=True)
"""


@pytest.mark.parametrize("ending", ["raise", "no-close"])
def test_a_script_that_ends_without_closing_its_syncer_ends_the_job_cleanly(tmp_path, ending):
    # The interpreter's exit closes a live syncer: with the exception that ends the script
    # (every worker stops naming it), or cleanly (both finish, same weights) — never a
    # process torn down under running comm-core threads (std::terminate, status 134).
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    solver = write_case(str(tmp_path), "s", 100)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [*LAUNCH, "--", sys.executable, str(script), solver, ending]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    output = done.stdout + done.stderr
    assert "terminate called" not in output and "status 134" not in output, output[-4000:]
    if ending == "raise":
        assert done.returncode != 0
        assert output.count("the user's script failed on purpose") >= 2, output[-4000:]
        return
    assert done.returncode == 0, output[-4000:]
    sums = re.findall(r"RESULT (\d) (\S+)", done.stdout)
    assert len(sums) == 2 and sums[0][1] == sums[1][1], output[-4000:]
