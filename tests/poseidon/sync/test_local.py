"""poseidon/sync/local.py's choice of backend for a machine's local stage: NCCL between
distinct GPUs, gloo on CPU and where the machine's workers share a GPU (NCCL refuses two
ranks on one device; seen on an H200, docs/benchmarks.md). Checked without a GPU: the
device identities are what the workers write into the machine's store."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from poseidon.sync import local
from poseidon.sync.local import LocalGroup, LocalStageError


def chooser(tmp_path, identities: list[str], monkeypatch) -> str:
    """Local rank 0's choice when the machine's workers report `identities`."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    for rank, identity in enumerate(identities[1:], start=1):
        store.set(f"device/{rank}", identity)
    monkeypatch.setattr(local, "device_identity", lambda device: identities[0])
    group = object.__new__(LocalGroup)
    group.local_rank, group.size, group.name = 0, len(identities), "machine 0 (workers 0..1)"
    return group._backend(store, torch.device("cuda", 0))


def test_cpu_workers_use_gloo(tmp_path):
    group = object.__new__(LocalGroup)
    assert group._backend(None, torch.device("cpu")) == "gloo"


def test_workers_sharing_a_gpu_use_gloo(tmp_path, monkeypatch, caplog):
    with caplog.at_level("WARNING", logger="poseidon.local"):
        assert chooser(tmp_path, ["GPU-a", "GPU-a"], monkeypatch) == "gloo"
    assert "share a GPU (GPU-a, GPU-a)" in caplog.text


def test_distinct_gpus_use_nccl(tmp_path, monkeypatch):
    if dist.is_nccl_available():
        assert chooser(tmp_path, ["GPU-a", "GPU-b"], monkeypatch) == "nccl"
    else:  # a CPU build of torch: the error names the machine and what is missing
        with pytest.raises(LocalStageError, match=r"machine 0 .*needs NCCL"):
            chooser(tmp_path, ["GPU-a", "GPU-b"], monkeypatch)
