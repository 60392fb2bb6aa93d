"""Several workers per machine (docs/communication.md §5, "Several workers per machine"):
2 machines × 2 workers (`poseidon launch -n 4 --workers-per-host 2`) train exactly like one
process on the global batch in every sync mode, every worker holds the same bytes, and the
network carries 1/G of the flat layout's bytes for the layers through the shards (the comm
core's counters: only the machines' leaders move anything); a killed worker is named with its
machine.
"""

from __future__ import annotations

import re

import pytest

from tests.caffe.parallel.job import reference_weights, run_job
from tests.caffe.parallel.test_equivalence import ITERS, MODES, assert_matches
from tests.caffe.parallel.test_faults import alive, kill_mid_run

TWO_BY_TWO = ["--workers-per-host", "2"]


@pytest.fixture(scope="module")
def reference_of_four(tmp_path_factory):
    return reference_weights(str(tmp_path_factory.mktemp("ref4")), 4, ITERS)


def traffic(ranks: list[dict]) -> dict[str, list[int]]:
    """Each layer's bytes (sent + received) per worker (0 where a worker moved none)."""
    out: dict[str, list[int]] = {}
    for rank, arrays in enumerate(ranks):
        for key, value in arrays.items():
            if key.startswith("traffic/"):
                out.setdefault(key.split("/")[1], [0] * len(ranks))[rank] = int(value.sum())
    return out


@pytest.mark.parametrize("sync,scheme", [*MODES, ("allreduce", "auto")])
def test_two_machines_of_two_equal_one_process(tmp_path, reference_of_four, sync, scheme):
    ranks, _ = run_job(str(tmp_path), 4, 2, sync, scheme, ITERS, extra_args=TWO_BY_TWO)
    assert_matches(ranks, reference_of_four)
    if sync == "allreduce":
        return  # one ring over every worker (the baseline has no local stage of its own)
    schemes = {k.split("/")[1]: str(v) for k, v in ranks[0].items() if k.startswith("scheme/")}
    if scheme == "sfb":
        assert schemes["ip1"] == schemes["ip2"] == "SFB" and schemes["conv1"] == "PS"
    # Only the leaders (ranks 0 and 2) talk to the network.
    for layer, per_worker in traffic(ranks).items():
        assert per_worker[1] == per_worker[3] == 0, layer
        assert per_worker[0] > 0 and per_worker[2] > 0, layer


def test_the_network_carries_one_gth_of_the_flat_layout(tmp_path):
    flat, _ = run_job(str(tmp_path), 4, 2, "wfbp", "auto", 6)
    local, _ = run_job(str(tmp_path), 4, 2, "wfbp", "auto", 6, extra_args=TWO_BY_TWO)
    flat_bytes, local_bytes = traffic(flat), traffic(local)
    for layer in flat_bytes:
        assert sum(local_bytes[layer]) * 2 == sum(flat_bytes[layer]), layer


def test_a_layout_that_splits_a_machine_is_refused(tmp_path):
    with pytest.raises(AssertionError, match="want a divisor of -n 3"):
        run_job(str(tmp_path), 3, 1, "wfbp", "auto", 2, extra_args=TWO_BY_TWO)


@pytest.mark.parametrize("victim", [3, 2])
def test_a_killed_worker_is_named_with_its_machine(tmp_path, victim):
    """Worker 3 (machine 1's second) or worker 2 (its leader, which also runs shard 1) killed
    mid-run: every process ends within 10 s, and the job's verdict names the worker and its
    machine."""
    seen, pids = kill_mid_run(tmp_path, ["-n", "4", "-s", "2", *TWO_BY_TWO], 4, victim,
                              snapshot_at=10)  # fmt: skip
    output = "".join(seen)
    verdict = [line for line in seen if "job failed" in line or "aborting the job" in line]
    named = rf"worker {victim}\b.*machine 1"
    assert any(re.search(named, line) for line in verdict), output[-4000:]
    assert "Traceback" not in output
    assert not any(alive(pid) for pid in pids)


def test_the_timeline_shows_the_local_stage(tmp_path):
    """Every worker's trace has each layer's local sum and spread on the `local` lane; only
    the leaders' show the network's `sending`."""
    import json

    base = tmp_path / "trace.json"
    run_job(str(tmp_path), 4, 2, "wfbp", "auto", 3, env={"POSEIDON_TIMELINE": str(base)},
            extra_args=TWO_BY_TWO)  # fmt: skip
    for rank in range(4):
        with open(tmp_path / f"trace.{rank}.json") as f:
            events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
        local = {e["name"] for e in events if e["cat"] == "local"}
        assert "conv1 (local sum)" in local and "ip2 (local spread)" in local, (rank, local)
        sending = any(e["cat"] == "sending" for e in events)
        assert sending == (rank % 2 == 0), rank


def test_a_local_stage_that_cannot_form_ends_the_job_with_its_reason(tmp_path):
    """Building a machine's local group fails in every worker (injected, as torch 2.11's
    NCCL group did on an H200): the job's verdict is that error, not "worker r is gone",
    and no process dies in its C++ teardown ("terminate called")."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('POSEIDON_ROLE') == 'worker':\n"
        "    import poseidon.sync.local as local\n"
        "    def refuse(*args, **kwargs):\n"
        "        raise AttributeError('injected: the group has no such method')\n"
        "    local.LocalGroup._group = refuse\n"
    )
    with pytest.raises(AssertionError) as failed:
        run_job(str(tmp_path), 4, 2, "wfbp", "auto", 2, env={"PYTHONPATH": str(inject)},
                extra_args=TWO_BY_TWO)  # fmt: skip
    output = str(failed.value)
    verdict = [line for line in output.splitlines() if "[launch] job failed" in line]
    assert verdict and "injected: the group has no such method" in verdict[0], output
    assert "terminate called" not in output and "Fatal Python error" not in output, output
