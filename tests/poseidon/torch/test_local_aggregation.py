"""poseidon.torch with several workers per machine (POSEIDON_WORKERS_PER_HOST=2): 2 machines
× 2 processes, started as torchrun starts them, end with the parameters of one process on the
global batch for every feature of tests/poseidon/torch/models.py, every worker the same."""

from __future__ import annotations

from pathlib import Path

from tests.poseidon.torch.jobs import run_reference, run_torchrun_job
from tests.poseidon.torch.models import CASES
from tests.poseidon.torch.test_ddp import STEPS, assert_like_one_process

# A machine's gather slots are sized by the plan: accumulation needs its hint there.
NEEDS_ONE_WORKER_PER_MACHINE = {"accumulate-unhinted", "changing-batch"}


def test_two_machines_of_two_end_as_one_process(tmp_path: Path) -> None:
    cases = sorted(set(CASES) - NEEDS_ONE_WORKER_PER_MACHINE)
    reference = run_reference(tmp_path / "reference", cases, STEPS, emulated_workers=4)
    results, _ = run_torchrun_job(tmp_path / "job", cases, 4, STEPS,
                                  POSEIDON_WORKERS_PER_HOST="2")  # fmt: skip
    for case in cases:
        assert_like_one_process(case, reference[case], results[case], "2 machines x 2")
