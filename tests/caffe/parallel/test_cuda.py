"""The GPU path of caffe/parallel/ (Note [GPU path] in poseidon/sync/staging.py): gradients
staged through pinned host buffers on a side stream, SFB rebuilt on the device.

Two workers on CUDA device 0 and two shards, every sync mode and a forced all-SFB plan:
20 iterations give the weights of one CPU process on the global batch, and both workers
hold bit-identical weights. TF32 is switched off (NVIDIA_TF32_OVERRIDE=0) so the GPU
computes in float32 like Caffe; what is left is float32 summation order (rtol 1e-3).
Skipped where torch sees no CUDA device; CI has none, a GPU session runs it.
"""

from __future__ import annotations

import pytest
import torch

from tests.caffe.parallel.job import reference_weights, run_job
from tests.caffe.parallel.test_equivalence import ITERS, MODES, assert_matches

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("sync,scheme", MODES)
def test_cuda_workers_equal_one_cpu_process(tmp_path, sync, scheme):
    ranks, _ = run_job(str(tmp_path), 2, 2, sync, scheme, iters=ITERS, mode="GPU",
                       env={"NVIDIA_TF32_OVERRIDE": "0"})  # fmt: skip
    expected = reference_weights(str(tmp_path), 2, ITERS)
    assert_matches(ranks, expected, rtol=1e-3)
