"""bench/predictor_vs_emulation.py on a stored emulation: the fluid predictor, and with
--every-node the saturated cells simulated node by node."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "results" / "unseen_a.200mbit.emulated.json"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    script = ROOT / "bench" / "predictor_vs_emulation.py"
    spec = importlib.util.spec_from_file_location("predictor_vs_emulation", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["predictor_vs_emulation"] = module
    spec.loader.exec_module(module)
    return module


def wfbp_at_4(output: str) -> float:
    (line,) = [x for x in output.splitlines() if x.split()[5:7] == ["wfbp", "4"]]
    return float(line.split()[8])  # the predicted iteration


def test_every_node_simulates_the_saturated_cells_only(bench, capsys) -> None:  # type: ignore[no-untyped-def]
    args = ["--profile-dir", str(ROOT / "bench" / "nets"), str(RESULTS)]
    assert bench.main(args) == 0
    fluid = capsys.readouterr().out
    assert bench.main([*args, "--every-node", "0"]) == 0
    every = capsys.readouterr().out
    # unseen_a's fc1 is owned by a few shards at a time: simulated, the cell is 25% longer
    # (docs/experiments.md §6.5, "Every node simulated"); the P = 1 cells stay as they are.
    assert wfbp_at_4(fluid) == pytest.approx(0.5783, abs=1e-3)
    assert wfbp_at_4(every) == pytest.approx(0.7203, abs=2e-3)
    ones = [x for x in fluid.splitlines() if x.split()[6:7] == ["1"]]
    assert ones and all(x in every for x in ones)
    assert "pairs of modes ordered otherwise than emulated" in every


def test_order_flips_name_the_pairs(bench) -> None:  # type: ignore[no-untyped-def]
    row = ("m", 1e9, 50.0)
    rows = [(*row, "wfbp", 4, 1.00, 1.10, 0.9, 0.1, "f.json"),
            (*row, "poseidon", 4, 1.05, 1.00, 0.9, -0.05, "f.json"),
            (*row, "allreduce", 4, 1.20, 1.30, 0.9, 0.08, "f.json")]  # fmt: skip
    assert bench.order_flips(rows) == [("f.json P=4", "wfbp", "poseidon", pytest.approx(0.05))]
