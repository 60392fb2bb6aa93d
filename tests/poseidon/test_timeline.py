"""Timeline paths: one Chrome trace per worker, never one file written by several."""

from __future__ import annotations

import json

import pytest

from poseidon.timeline import Timeline, per_worker_path


@pytest.mark.parametrize(
    "path,expected",
    [
        ("trace.json", "trace.{rank}.json"),
        ("out/trace", "out/trace.{rank}.json"),
        ("run.{rank}.trace.json", "run.{rank}.trace.json"),
        ("/a.b/t.json", "/a.b/t.{rank}.json"),
    ],
)
def test_per_worker_path(path, expected):
    assert per_worker_path(path) == expected


def test_one_worker_keeps_the_path_as_given(tmp_path):
    assert Timeline(str(tmp_path / "t.json"), 0).path == str(tmp_path / "t.json")


def test_workers_of_a_job_write_their_own_files(tmp_path):
    base = str(tmp_path / "t.json")
    traces = [Timeline(base, rank, workers=2) for rank in range(2)]
    for rank, timeline in enumerate(traces):
        timeline.span(f"layer{rank}", "compute", 0.0, 1.0)
        timeline.close()
    for rank in range(2):
        with open(tmp_path / f"t.{rank}.json") as f:
            names = [e["name"] for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
        assert names == [f"layer{rank}"]
    assert not (tmp_path / "t.json").exists()
