"""bench/predictor_vs_emulation.py on a stored emulation: the fluid predictor, and with
--every-node the saturated cells simulated node by node."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.poseidon.experiments.bench_scripts import load_bench_script

ROOT = pathlib.Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "results" / "unseen_a.200mbit.emulated.json"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    return load_bench_script("predictor_vs_emulation")


def wfbp_at_4(output: str) -> float:
    (line,) = [x for x in output.splitlines() if x.split()[5:7] == ["wfbp", "4"]]
    return float(line.split()[8])  # the predicted iteration


def test_every_node_simulates_the_saturated_cells_only(bench, capsys) -> None:  # type: ignore[no-untyped-def]
    args = ["--profile-dir", str(ROOT / "bench" / "nets"), str(RESULTS)]
    assert bench.main(args) == 0
    fluid = capsys.readouterr().out
    assert bench.main([*args, "--every-node", "0", "--blend", "1"]) == 0
    every = capsys.readouterr().out
    # unseen_a's fc1 is owned by a few shards at a time: simulated, the cell is 25% longer
    # (docs/experiments.md §6.5, "Every node simulated"); the P = 1 cells stay as they are.
    assert wfbp_at_4(fluid) == pytest.approx(0.5783, abs=1e-3)
    assert wfbp_at_4(every) == pytest.approx(0.7203, abs=2e-3)
    # By default the estimate is midway between the two (Note [between the bounds]).
    assert bench.main([*args, "--every-node", "0"]) == 0
    midway = capsys.readouterr().out
    assert wfbp_at_4(midway) == pytest.approx((wfbp_at_4(fluid) + wfbp_at_4(every)) / 2, abs=2e-4)
    ones = [x for x in fluid.splitlines() if x.split()[6:7] == ["1"]]
    assert ones and all(x in every for x in ones)
    assert "pairs of modes ordered otherwise than emulated" in every


def test_order_flips_name_the_pairs(bench) -> None:  # type: ignore[no-untyped-def]
    def row(mode: str, emulated: float, predicted: float):  # type: ignore[no-untyped-def]
        error = predicted / emulated - 1
        return bench.Row("m", 1e9, 50.0, mode, 4, emulated, predicted, 0.9, error, None, None,
                         "f.json")  # fmt: skip

    rows = [row("wfbp", 1.00, 1.10), row("poseidon", 1.05, 1.00), row("allreduce", 1.20, 1.30)]
    assert bench.order_flips(rows) == [("f.json P=4", "wfbp", "poseidon", pytest.approx(0.05))]


def test_cells_run_below_the_dilation_rule_are_printed_but_not_counted(  # type: ignore[no-untyped-def]
    bench, tmp_path, capsys
) -> None:
    data = json.loads(RESULTS.read_text())
    # Run at the rule's pick for 2 cores (4, 4, 8 at P = 1, 2, 4); on one core the rule
    # picks 4, 8, 32 (twice the load per core).
    assert [c["dilation"] for c in data["cells"]] == [4, 4, 4, 4, 8, 8]
    short = [c for c in data["cells"] if c["nodes"] > 1]
    data["cores"] = 1
    squeezed = tmp_path / "one_core.emulated.json"
    squeezed.write_text(json.dumps(data))
    args = ["--profile-dir", str(ROOT / "bench" / "nets")]
    assert bench.main([*args, str(RESULTS)]) == 0
    assert "below the dilation" not in capsys.readouterr().out
    assert bench.main([*args, str(squeezed)]) == 0
    out = capsys.readouterr().out
    marked = [x for x in out.splitlines() if "ran below the dilation rule's" in x]
    assert len(marked) == len(short)
    assert f"{len(short)} cells ran below the dilation the rule picks" in out
    counted = len(data["cells"]) - len(short)
    assert f"{counted} cells with 50 ms queues" in out
    assert bench.main([*args, "--all-cells", str(squeezed)]) == 0
    assert f"{len(data['cells'])} cells with 50 ms queues" in capsys.readouterr().out


def test_a_cells_drops_are_printed_per_iteration(bench, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(RESULTS.read_text())
    assert (data["iterations"], data["warmup"]) == (20, 3)
    data["cells"][-1].update(dropped_out=46, dropped_in=230, retransmitted_segments=300)
    counted = tmp_path / "drops.emulated.json"
    counted.write_text(json.dumps(data))
    assert bench.main(["--profile-dir", str(ROOT / "bench" / "nets"), str(counted)]) == 0
    noted = [x for x in capsys.readouterr().out.splitlines() if "packets dropped" in x]
    # 46 and 230 over 23 iterations; the cells without the fields say nothing.
    assert len(noted) == 1 and "2 leaving hosts, 10 entering" in noted[0]


def test_the_depth_ahead_of_a_frame_is_a_gso_super_packet(bench, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The simulated sockets hold EveryNode.depth_bytes (times the byte scale) ahead of a new
    frame only where the links carried GSO super-packets; without GSO, nothing, unless
    --depth says otherwise."""
    depths = []
    monkeypatch.setattr(bench, "simulated", lambda p, *a, **k: depths.append(a[2].depth_bytes) or p)
    data = json.loads(RESULTS.read_text())
    assert "gso" not in data  # written before the setting: GSO on
    single = tmp_path / "single_packets.emulated.json"
    single.write_text(json.dumps({**data, "gso": "off"}))
    args = ["--profile-dir", str(ROOT / "bench" / "nets"), "--every-node", "0"]
    for path, depth, expected in ((RESULTS, [], 64 << 10), (single, [], 0.0),
                                  (single, ["--depth", "8KiB"], 8 << 10)):  # fmt: skip
        depths.clear()
        assert bench.main([*args, *depth, str(path)]) == 0
        assert depths and set(depths) == {expected * data["byte_scale"]}
    # A caller's own EveryNode keeps its depth on GSO files (compare() with no --depth).
    depths.clear()
    every = bench.EveryNode(depth_bytes=16 << 10)
    assert bench.compare([str(RESULTS)], [str(ROOT / "bench" / "nets")], every)
    assert depths and set(depths) == {(16 << 10) * data["byte_scale"]}


def test_a_repeated_cell_prints_its_runs_spread(bench, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(RESULTS.read_text())
    data["cells"][-1].update(runs_s=[0.0700, 0.0653, 0.0661])
    repeated = tmp_path / "repeated.emulated.json"
    repeated.write_text(json.dumps(data))
    assert bench.main(["--profile-dir", str(ROOT / "bench" / "nets"), str(repeated)]) == 0
    noted = [x for x in capsys.readouterr().out.splitlines() if "runs" in x]
    assert len(noted) == 1 and "median of 3 runs, 0.0653–0.0700 s" in noted[0]
