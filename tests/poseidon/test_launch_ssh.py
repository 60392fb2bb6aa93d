"""`poseidon launch --hostfile` over a real sshd on 127.0.0.1 (two "hosts": 127.0.0.1 and
localhost), whose login shell knows nothing of this machine's virtualenv: a command given by
name still runs, and a job that ends — success, failure, Ctrl-C, or a launcher killed
outright — leaves no process behind on any host and its port free for the next job."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.caffe.parallel.test_faults import start, wait_for
from tests.caffe.parallel.test_job_ends import write_case
from tests.poseidon.sshd import Sshd, running_sshd, unavailable
from tests.process_tree import processes_mentioning, wait_gone

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "sshd")
VENV_BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> Sshd:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_command(sshd: Sshd, tmp_path: Path, port: int, *command: str) -> list[str]:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("127.0.0.1 slots=1\nlocalhost slots=1\n")
    launch = [sys.executable, "-m", "poseidon.cli", "launch", "-n", "2"]
    return [*launch, "--hostfile", str(hostfile), "--ssh", " ".join(sshd.ssh), "--port",
            str(port), "--", *command]  # fmt: skip


def local_env() -> dict[str, str]:
    """As a user with the virtualenv activated: `caffe` is on this shell's PATH."""
    return {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
            "OMP_NUM_THREADS": "1"}  # fmt: skip


def assert_nothing_left(marker: str, port: int, timeout_s: float = 10.0) -> None:
    """No process of the job on any host (every host is this machine) and its port free."""
    left = wait_gone(set(processes_mentioning(marker)), timeout_s)
    assert not left, processes_mentioning(marker)
    with socket.socket() as s:  # the coordinator's port: the next job can take it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_the_remote_login_shell_does_not_know_the_virtualenv(sshd):
    result = subprocess.run([*sshd.ssh, "127.0.0.1", "command -v caffe || echo no caffe"],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert result.stdout.strip() == "no caffe", result.stdout + result.stderr


def test_a_command_given_by_name_trains_on_every_host(sshd, tmp_path):
    solver = write_case(str(tmp_path), "ssh", 20)
    port = free_port()
    result = subprocess.run(launch_command(sshd, tmp_path, port, "caffe", "train", "--solver",
                                           solver), cwd=tmp_path, env=local_env(),
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"[launch] caffe is {VENV_BIN}/caffe here; every host runs that path" in output
    assert re.search(r"\[launch\] started worker 1 on localhost", output)
    assert (tmp_path / "ssh_iter_20.caffemodel").exists()
    assert_nothing_left(str(tmp_path), port)


def test_a_failed_job_leaves_nothing_behind_and_its_port_free(sshd, tmp_path):
    port = free_port()
    missing = str(tmp_path / "no_such_solver.prototxt")
    for _attempt in range(2):  # the second launch on the same port must start too
        result = subprocess.run(launch_command(sshd, tmp_path, port, "caffe", "train",
                                               "--solver", missing), cwd=tmp_path,
                                env=local_env(), capture_output=True, text=True,
                                timeout=120)  # fmt: skip
        output = result.stdout + result.stderr
        assert result.returncode == 1, output[-4000:]
        assert "Address already in use" not in output
        assert "no_such_solver.prototxt" in output
        assert_nothing_left(str(tmp_path), port)


@pytest.mark.parametrize("how", ["ctrl-c", "kill -9"])
def test_a_stopped_or_killed_launcher_leaves_nothing_on_any_host(sshd, tmp_path, how):
    solver = write_case(str(tmp_path), "long", 10_000_000)
    port = free_port()
    job = launch_command(sshd, tmp_path, port, "caffe", "train", "--solver", solver)
    command = ["env", f"PATH={local_env()['PATH']}", *job]
    launcher, lines = start(command, str(tmp_path))
    seen: list[str] = []
    wait_for(lines, r"\[worker 0\] I.* Iteration 10 \(", seen)
    assert len(processes_mentioning(solver)) >= 4  # 2 supervisors + 2 workers, over ssh
    if how == "ctrl-c":
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=60) == 130, "".join(seen)[-3000:]
        time.sleep(0.2)
        while not lines.empty():
            seen.append(lines.get())
        assert re.search(r"\[worker 1\] I.* every worker will stop at iteration \d+",
                         "".join(seen))  # fmt: skip
    else:
        launcher.kill()
        launcher.wait(10)
    assert_nothing_left(str(tmp_path), port)
    # Either way the workers stopped together and rank 0 saved the run.
    assert len(list(tmp_path.glob("long_iter_*.caffemodel"))) == 1
