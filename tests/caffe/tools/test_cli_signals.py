"""Ctrl-C, SIGTERM and SIGHUP during `caffe train` (a real subprocess): the effects chosen by
--sigint_effect / --sighup_effect, and the exit status."""

import signal
import subprocess

import pytest

from tests.caffe.tools.cli_helpers import (
    CAFFE_SCRIPT,
    REPO_ROOT,
    require_layers,
    subprocess_env,
    wait_for_text,
    write_tiny_solver,
)

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")


def start_training(tmp_path, *flags: str) -> tuple[subprocess.Popen, object]:
    """A `caffe train` that would run for a very long time, logging to tmp_path/train.log."""
    require_layers("DummyData", "InnerProduct", "SoftmaxWithLoss")
    solver = write_tiny_solver(
        tmp_path, max_iter=10_000_000, snapshot=0, test_iter=None, test_interval=None, display=50
    )
    log_path = tmp_path / "train.log"
    log_file = open(log_path, "w")  # noqa: SIM115  (closed by the caller's finish())
    process = subprocess.Popen(
        [*CAFFE_SCRIPT, "train", "--solver", str(solver), *flags],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=log_file,
    )
    wait_for_text(log_path, "Starting Optimization", process)
    wait_for_text(log_path, "Iteration 50 (", process)
    return process, log_file


def finish(process: subprocess.Popen, log_file) -> int:
    try:
        return process.wait(timeout=60)
    finally:
        log_file.close()
        if process.poll() is None:
            process.kill()


def snapshots(tmp_path) -> list[str]:
    return sorted(p.name for p in tmp_path.glob("tiny_iter_*.caffemodel"))


def test_ctrl_c_stops_training_saves_and_exits_0(tmp_path):
    # Caffe's train() returns 0 after "Optimization stopped early.", so set -e scripts
    # (cifar10's train_quick.sh) go on to their next command.
    process, log_file = start_training(tmp_path)
    process.send_signal(signal.SIGINT)
    status = finish(process, log_file)
    log = (tmp_path / "train.log").read_text()
    assert status == 0, log
    assert "Optimization stopped early." in log
    assert "Traceback" not in log
    assert "Optimization Done." not in log
    # Like Caffe, the solver still writes its final snapshot (snapshot_after_train).
    assert len(snapshots(tmp_path)) == 1


def test_ctrl_c_can_snapshot_and_sighup_can_stop(tmp_path):
    process, log_file = start_training(
        tmp_path, "--sigint_effect", "snapshot", "--sighup_effect=stop"
    )
    log_path = tmp_path / "train.log"
    try:
        process.send_signal(signal.SIGINT)
        wait_for_text(log_path, "Snapshotting solver state to binary proto file", process)
        assert process.poll() is None  # a snapshot, then training goes on
        first = snapshots(tmp_path)
        assert len(first) == 1
        process.send_signal(signal.SIGHUP)
    finally:
        status = finish(process, log_file)
    log = log_path.read_text()
    assert status == 0, log  # stopped by SIGHUP, not by Ctrl-C
    assert "Optimization stopped early." in log
    assert len(snapshots(tmp_path)) == 2  # the requested one and the final one


def test_sigterm_stops_and_saves_like_ctrl_c(tmp_path):
    # A batch system's or a launcher's polite termination loses no work either.
    process, log_file = start_training(tmp_path)
    process.send_signal(signal.SIGTERM)
    status = finish(process, log_file)
    log = (tmp_path / "train.log").read_text()
    assert status == 0, log
    assert "Caught SIGTERM: stop." in log and "Optimization stopped early." in log
    assert len(snapshots(tmp_path)) == 1


def test_sigterm_keeps_its_default_when_sigint_is_ignored(tmp_path):
    process, log_file = start_training(tmp_path, "--sigint_effect", "none")
    process.send_signal(signal.SIGTERM)
    assert finish(process, log_file) == -signal.SIGTERM
    assert snapshots(tmp_path) == []
