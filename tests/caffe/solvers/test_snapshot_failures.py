"""Snapshots that cannot be written (issue 10, item 4): a full disk gives one clear error for
binary and HDF5 alike, leaves no temporary file, and keeps the previous snapshot loadable;
temporary files a killed run left behind are removed (ours, writer gone) or reported."""

import contextlib
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from caffe.errors import WeightsError
from caffe.formats.atomic_write import temp_name
from tests.caffe.solver_harness import make_solver, recorded_log, weights

FORMATS = {
    "BINARYPROTO": (".caffemodel", ".solverstate"),
    "HDF5": (".caffemodel.h5", ".solverstate.h5"),
}


def solver_in(directory, snapshot_format, prefix_dir=None):
    prefix = (prefix_dir or directory) / "snap"
    text = (
        f"base_lr: 0.1\nlr_policy: 'fixed'\nmomentum: 0.9\nsnapshot: 3\nmax_iter: 6\n"
        f"snapshot_prefix: '{prefix}'\nsnapshot_format: {snapshot_format}\n"
    )
    return make_solver(directory, text)


def assert_previous_snapshot_loads(solver, directory, snapshot_format, weights_at_3):
    """The iteration-3 files are intact: a fresh solver resumes from them exactly."""
    state_ext = FORMATS[snapshot_format][1]
    fresh = solver_in(directory / "fresh", snapshot_format)
    fresh.restore(str(solver.param.snapshot_prefix) + f"_iter_3{state_ext}")
    assert fresh.iter == 3
    for got, want in zip(weights(fresh.net), weights_at_3):
        np.testing.assert_array_equal(got, want)


def temp_files(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


# ----- ENOSPC injected (no root needed) ------------------------------------------------------
def _h5_disk_full(*args, **kwargs):
    # What h5py raises on a full disk: errno 28 and a long HDF5 report as the text.
    raise OSError(28, "Can't synchronously write data (file write failed: errno = 28, ...)")


def _fsync_disk_full(fd):
    raise OSError(28, "No space left on device")


@pytest.mark.parametrize("snapshot_format", FORMATS)
@pytest.mark.parametrize("where", ["while writing", "at fsync"])
def test_disk_full_is_one_clear_error_and_keeps_the_previous_snapshot(
    tmp_path, monkeypatch, snapshot_format, where
):
    solver = solver_in(tmp_path, snapshot_format)
    solver.step(3)  # writes the iteration-3 snapshot
    weights_at_3 = weights(solver.net)
    model_ext, state_ext = FORMATS[snapshot_format]
    if where == "at fsync":
        monkeypatch.setattr(os, "fsync", _fsync_disk_full)
    elif snapshot_format == "HDF5":
        monkeypatch.setattr(h5py.Group, "create_dataset", _h5_disk_full)
    else:
        real_open = os.fdopen

        class _FullFile:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def write(self, data):
                raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fdopen", lambda fd, mode: _FullFile(real_open(fd, mode)))
    with pytest.raises(WeightsError) as error:
        solver.step(3)
    model = tmp_path / f"snap_iter_6{model_ext}"
    assert str(error.value) == (
        f"Snapshot at iteration 6 failed: Could not write file {model}: No space left on "
        f"device (the disk is full); the last snapshot, {tmp_path}/snap_iter_3{state_ext}, "
        "is kept"
    )
    monkeypatch.undo()
    assert temp_files(tmp_path) == []
    assert not model.exists()
    assert_previous_snapshot_loads(solver, tmp_path, snapshot_format, weights_at_3)


# ----- a real full filesystem (root: a 256 KiB tmpfs) -------------------------------------------
@contextlib.contextmanager
def small_tmpfs(path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for a real full disk needs root")
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory):
    """Write a filler file until the filesystem is full."""
    with open(directory / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)


@pytest.mark.parametrize("snapshot_format", FORMATS)
def test_a_real_full_disk(tmp_path, snapshot_format):
    with small_tmpfs(tmp_path / "disk") as disk:
        solver = solver_in(tmp_path, snapshot_format, prefix_dir=disk)
        solver.step(3)
        weights_at_3 = weights(solver.net)
        fill(disk)
        with pytest.raises(WeightsError) as error:
            solver.step(3)
        message = str(error.value)
        assert message.startswith(
            f"Snapshot at iteration 6 failed: Could not write file {disk}/snap_iter_6"
        )
        assert ": No space left on device (the disk is full); the last snapshot, " in message
        assert "\n" not in message
        assert temp_files(disk) == []
        assert_previous_snapshot_loads(solver, tmp_path, snapshot_format, weights_at_3)


# ----- temporary files a killed run left behind -------------------------------------------------
def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temporary_files_are_removed_or_reported(tmp_path):
    host = temp_name("x").split(".")[1]
    names = {
        "dead": f"snap_iter_3.caffemodel.h5.{host}.{dead_pid()}.0123abcd.tmp",
        "dead_state": f"snap_iter_3.solverstate.{host}.{dead_pid()}.0123abcd.tmp",
        "alive": f"snap_iter_6.solverstate.h5.{host}.{os.getpid()}.0123abcd.tmp",
        "other_host": "snap_iter_6.caffemodel.elsewhere.12345.0123abcd.tmp",
        "legacy": "snap_iter_6.caffemodel.h5.tmp",
        # Not ours: another prefix, or not a snapshot name.
        "other_prefix": f"other_iter_3.caffemodel.{host}.{dead_pid()}.0123abcd.tmp",
        "unrelated": "notes.tmp",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"partial")
    with recorded_log() as log:
        solver_in(tmp_path, "HDF5")
    left = set(os.listdir(tmp_path))
    assert names["dead"] not in left and names["dead_state"] not in left
    for kept in ("alive", "other_host", "legacy", "other_prefix", "unrelated"):
        assert names[kept] in left, kept
    removed = [m for m in log if m.startswith("Removed ")]
    assert len(removed) == 2 and all("an unfinished snapshot file of process" in m for m in removed)
    reported = [m for m in log if "looks like an unfinished snapshot file" in m]
    assert len(reported) == 3
    assert any(names["legacy"] in m and "written by an older run" in m for m in reported)
    assert any("process 12345 on elsewhere" in m for m in reported)
    assert not any(names["other_prefix"] in m or "notes.tmp" in m for m in log)
