"""poseidon.torch on CUDA: two workers on device 0 (gradients staged through pinned host
buffers on a side stream, SFB rebuilt on the device) end with the parameters of one CPU
process on the global batch. TF32 is off (NVIDIA_TF32_OVERRIDE=0), so what is left is
float32 summation order. Skipped where torch sees no CUDA device; a GPU session runs it
(bench/gpu_session.sh)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.poseidon.torch.jobs import run_reference, run_torchrun_job

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CASES = ["sfb", "ps", "auto", "accumulate", "unused", "tied", "batchnorm", "attention"]


def test_cuda_workers_equal_one_cpu_process(tmp_path):
    reference = run_reference(tmp_path / "reference", CASES, 4, emulated_workers=2)
    results, _ = run_torchrun_job(tmp_path / "job", CASES, 2, 4, DEVICE="cuda",
                                  NVIDIA_TF32_OVERRIDE="0")  # fmt: skip
    for case in CASES:
        for name, expected in reference[case].items():
            np.testing.assert_allclose(results[case][0][name], expected, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{case}: {name}")  # fmt: skip
            if not (case == "batchnorm" and "running" in name):
                np.testing.assert_array_equal(results[case][1][name], results[case][0][name])
