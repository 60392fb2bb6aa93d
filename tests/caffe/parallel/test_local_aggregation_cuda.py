"""The local stage on CUDA (python/poseidon/sync/local.py: NCCL groups inside each machine):
2 machines × 2 workers in GPU mode train like one CPU process on the global batch in every
sync mode, as tests/caffe/parallel/test_cuda.py checks the flat layout. Each worker takes
the GPU of its local rank (as `caffe train` does); on a machine with one GPU both workers of
a machine share it. Skipped where torch sees no CUDA device; CI has none, a GPU session runs
it (bench/gpu_session.sh).
"""

from __future__ import annotations

import pytest
import torch

from tests.caffe.parallel.job import reference_weights, run_job
from tests.caffe.parallel.test_equivalence import ITERS, MODES, assert_matches

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("sync,scheme", MODES)
def test_cuda_two_machines_of_two_equal_one_cpu_process(tmp_path, sync, scheme):
    ranks, _ = run_job(str(tmp_path), 4, 2, sync, scheme, iters=ITERS, mode="GPU",
                       env={"NVIDIA_TF32_OVERRIDE": "0", "WORKER_GPU_OF_LOCAL_RANK": "1"},
                       extra_args=["--workers-per-host", "2"])  # fmt: skip
    expected = reference_weights(str(tmp_path), 4, ITERS)
    assert_matches(ranks, expected, rtol=1e-3)
