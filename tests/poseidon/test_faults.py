"""Real processes started with the `poseidon` command and killed with
SIGKILL in the middle of their rounds: every other process must exit
non-zero within 10 s, saying which peer died, at which layer and iteration.
A stopped (SIGSTOP) worker is found by missed heartbeats instead."""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.poseidon.cluster_util import (
    HERE,
    Proc,
    cluster_env,
    listening_address,
    poseidon_cmd,
    spawn,
    wait_for_output,
)

WORKERS = 3
SERVERS = 2


def start_cluster(tmp: Path) -> dict[str, Proc]:
    env = cluster_env()
    coordinator = spawn(
        "coordinator",
        poseidon_cmd(
            "coordinator",
            "--address",
            "127.0.0.1:0",
            "--workers",
            str(WORKERS),
            "--servers",
            str(SERVERS),
        ),
        env,
        tmp,
    )
    procs = {"coordinator": coordinator}
    env = cluster_env(
        POSEIDON_COORDINATOR=listening_address(coordinator),
        POSEIDON_NUM_WORKERS=str(WORKERS),
        POSEIDON_NUM_SERVERS=str(SERVERS),
        POSEIDON_LISTEN="127.0.0.1:0",
    )
    for s in range(SERVERS):
        procs[f"server {s}"] = spawn(
            f"server {s}", poseidon_cmd("server", "--rank", str(s)), env, tmp
        )
    for r in range(WORKERS):
        procs[f"worker {r}"] = spawn(
            f"worker {r}",
            [sys.executable, str(HERE / "fault_worker.py")],
            {**env, "POSEIDON_ROLE": "worker", "POSEIDON_RANK": str(r)},
            tmp,
        )
    return procs


def stop_all(procs: dict[str, Proc]) -> None:
    for p in procs.values():
        if p.popen.poll() is None:
            p.popen.kill()
        p.popen.wait(10)


def wait_all_exit(procs: list[Proc], since: float, limit_s: float) -> float:
    for p in procs:
        left = limit_s - (time.monotonic() - since)
        try:
            p.popen.wait(timeout=max(left, 0.01))
        except Exception:
            raise AssertionError(
                f"{p.name} still running {limit_s} s after the fault\nstderr:\n{p.stderr()}"
            ) from None
    return time.monotonic() - since


def check_reports(survivors: list[Proc], victim: str) -> None:
    for p in survivors:
        err = p.stderr()
        assert p.popen.returncode not in (0, None), f"{p.name} exited 0\n{err}"
        assert f"{victim} (127.0.0.1:" in err, f"{p.name} does not name {victim}:\n{err}"
        assert re.search(r"layer \d+", err), f"{p.name} names no layer:\n{err}"
        assert re.search(r"iteration \d+", err), f"{p.name} names no iteration:\n{err}"


@pytest.mark.parametrize("victim", ["worker 1", "server 0"])
def test_kill_9_mid_round_ends_every_process(tmp_path: Path, victim: str) -> None:
    procs = start_cluster(tmp_path)
    try:
        for r in range(WORKERS):
            wait_for_output(procs[f"worker {r}"], "iteration 3\n", 60)
        dead = procs[victim]
        dead.popen.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        survivors = [p for p in procs.values() if p is not dead]
        elapsed = wait_all_exit(survivors, t0, 10.0)
        assert elapsed < 10.0
        check_reports(survivors, victim)
    finally:
        stop_all(procs)


def test_stopped_worker_is_caught_by_missed_heartbeats(tmp_path: Path) -> None:
    procs = start_cluster(tmp_path)
    try:
        for r in range(WORKERS):
            wait_for_output(procs[f"worker {r}"], "iteration 2\n", 60)
        stuck = procs["worker 2"]
        stuck.popen.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        survivors = [p for p in procs.values() if p is not stuck]
        wait_all_exit(survivors, t0, 10.0)
        for p in survivors:
            assert p.popen.returncode != 0
            assert "worker 2 (127.0.0.1:" in p.stderr()
            assert "missed heartbeats" in p.stderr(), p.stderr()
    finally:
        if procs["worker 2"].popen.poll() is None:
            procs["worker 2"].popen.send_signal(signal.SIGCONT)
        stop_all(procs)


def test_clean_run_exits_zero(tmp_path: Path) -> None:
    env = cluster_env()
    coordinator = spawn(
        "coordinator",
        poseidon_cmd("coordinator", "--address", "127.0.0.1:0", "--workers", "2", "--servers", "1"),
        env,
        tmp_path,
    )
    procs = {"coordinator": coordinator}
    try:
        env = cluster_env(
            POSEIDON_COORDINATOR=listening_address(coordinator),
            POSEIDON_NUM_WORKERS="2",
            POSEIDON_NUM_SERVERS="1",
            POSEIDON_LISTEN="127.0.0.1:0",
        )
        procs["server 0"] = spawn("server 0", poseidon_cmd("server", "--rank", "0"), env, tmp_path)
        for r in range(2):
            procs[f"worker {r}"] = spawn(
                f"worker {r}",
                [sys.executable, str(HERE / "fault_worker.py"), "5"],
                {**env, "POSEIDON_RANK": str(r)},
                tmp_path,
            )
        for p in procs.values():
            assert p.popen.wait(60) == 0, f"{p.name}:\n{p.stderr()}"
        assert "iteration 4" in procs["worker 1"].stdout()
    finally:
        stop_all(procs)


@pytest.mark.parametrize(("sig", "name"), [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_signals_abort_a_node_with_the_reason(tmp_path: Path, sig: int, name: str) -> None:
    coordinator = spawn(
        "coordinator",
        poseidon_cmd("coordinator", "--address", "127.0.0.1:0", "--workers", "1"),
        cluster_env(),
        tmp_path,
    )
    try:
        listening_address(coordinator)
        coordinator.popen.send_signal(sig)
        assert coordinator.popen.wait(10) == 1
        assert f"coordinator received {name}" in coordinator.stderr(), coordinator.stderr()
    finally:
        stop_all({"coordinator": coordinator})
