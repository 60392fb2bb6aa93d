"""POSEIDON_TIMELINE set directly (torchrun, SLURM, a shell), not through `launch
--timeline`: workers on one host still write one trace each."""

from __future__ import annotations

import json

from tests.caffe.parallel.job import run_job


def test_timeline_variable_without_rank_gives_a_file_per_worker(tmp_path):
    base = tmp_path / "trace.json"
    run_job(str(tmp_path), 2, 1, iters=3, env={"POSEIDON_TIMELINE": str(base)})
    for rank in range(2):
        with open(tmp_path / f"trace.{rank}.json") as f:
            events = json.load(f)["traceEvents"]
        assert {e["pid"] for e in events} == {rank}
        assert any(e["cat"] == "sending" for e in events if e["ph"] == "X")
    assert not base.exists()
