"""poseidon.torch.DistributedDataParallel: P = 2 and 3 processes on batch B/P each end with
the parameters of one process on batch B, for every feature (tests/poseidon/torch/models.py),
and every worker holds the same ones; `poseidon launch` runs the same script unchanged; a
killed worker ends the others within 10 s naming it; bad settings are clear errors."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.poseidon.torch.jobs import (
    REPO,
    WORKER,
    Params,
    env_for,
    free_port_block,
    load,
    run_reference,
    run_torchrun_job,
    torchrun_env,
)
from tests.poseidon.torch.models import CASES

STEPS = 4
# float32 sums in another order (the mean over workers, SFB's one GEMM over all factors).
TOLERANCE = 2e-6
# Autocast to 16 bits computes each worker's smaller batch with other roundings.
LOW_PRECISION_TOLERANCE = {"bf16": 5e-4, "grad-scaler": 1e-4}


@functools.cache
def job(workers: int, root: str) -> tuple[dict[str, Params], dict[str, list[Params]], list[str]]:
    """Every case as one job of `workers` processes (one process per rank runs them all, one
    job after another), and the one-process reference; computed once per worker count.
    Returns the reference's parameters, each rank's, and each rank's output."""
    out = Path(root) / f"p{workers}"
    cases = sorted(CASES)
    reference = run_reference(out / "reference", cases, STEPS, emulated_workers=workers)
    return (reference, *run_torchrun_job(out / "job", cases, workers, STEPS))


@pytest.fixture(scope="module")
def job_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("poseidon_torch"))


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_workers_end_with_the_parameters_of_one_process(job_root, workers, case):
    reference, results, _ = job(workers, job_root)
    assert_like_one_process(case, reference[case], results[case], f"{workers} workers")


def assert_like_one_process(case: str, expected: Params, ranks: list[Params], label: str) -> None:
    """Rank 0 ends with the one-process parameters `expected` of `case` (within the case's
    tolerance), and every rank with rank 0's, bit for bit (but batch statistics)."""
    tolerance = LOW_PRECISION_TOLERANCE.get(case, TOLERANCE)
    for name, value in expected.items():
        np.testing.assert_allclose(ranks[0][name], value, rtol=0, atol=tolerance,
                                   err_msg=f"{case}, {label}: {name}")  # fmt: skip
    buffers = {name for name, _ in CASES[case].build().named_buffers()}
    for rank, params in enumerate(ranks[1:], start=1):
        for name, value in params.items():
            if name in buffers and CASES[case].batch_stats:
                continue  # each worker's last forward updated them with its own batch
            where = f"{case}, {label}: rank {rank} differs in {name}"
            np.testing.assert_array_equal(value, ranks[0][name], err_msg=where)


def test_ddp_scripts_run_unchanged_on_4_workers(tmp_path):
    # As PyTorch's DDP runs them, no hint given: no_sync() over two micro-batches, and a
    # batch that doubles after the first step then ends short; the SFB layers' factors come
    # with up to twice the rows they were planned with.
    cases = ["accumulate-unhinted", "changing-batch"]
    reference = run_reference(tmp_path / "reference", cases, STEPS, emulated_workers=4)
    results, _ = run_torchrun_job(tmp_path / "job", cases, 4, STEPS)
    for case in cases:
        assert_like_one_process(case, reference[case], results[case], "4 workers")


def test_a_model_changes_when_it_trains(job_root):
    """The equivalence above is not vacuous: training moves every parameter."""
    reference, _, _ = job(2, job_root)
    torch.manual_seed(0)
    initial = CASES["auto"].build().state_dict()
    for name, value in reference["auto"].items():
        assert np.abs(value - initial[name].numpy()).max() > 1e-3, name


def test_poseidon_plan_prints_the_plan_the_job_ran(job_root):
    """Rank 0 prints its plan when it makes it; `poseidon plan --torch` prints the same for
    the same model and input (K = 24 / 2 rows per worker)."""
    _, _, outputs = job(2, job_root)
    after = outputs[0].split("auto step 0\n", 1)[1]
    ran = after[after.index("P1=2") : after.index("\n", after.index("lossy layers:"))]
    command = [sys.executable, "-m", "poseidon.cli", "plan", "--workers", "2", "--torch",
               "tests/poseidon/torch/models.py:mlp", "--torch-input", "12,20"]  # fmt: skip
    printed = subprocess.run(command, cwd=REPO, env=env_for(), capture_output=True, text=True,
                             check=True, timeout=60).stdout.strip()  # fmt: skip
    assert printed == ran
    assert " SFB" in printed and " PS" in printed  # both schemes: "auto" is really hybrid


def test_the_timeline_shows_each_round_start_when_its_backward_ends(tmp_path):
    """WFBP is real: with sync poseidon the top layer's round starts before the backward of
    the layer below it ends; with ps-nooverlap every round starts after the whole backward."""
    run_torchrun_job(tmp_path, ["auto", "nooverlap"], 2, 3, TIMELINE_DIR=str(tmp_path))
    for case, overlaps in (("auto", True), ("nooverlap", False)):
        trace = json.loads((tmp_path / f"trace.{case}.0.json").read_text())["traceEvents"]
        last = max(e["args"]["iteration"] for e in trace if e.get("cat") == "sync")
        spans = {(e["cat"], e["name"]): e for e in trace
                 if e.get("args", {}).get("iteration") == last}  # fmt: skip
        top_sync = spans[("sync", "4")]["ts"]
        bottom_backward = spans[("compute", "backward 0")]
        bottom_end = bottom_backward["ts"] + bottom_backward["dur"]
        assert (top_sync < bottom_end) == overlaps, (case, top_sync, bottom_end)
        assert {("sync", u) in spans for u in ("0", "2", "4")} == {True}
        assert spans[("sync", "2")]["args"]["bytes_sent"] > 0


def test_a_process_group_of_the_script_carries_the_token(tmp_path):
    """A script that called torch.distributed.init_process_group: the job uses its group to
    agree on the token (no store of its own), and trains the same."""
    reference = run_reference(tmp_path / "reference", ["sfb", "ps"], STEPS)
    results, _ = run_torchrun_job(tmp_path / "job", ["sfb", "ps"], 2, STEPS,
                                  INIT_PROCESS_GROUP="1")  # fmt: skip
    for case in ("sfb", "ps"):
        for name, expected in reference[case].items():
            np.testing.assert_allclose(results[case][1][name], expected, rtol=0, atol=TOLERANCE)


def test_poseidon_launch_runs_the_same_script(tmp_path):
    out = tmp_path / "launch"
    out.mkdir()
    reference = run_reference(tmp_path / "reference", ["auto"], STEPS)["auto"]
    command = [sys.executable, "-m", "poseidon.cli", "launch", "-n", "2", "-s", "2",
               "--timeout-ms", "30000", "--", *WORKER, str(out), str(STEPS), "auto"]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=env_for(), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank in range(2):
        for name, value in load(out, "auto", rank).items():
            np.testing.assert_allclose(value, reference[name], rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("compression", ["none", "powersgd:2"])
def test_a_killed_worker_ends_the_others_within_10s_naming_it(tmp_path, compression):
    """Also in a PowerSGD round, whose Q sum waits on a continuation thread."""
    port = free_port_block()
    procs = [subprocess.Popen([*WORKER, str(tmp_path), "100000", "auto"], cwd=REPO,
                              env=torchrun_env(rank, 3, port, POSEIDON_COMPRESSION=compression),
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for rank in range(3)]  # fmt: skip
    try:
        assert procs[1].stdout is not None
        for line in procs[1].stdout:
            if "auto step 3" in line:
                break
        procs[1].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        for rank in (0, 2):
            text, _ = procs[rank].communicate(timeout=max(0.1, 10 - (time.monotonic() - killed)))
            assert procs[rank].returncode not in (0, None), text[-3000:]
            if rank == 0 and compression != "none":
                assert "PowerSGD r2" in text, text[-3000:]  # the plan rank 0 printed
            # Rank 1's process also ran shard 1: either may be the first peer found gone.
            assert re.search(r"PeerFailure: .*(worker 1 \(127\.0\.0\.1:\d+\) is gone|server 1 .*"
                             r"is gone.*\[shard 1 ran inside worker 1's process\])",
                             text), text[-3000:]  # fmt: skip
        assert time.monotonic() - killed < 10
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


# ----- bad settings: clear errors, in this process (a job of one hosts itself) ---------------
def small_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


@pytest.fixture
def no_launcher(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("POSEIDON_")]:
        monkeypatch.delenv(name)
    return monkeypatch


def test_a_job_of_one_is_plain_torch(no_launcher):
    import poseidon.torch

    torch.manual_seed(3)
    model, twin = small_model(), small_model()
    twin.load_state_dict(model.state_dict())
    net = poseidon.torch.DistributedDataParallel(model)
    try:
        x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
        for m in (net, twin):
            nn.functional.cross_entropy(m(x), y).backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-7)
        assert set(net.state_dict()) == {f"module.{k}" for k in twin.state_dict()}
    finally:
        net.close()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"sync": "allreduce"}, "sync mode 'allreduce' is not Poseidon's"),
        ({"process_group": object()}, "process_group must be None"),
        ({"device_ids": [0, 1]}, "one device per process"),
        ({"wait": "never"}, "wait='never'"),
        ({"layer_schemes": {"classifier": "sfb"}}, "names classifier: not a synchronised"),
        ({"scheme": "fastest"}, "fastest"),
    ],
)
def test_bad_arguments_are_named(no_launcher, kwargs, message):
    import poseidon.torch

    with pytest.raises((ValueError, poseidon.torch.JoinError), match=message):
        net = poseidon.torch.DistributedDataParallel(small_model(), **kwargs)
        net(torch.randn(2, 4))


@pytest.mark.parametrize(
    "env, message",
    [
        ({"WORLD_SIZE": "2", "RANK": "0"}, r"job of 2 workers \(WORLD_SIZE=2\).*MASTER_ADDR"),
        ({"POSEIDON_NUM_WORKERS": "two"}, "POSEIDON_NUM_WORKERS"),
        ({"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "127.0.0.1"}, "rank=5"),
    ],
)
def test_bad_environments_are_named(no_launcher, env, message):
    import poseidon.torch

    for name, value in env.items():
        no_launcher.setenv(name, value)
    with pytest.raises(poseidon.torch.JoinError, match=message):
        poseidon.torch.DistributedDataParallel(small_model())


def test_a_worker_that_never_comes_is_named(no_launcher):
    import poseidon.torch

    port = free_port_block()
    for name, value in torchrun_env(0, 2, port, POSEIDON_TIMEOUT_MS="1500").items():
        no_launcher.setenv(name, value)
    started = time.monotonic()
    with pytest.raises(poseidon.torch.JoinError, match="worker 1"):
        poseidon.torch.DistributedDataParallel(small_model())
    assert time.monotonic() - started < 10


def test_more_rows_than_planned_go_and_far_more_say_what_to_pass(no_launcher):
    import poseidon.torch

    net = poseidon.torch.DistributedDataParallel(small_model(), scheme="sfb")
    try:
        net(torch.randn(3, 4)).sum().backward()  # plans K = 3
        net(torch.randn(7, 4)).sum().backward()  # more rows: the buffers grow
        net(torch.randn(48, 4)).sum().backward()  # up to 16 times the plan's
        expected = r"nn.Linear 2: 49 rows .* than the 3 it was planned with .*sfb_rows=.*'2': 'ps'"
        with pytest.raises(RuntimeError, match=expected):
            net(torch.randn(49, 4)).sum().backward()
    finally:
        net.close(RuntimeError("test over"))


def test_a_linear_used_outside_its_forward_cannot_be_forced_to_sfb(no_launcher):
    import poseidon.torch

    model = nn.Sequential(nn.Linear(4, 8))
    attention = nn.MultiheadAttention(8, 2, batch_first=True)
    net = poseidon.torch.DistributedDataParallel(nn.ModuleList([model, attention]),
                                                 scheme="sfb", sfb_rows=6)  # fmt: skip
    try:
        h = model(torch.randn(2, 3, 4))
        with pytest.raises(
            RuntimeError, match=r"'1.out_proj'.*layer_schemes=\{'1.out_proj': 'ps'\}"
        ):
            attention(h, h, h)[0].sum().backward()
    finally:
        net.close(RuntimeError("test over"))


def test_a_sparse_gradient_is_named(no_launcher):
    import poseidon.torch

    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 2))
    net = poseidon.torch.DistributedDataParallel(model, scheme="ps")
    try:
        with pytest.raises(RuntimeError, match=r"0.weight: a sparse gradient"):
            net(torch.tensor([[1, 2]])).sum().backward()
    finally:
        net.close(RuntimeError("test over"))
