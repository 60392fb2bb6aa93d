"""poseidon.torch with several workers per machine (POSEIDON_WORKERS_PER_HOST=2): 2 machines
× 2 processes, started as torchrun starts them, end with the parameters of one process on the
global batch for every feature of tests/poseidon/torch/models.py, every worker the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.poseidon.torch.jobs import run_reference, run_torchrun_job
from tests.poseidon.torch.models import CASES
from tests.poseidon.torch.test_ddp import LOW_PRECISION_TOLERANCE, STEPS, TOLERANCE


def test_two_machines_of_two_end_as_one_process(tmp_path: Path) -> None:
    cases = sorted(CASES)
    reference = run_reference(tmp_path / "reference", cases, STEPS, emulated_workers=4)
    results, _ = run_torchrun_job(tmp_path / "job", cases, 4, STEPS,
                                  POSEIDON_WORKERS_PER_HOST="2")  # fmt: skip
    for case in cases:
        ranks = results[case]
        tolerance = LOW_PRECISION_TOLERANCE.get(case, TOLERANCE)
        for name, expected in reference[case].items():
            np.testing.assert_allclose(ranks[0][name], expected, rtol=0, atol=tolerance,
                                       err_msg=f"{case}: {name}")  # fmt: skip
        buffers = {name for name, _ in CASES[case].build().named_buffers()}
        for rank, params in enumerate(ranks[1:], start=1):
            for name, value in params.items():
                if name in buffers and CASES[case].batch_stats:
                    continue  # each worker's last forward updated them with its own batch
                np.testing.assert_array_equal(value, ranks[0][name],
                                              err_msg=f"{case}: rank {rank}, {name}")  # fmt: skip
