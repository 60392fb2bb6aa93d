"""`poseidon launch`: one command starts coordinator, shards and workers; output is
prefixed by rank; the exit status is the job's; Ctrl-C stops every process; a host file
starts the same over ssh (here a stand-in ssh that runs the command locally)."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from poseidon.launch import parse_hostfile

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch_worker.py")
LAUNCH = [sys.executable, "-m", "poseidon.cli", "launch"]


def launch(args: list[str], worker_args: list[str] = (), timeout: float = 60, **kw):
    command = [*LAUNCH, *args, "--", sys.executable, WORKER, *worker_args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kw)


def test_job_runs_with_prefixed_output_and_status_zero(tmp_path):
    result = launch(["-n", "3", "-s", "2", "--no-colocate", "--log-dir", str(tmp_path)])
    assert result.returncode == 0, result.stdout
    for rank in range(3):
        assert f"[worker {rank}] rank {rank} of 3: sum 6" in result.stdout
    assert "[server 1] poseidon server 1 listening on" in result.stdout
    assert "sum 6" in (tmp_path / "worker_2.log").read_text()


def test_colocated_shards_run_inside_workers_extra_shards_as_processes():
    result = launch(["-n", "2", "-s", "3"])
    assert result.returncode == 0, result.stdout
    assert "[server 0]" not in result.stdout and "[server 1]" not in result.stdout
    assert "[server 2] poseidon server 2 listening on" in result.stdout
    assert "[worker 1] rank 1 of 2: sum 3" in result.stdout


def test_failing_worker_gives_its_status_and_stops_the_others():
    started = time.monotonic()
    result = launch(["-n", "3", "-s", "1"], ["1", "7", "0"])
    assert result.returncode == 7, result.stdout
    assert time.monotonic() - started < 15
    last = result.stdout.strip().splitlines()[-1]
    # The coordinator's verdict, then the status of the node it names.
    assert last.startswith("[launch] job failed: worker 1 (127.0.0.1:"), last
    assert last.endswith("(worker 1 exited with status 7)"), last


def test_ctrl_c_stops_every_process():
    process = subprocess.Popen([*LAUNCH, "-n", "2", "--", sys.executable, WORKER, "-1", "0",
                                "60"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    pids, output = [], []
    for line in process.stdout:
        output.append(line)
        match = re.search(r"started worker \d \(pid (\d+)\)", line)
        if match:
            pids.append(int(match.group(1)))
        if sum("sum 3" in x for x in output) == 2:
            break
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=20) == 130
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_missing_command_and_bad_hostfile_are_clear_errors(tmp_path):
    result = subprocess.run([*LAUNCH, "-n", "2"], capture_output=True, text=True)
    assert result.returncode == 2 and "no command" in result.stderr
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=2\nnode2 slots=x\n")
    with pytest.raises(ValueError, match=r"hosts:3: expected 'host \[slots=N\]'"):
        parse_hostfile(str(hostfile))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hostfile_starts_the_job_over_ssh(tmp_path):
    fake_ssh = tmp_path / "fake-ssh"
    # Stands in for `ssh HOST COMMAND`: runs COMMAND here, stdin (the token) passed on.
    fake_ssh.write_text('#!/bin/sh\necho "ssh to $1" >> "$(dirname "$0")/ssh.log"\n'
                        'shift\nexec sh -c "$*"\n')  # fmt: skip
    fake_ssh.chmod(fake_ssh.stat().st_mode | stat.S_IEXEC)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("127.0.0.1 slots=2\n")
    result = launch(["-n", "2", "--hostfile", str(hostfile), "--ssh", str(fake_ssh),
                     "--port", str(free_port()), "--no-colocate"])  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[worker 1] rank 1 of 2: sum 3" in result.stdout
    # coordinator + one shard per host + two workers, all through ssh
    assert (tmp_path / "ssh.log").read_text().count("ssh to 127.0.0.1") == 4
    assert "POSEIDON_TOKEN" not in (tmp_path / "ssh.log").read_text()
