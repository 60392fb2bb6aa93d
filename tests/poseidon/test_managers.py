"""Jobs that a cluster manager starts (poseidon/sync/managers.py, docs/deploy.md): where the
tasks meet when the manager names no address, and real runs under Open MPI's `mpirun` —
`caffe train` (the Caffe path, POSEIDON_ROLE=worker) ends with one process's weights on the
global batch, and a poseidon.torch script with torchrun's; each process takes its rank from
MPI's variables and the job hosts itself. (SLURM: tests/poseidon/test_slurm.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from poseidon.sync.managers import apply_meeting_point, first_host, meeting_point

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "hostlist,first",
    [("node07", "node07"), ("a,b,c", "a"), ("node[01-04,07]", "node01"),
     ("gpu[3,5-6],cpu1", "gpu3"), ("rack1-n[10-12]-ib", "rack1-n10-ib")],
)  # fmt: skip
def test_the_first_host_of_a_slurm_hostlist(hostlist, first):
    assert first_host(hostlist) == first


def test_slurm_names_the_first_node_and_a_port_of_the_job_and_step():
    env = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "4711",
           "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[3-4]",
           "SLURM_JOB_NODELIST": "n[1-4]"}  # fmt: skip
    point = meeting_point(env)
    assert point["MASTER_ADDR"] == "n3"  # the step's first node runs task 0
    port = int(point["MASTER_PORT"])
    assert port >= 20000 and port + 2 < 32768  # below the ephemeral ports
    other_step = meeting_point({**env, "SLURM_STEP_ID": "1"})["MASTER_PORT"]
    other_job = meeting_point({**env, "SLURM_JOB_ID": "4712"})["MASTER_PORT"]
    assert len({point["MASTER_PORT"], other_step, other_job}) == 3
    # What the user set stays; nothing is derived without a manager.
    assert meeting_point({**env, "MASTER_ADDR": "head", "MASTER_PORT": "1234"}) == {}
    assert meeting_point({"RANK": "0", "WORLD_SIZE": "2"}) == {}


def test_open_mpi_on_one_machine_meets_on_loopback_and_across_machines_is_not_guessed():
    one = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
           "OMPI_MCA_ess_base_jobid": "1614741505"}  # fmt: skip
    assert meeting_point(one)["MASTER_ADDR"] == "127.0.0.1"
    assert meeting_point({**one, "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}) == {}
    env = dict(one)
    assert apply_meeting_point(env) == meeting_point(one) and env["MASTER_ADDR"] == "127.0.0.1"


def test_open_mpi_across_machines_without_an_address_says_how(monkeypatch):
    from poseidon.sync.job import JoinError, job_config

    for name in [n for n in os.environ if n.startswith(("POSEIDON_", "MASTER_", "SLURM_"))]:
        monkeypatch.delenv(name)
    for name, value in {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
                        "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    with pytest.raises(JoinError, match=r"worker 1: a job of 4 workers \(OMPI_COMM_WORLD_SIZE=4\)"
                       r".*mpirun -x MASTER_ADDR=<the first host>"):  # fmt: skip
        job_config()


# ----- real runs under Open MPI ----------------------------------------------------------------
MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(
    MPIRUN is None, reason="Open MPI's mpirun not installed (apt-get install openmpi-bin)"
)


def mpirun(count: int, command: list[str], cwd: Path, **env: str) -> str:
    """`mpirun -n count command` on this machine (as root too), every process's output."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("POSEIDON_", "MASTER_", "OMPI_", "PMIX_", "SLURM_"))
             and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}  # fmt: skip
    clean.update({"OMP_NUM_THREADS": "1", "GLOG_minloglevel": "1", "PYTHONPATH": str(REPO),
                  "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                  "POSEIDON_TIMEOUT_MS": "30000", **env})  # fmt: skip
    done = subprocess.run([str(MPIRUN), "-n", str(count), "--oversubscribe", *command], cwd=cwd,
                          env=clean, capture_output=True, text=True, timeout=180)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    return output


@needs_mpirun
@pytest.mark.parametrize(
    "workers, extra_env, printed",
    [
        (3, {}, "HybComm plan"),
        # POSEIDON_WORKERS_PER_HOST=auto: Open MPI's local size, 4 workers on this one machine,
        # whose sum goes through its leader alone (docs/communication.md §5).
        (4, {"POSEIDON_WORKERS_PER_HOST": "auto"}, "P1=4 workers on 1 machine of 4"),
    ],
)  # fmt: skip
def test_caffe_train_under_mpirun_equals_one_process_on_the_global_batch(
    tmp_path, workers, extra_env, printed
):
    from tests.caffe.parallel.job import BATCH, reference_weights, write_solver

    iters = 12
    prefix = tmp_path / "mpi"
    snapshots = f'display: 0\nsnapshot: 0\nsnapshot_prefix: "{prefix}"'
    solver = write_solver(str(tmp_path), BATCH, iters, name="mpi", snapshots=snapshots)
    caffe = [sys.executable, "-m", "caffe.tools.cli", "train", "--solver", solver]
    output = mpirun(workers, caffe, tmp_path, POSEIDON_ROLE="worker", GLOG_minloglevel="0",
                    **extra_env)  # fmt: skip
    assert printed in output, output[-3000:]
    trained = caffe_weights(f"{prefix}_iter_{iters}.caffemodel")  # rank 0 snapshots
    assert_global_batch(trained, reference_weights(str(tmp_path), workers, iters))


# Shared with test_slurm.py: what a job under a manager must end with.
def caffe_weights(path: str) -> dict[str, np.ndarray]:
    """A .caffemodel's blobs, flat, by "layer/index"."""
    from caffe.formats.weights_io import read_caffemodel

    layers = read_caffemodel(path).layers
    return {f"{layer.name}/{i}": np.array(blob.data, np.float32).reshape(-1)
            for layer in layers for i, blob in enumerate(layer.blobs)}  # fmt: skip


def assert_global_batch(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """`got` (caffe_weights) is one process's `expected` on the global batch (rtol 1e-4)."""
    assert set(got) == set(expected)
    for name, value in expected.items():
        scale = max(float(np.abs(value).max()), 1e-6)
        np.testing.assert_allclose(got[name], value.reshape(-1), rtol=1e-4, atol=1e-4 * scale,
                                   err_msg=name)  # fmt: skip


def assert_torch_cases(out: Path, expected: dict, workers: int) -> None:
    """Every rank's saved parameters of every case equal the one-process reference."""
    from tests.poseidon.torch.jobs import load

    for case, params in expected.items():
        for rank in range(workers):
            got = load(out, case, rank)
            for name, value in params.items():
                np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{case} {name} rank {rank}")  # fmt: skip


@needs_mpirun
def test_a_poseidon_torch_script_under_mpirun_equals_one_process(tmp_path):
    from tests.poseidon.torch.jobs import WORKER, run_reference

    cases, steps = ["sfb", "ps"], 6
    expected = run_reference(tmp_path / "ref", cases, steps)
    out = tmp_path / "mpi"
    out.mkdir()
    mpirun(2, [*WORKER, str(out), str(steps), *cases], REPO)
    assert_torch_cases(out, expected, 2)


def demo_accuracy(output: str) -> float:
    """The last test accuracy rank 0 logged."""
    found = re.findall(r"Test net output #\d+: accuracy = ([0-9.]+)", output)
    assert found, output[-3000:]
    return float(found[-1])


@needs_mpirun
def test_the_demo_job_under_mpirun(tmp_path):
    # README's demo (LeNet on the digits), prepared for 4 workers and started by mpirun:
    # `POSEIDON_ROLE=worker mpirun -n 4 --oversubscribe caffe train --solver ...`.
    prepared = subprocess.run([sys.executable, "-m", "poseidon.cli", "demo", "--prepare-only",
                               "-n", "4", "--dir", str(tmp_path)], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    caffe = [sys.executable, "-m", "caffe.tools.cli", "train", "--solver",
             "lenet_digits_solver.prototxt"]  # fmt: skip
    output = mpirun(4, caffe, tmp_path, POSEIDON_ROLE="worker", GLOG_minloglevel="0")
    assert "initial weights of rank 0 broadcast to 4 workers" in output
    assert demo_accuracy(output) >= 0.97
