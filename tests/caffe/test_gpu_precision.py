"""set_mode_gpu() keeps CUDA float32 exact (no TF32) unless CAFFE_ALLOW_TF32 asks for it.

The flags are plain process settings, so this runs without a GPU."""

from __future__ import annotations

import pytest
import torch

import caffe


@pytest.fixture
def restore_tf32_flags():
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize(
    "value,allowed", [(None, False), ("0", False), ("1", True), ("true", True), ("no", False)]
)
def test_set_mode_gpu_chooses_tf32_from_the_environment(
    monkeypatch, restore_tf32_flags, value, allowed
):
    torch.backends.cudnn.allow_tf32 = not allowed
    torch.backends.cuda.matmul.allow_tf32 = not allowed
    if value is None:
        monkeypatch.delenv("CAFFE_ALLOW_TF32", raising=False)
    else:
        monkeypatch.setenv("CAFFE_ALLOW_TF32", value)
    caffe.set_mode_gpu()
    assert torch.backends.cudnn.allow_tf32 is allowed
    assert torch.backends.cuda.matmul.allow_tf32 is allowed
