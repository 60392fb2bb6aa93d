"""Jobs under a real SLURM (Debian's slurm-wlm; a throwaway one-machine cluster,
tests/poseidon/slurm_cluster.py): `srun caffe train` with POSEIDON_ROLE=worker and an
`sbatch` script end with one process's weights on the global batch, so does a poseidon.torch
script under `srun`, each task taking its rank from SLURM and the job meeting where SLURM's
variables say (poseidon/sync/managers.py); `scancel` stops every task at one agreed
iteration with a snapshot and a message, and a task killed outright ends the others within
10 s naming it. Nothing is left behind. Skipped, saying why, where SLURM cannot run."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.poseidon.slurm_cluster import SlurmCluster, why_not
from tests.poseidon.test_managers import (
    assert_global_batch,
    assert_torch_cases,
    caffe_weights,
    demo_accuracy,
)
from tests.process_tree import processes_mentioning

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(bool(why_not()), reason=why_not() or "-")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except RuntimeError as e:
        pytest.skip(str(e))
    yield cluster
    cluster.stop()


def job_env(slurm: SlurmCluster) -> dict[str, str]:
    return slurm.env(OMP_NUM_THREADS="1", GLOG_minloglevel="1", PYTHONPATH=str(REPO),
                     POSEIDON_TIMEOUT_MS="30000")  # fmt: skip


def solver_file(tmp_path: Path, name: str, iters: int) -> tuple[str, Path]:
    from tests.caffe.parallel.job import BATCH, write_solver

    prefix = tmp_path / name
    snapshots = f'display: 0\nsnapshot: 0\nsnapshot_prefix: "{prefix}"'
    return write_solver(str(tmp_path), BATCH, iters, name=name, snapshots=snapshots), prefix


def caffe_train(solver: str) -> list[str]:
    return [sys.executable, "-m", "caffe.tools.cli", "train", "--solver", solver]


def run(command: list[str], env: dict[str, str], cwd: Path, timeout_s: float = 180) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout_s)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    return output


def test_srun_caffe_train_equals_one_process_on_the_global_batch(slurm, tmp_path):
    from tests.caffe.parallel.job import reference_weights

    solver, prefix = solver_file(tmp_path, "srun", 20)
    env = {**job_env(slurm), "POSEIDON_ROLE": "worker"}
    run(["srun", "-n", "3", *caffe_train(solver)], env, tmp_path)
    assert_global_batch(caffe_weights(f"{prefix}_iter_20.caffemodel"),
                        reference_weights(str(tmp_path), 3, 20))  # fmt: skip


def test_an_sbatch_script_runs_the_same_job(slurm, tmp_path):
    from tests.caffe.parallel.job import reference_weights

    solver, prefix = solver_file(tmp_path, "batch", 20)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -n 2\n#SBATCH -o " + str(tmp_path / "job.out") + "\n"
                      "export POSEIDON_ROLE=worker\n"
                      f"srun {' '.join(caffe_train(solver))}\n")  # fmt: skip
    run(["sbatch", "--wait", str(script)], job_env(slurm), tmp_path)
    assert_global_batch(caffe_weights(f"{prefix}_iter_20.caffemodel"),
                        reference_weights(str(tmp_path), 2, 20))  # fmt: skip


def test_a_poseidon_torch_script_under_srun_equals_one_process(slurm, tmp_path):
    from tests.poseidon.torch.jobs import WORKER, run_reference

    cases, steps = ["sfb", "ps"], 6
    expected = run_reference(tmp_path / "ref", cases, steps)
    out = tmp_path / "srun"
    out.mkdir()
    run(["srun", "-n", "2", *WORKER, str(out), str(steps), *cases], job_env(slurm), REPO)
    assert_torch_cases(out, expected, 2)


def test_the_demo_job_under_srun(slurm, tmp_path):
    prepared = subprocess.run([sys.executable, "-m", "poseidon.cli", "demo", "--prepare-only",
                               "-n", "4", "--dir", str(tmp_path)], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    env = {**job_env(slurm), "POSEIDON_ROLE": "worker", "GLOG_minloglevel": "0"}
    output = run(["srun", "-n", "4", *caffe_train("lenet_digits_solver.prototxt")], env,
                 tmp_path)  # fmt: skip
    assert "initial weights of rank 0 broadcast to 4 workers" in output
    assert demo_accuracy(output) >= 0.97


def start_long_job(slurm: SlurmCluster, tmp_path: Path) -> tuple[str, str, Path]:
    """A 2-task sbatch job that trains for a long time; (job id, solver, its output file),
    once both tasks are training."""
    solver, _ = solver_file(tmp_path, "long", 10**6)
    out = tmp_path / "long.out"
    script = tmp_path / "long.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -n 2\n#SBATCH -o {out}\nexport POSEIDON_ROLE=worker "
                      f"GLOG_minloglevel=0\nsrun {' '.join(caffe_train(solver))}\n")  # fmt: skip
    submitted = run(["sbatch", "--parsable", str(script)], job_env(slurm), tmp_path)
    job = submitted.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = out.read_text() if out.exists() else ""
        if text.count("Iteration") >= 2 or "Restarting data prefetching" in text:
            return job, solver, out
        time.sleep(0.3)
    raise AssertionError(f"job {job} did not start training:\n{out.read_text()[-3000:]}")


def wait_ended(slurm: SlurmCluster, job: str, solver: str, within_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within_s + 20:
        queued = subprocess.run(["squeue", "-h", "-j", job], env=slurm.env(),
                                capture_output=True, text=True).stdout.strip()  # fmt: skip
        if not queued and not processes_mentioning(solver):
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"job {job} still there: {processes_mentioning(solver)}")


def test_scancel_stops_every_task_at_one_iteration_with_a_snapshot(slurm, tmp_path):
    job, solver, out = start_long_job(slurm, tmp_path)
    subprocess.run(["scancel", job], env=slurm.env(), check=True)
    elapsed = wait_ended(slurm, job, solver, 10)
    print(f"scancel: every process gone {elapsed:.2f} s later")  # docs/distributed.md (-s)
    assert elapsed < 10
    text = out.read_text()
    stop = re.search(r"every worker will stop at iteration (\d+)", text)
    assert stop and "Caught SIGTERM" in text, text[-3000:]
    assert (tmp_path / f"long_iter_{stop.group(1)}.caffemodel").exists()


def test_a_task_killed_outright_ends_the_job_naming_it(slurm, tmp_path):
    job, solver, out = start_long_job(slurm, tmp_path)
    tasks = sorted(pid for pid, line in processes_mentioning(solver).items()
                   if "caffe.tools.cli" in line and not line.startswith("srun"))  # fmt: skip
    assert len(tasks) == 2, processes_mentioning(solver)
    subprocess.run(["kill", "-9", str(tasks[-1])], check=True)
    elapsed = wait_ended(slurm, job, solver, 10)
    print(f"kill -9 of a task: every process gone {elapsed:.2f} s later")
    assert elapsed < 10
    text = out.read_text()
    # The task's worker, or its shard (colocated in the task), whichever a peer missed first.
    assert re.search(r"(worker|server) \d \(\S+\) is gone", text), text[-3000:]
