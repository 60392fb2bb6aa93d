"""caffe.NCCL: pycaffe's multi-process flow (BVLC's python/train.py) over Poseidon.

P processes at batch K, joined by a uid from caffe.NCCL.new_uid(), train like one process
at batch P·K (the standard of test_equivalence.py): the same data layout, the same solver
and the same 1e-4 tolerance, and every process holds the same bytes. BVLC's own
python/train.py, run unchanged, is checked the same way when its source is on this machine
(BVLC_CAFFE_ROOT, default /work/bvlc); CI has none, so the flow is also run through
nccl_flow.py, which makes train.py's calls in train.py's order.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import caffe
from caffe import parallel
from caffe.errors import CaffeError, DistributedError
from caffe.formats.weights_io import read_caffemodel
from tests.caffe.parallel.job import BATCH, REPO, reference_weights, write_solver
from tests.caffe.parallel.test_equivalence import assert_matches

FLOW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl_flow.py")
BVLC_TRAIN_PY = os.path.join(os.environ.get("BVLC_CAFFE_ROOT", "/work/bvlc"), "python", "train.py")
ITERS = 10


def _env(**extra: str) -> dict[str, str]:
    """Our caffe and poseidon first on the path (never BVLC's python/caffe)."""
    path = [REPO, os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p),
            "GLOG_minloglevel": "1", "OMP_NUM_THREADS": "1", "POSEIDON_TIMEOUT_MS": "20000",
            **extra}  # fmt: skip


def _run(command: list[str], cwd: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=_env(**env), capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def _flow(tmp_path, count: int, extra: str = "", *options: str) -> list[dict[str, np.ndarray]]:
    solver = write_solver(str(tmp_path), BATCH, ITERS, extra, name=f"nccl_{count}")
    result = _run([sys.executable, FLOW, solver, str(ITERS), str(tmp_path), str(count),
                   *options], str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-6000:]
    ranks = []
    for rank in range(count):
        with np.load(tmp_path / f"rank{rank}.npz") as data:
            ranks.append(dict(data))
    return ranks


@pytest.mark.parametrize(
    "count,extra,start",
    [
        (2, "", "spawn"),  # layer_wise_reduce (the default): each layer as backward ends
        (3, "layer_wise_reduce: false", "fork"),  # everything at on_gradients_ready
        (2, "iter_size: 2", "spawn"),  # a layer goes after its last pass only
    ],
)
def test_pycaffe_flow_equals_one_process_on_the_global_batch(tmp_path, count, extra, start):
    ranks = _flow(tmp_path, count, extra, "--start", start)
    assert_matches(ranks, reference_weights(str(tmp_path), count, ITERS, extra))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_processes_equal_one_cpu_process(tmp_path):
    """Two processes on CUDA device 0 (the staging of poseidon/sync/staging.py); float32
    summation order on the device is what is left (rtol 1e-3, as test_cuda.py)."""
    ranks = _flow(tmp_path, 2, "", "--gpu")
    assert_matches(ranks, reference_weights(str(tmp_path), 2, ITERS), rtol=1e-3)


def test_bvlc_train_py_runs_unchanged(tmp_path):
    """BVLC's python/train.py --gpus 0 1 on a machine without a GPU (or with
    CUDA_VISIBLE_DEVICES empty): two CPU processes; rank 0's snapshot at max_iter is the
    single process's weights on the global batch."""
    if not os.path.isfile(BVLC_TRAIN_PY):
        pytest.skip(f"BVLC's python/train.py not at {BVLC_TRAIN_PY} (set BVLC_CAFFE_ROOT)")
    # A scratch copy: a script's own directory comes first on sys.path, and BVLC's
    # python/caffe beside the original must not be the caffe it imports.
    script = tmp_path / "train.py"
    shutil.copyfile(BVLC_TRAIN_PY, script)
    prefix = tmp_path / "snap"
    snapshots = f'display: 2\nsnapshot: {ITERS}\nsnapshot_prefix: "{prefix}"'
    solver = write_solver(str(tmp_path), BATCH, ITERS, snapshots=snapshots)
    result = _run([sys.executable, str(script), "--solver", solver, "--gpus", "0", "1"],
                  str(tmp_path), CUDA_VISIBLE_DEVICES="", GLOG_minloglevel="0")  # fmt: skip
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:]
    assert "Using devices [0, 1]" in log and "broadcast to 2 workers" in log, log[-6000:]
    weights = read_caffemodel(f"{prefix}_iter_{ITERS}.caffemodel")
    expected = reference_weights(str(tmp_path), 2, ITERS)
    got = {}
    for layer in weights.layers:
        for i, blob in enumerate(layer.blobs):
            name = f"{layer.name}/{i}"
            got[name] = np.asarray(blob.data, np.float32).reshape(expected[name].shape)
    assert_matches([got], expected)


@pytest.mark.parametrize("failing", [0, 1])  # rank 0 also runs the coordinator
def test_a_process_failing_mid_iteration_stops_the_others_at_once(tmp_path, failing):
    solver = write_solver(str(tmp_path), BATCH, ITERS, name="nccl_fail")
    started = time.monotonic()
    result = _run([sys.executable, FLOW, solver, str(ITERS), str(tmp_path), "2",
                   "--fail-rank", str(failing), "--fail-iter", "3"], str(tmp_path))  # fmt: skip
    elapsed = time.monotonic() - started
    log = result.stdout + result.stderr
    assert result.returncode != 0, log[-6000:]
    assert "rank 0 exit status 1" in log and "rank 1 exit status 1" in log, log[-6000:]
    # The other process's error names the process at the origin and its exception. The
    # round it was in is iteration 3's, or iteration 2's when WFBP left one of that
    # iteration's layers still to finish before its forward (CI saw both).
    origin = (rf"DistributedError: .*iteration [23] failed: worker {failing} .*"
              rf"worker {failing} failed: injected failure at iteration 3")  # fmt: skip
    assert re.search(origin, log), log[-6000:]
    assert elapsed < 15, f"took {elapsed:.1f}s (POSEIDON_TIMEOUT_MS is 20s): {log[-3000:]}"


def test_a_uid_that_is_not_ours_is_refused():
    with pytest.raises(CaffeError, match=r"not a uid of caffe.NCCL.new_uid\(\) \(128 bytes"):
        parallel.join_uid(None, b"\x01" * 128, 0, 2)
    with pytest.raises(CaffeError, match="solver rank 2 with solver count 2"):
        parallel.join_uid(None, parallel.new_uid(), 2, 2)


def test_new_uid_is_bytes_and_fresh():
    """pycaffe's own test_nccl: with has_nccl(), new_uid() is bytes."""
    assert caffe.has_nccl()
    first, second = caffe.NCCL.new_uid(), caffe.NCCL.new_uid()
    assert isinstance(first, bytes) and first != second


def test_a_peer_that_never_joins_is_named(monkeypatch):
    for name, value in (("TIMEOUT_MS", "1000"), ("HEARTBEAT_TIMEOUT_MS", "1000"),
                        ("HEARTBEAT_INTERVAL_MS", "200")):  # fmt: skip
        monkeypatch.setenv(f"POSEIDON_{name}", value)
    uid = parallel.new_uid()
    address = uid.split()[1].decode()
    with pytest.raises(DistributedError, match=r"rank 0 of 2: .*never registered: worker 1"):
        parallel.join_uid(None, uid, 0, 2)
    with pytest.raises(DistributedError, match=rf"rank 1 of 2: .*{address}.*rank 0 starts it"):
        parallel.join_uid(None, uid, 1, 2)
