"""Results files read back (report.py, Results.load): what save() wrote comes back whole, a
file that is not one is named with what it lacks, and bench/results_markdown.py draws a
stored file's figure as `--plot` would have."""

from __future__ import annotations

import json

import pytest

from poseidon.experiments.report import Cell, Results
from tests.poseidon.experiments.bench_scripts import load_bench_script


def four_by_four() -> Results:
    results = Results("inception_v3", "inception_v3.titanx-maxwell.json", 10e9, 32, "emulated",
                      info={"dilation": 256.0, "gso": "off"}, workers_per_node=4)  # fmt: skip
    results.update_speedups()
    results.add(Cell("poseidon", 4, 0.385, extra={"host_load": 0.12, "schemes": ["ps"]}))
    results.add(Cell("poseidon-flat", 4, 0.497, extra={"dropped_out": 59268}))
    results.update_speedups({"poseidon": 0.3837})
    return results


def test_a_saved_file_loads_back_whole(tmp_path):
    path = tmp_path / "r.json"
    saved = four_by_four()
    saved.save(str(path))
    loaded = Results.load(str(path))
    assert loaded.to_json() == saved.to_json()
    assert loaded.workers_per_node == 4 and loaded.info["gso"] == "off"
    flat = loaded.cell("poseidon-flat", 4)
    assert flat is not None and flat.extra == {"dropped_out": 59268}
    assert flat.speedup == pytest.approx(4 * 4 * 0.3837 / 0.497)


def test_a_file_that_is_not_results_is_named_with_what_it_lacks(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"model": "m", "cells": []}))
    with pytest.raises(ValueError, match=r"other.json: not a results file .*no batch, kind"):
        Results.load(str(path))
    path.write_text(json.dumps({"model": "m", "batch": 1, "kind": "predicted",
                                "cells": [{"mode": "wfbp", "nodes": 2}]}))  # fmt: skip
    with pytest.raises(ValueError, match=r"other.json: cell 0 lacks one of mode, nodes, iteration"):
        Results.load(str(path))


def test_the_figure_of_a_stored_file(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    markdown = load_bench_script("results_markdown")
    path, figure = tmp_path / "r.json", tmp_path / "r.png"
    four_by_four().save(str(path))
    assert markdown.main(["scaling", str(path), "--plot", str(figure)]) == 0
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| poseidon-flat | 12.35× (0.497 s) |" in capsys.readouterr().out
    assert markdown.main(["scaling", str(path), str(path), "--plot", str(figure)]) == 1
    assert "give one file" in capsys.readouterr().err
