"""Where a worker's training thread spends an iteration, from its Chrome-trace timeline.

Reads the traces `poseidon experiment --timeline DIR` (or POSEIDON_TIMELINE) writes and, per
iteration (from one `forward <first layer>` span to the next; the first `--skip` iterations
and the last one left out), sums the training thread's lanes (poseidon/timeline.py): compute
(every layer's forward and backward together), wait and apply (per layer), and what no span
of them covers: the thread's own work between layers (the syncer's callbacks, submitting
and finishing rounds, clearing diffs). Times are as recorded (a replay's are dilated).

    .venv/bin/python bench/timeline_breakdown.py DIR/wfbp-P1.0.json [DIR/poseidon-P1.0.json ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from itertools import pairwise

TRAINING_THREAD = ("compute", "wait", "apply")  # the lanes of poseidon/timeline.py it runs


def iterations(spans: list[dict]) -> list[tuple[float, float]]:
    """(start, end) of each whole iteration: between consecutive forwards of layer 0."""
    first = next(s["name"] for s in sorted(spans, key=lambda s: s["ts"])
                 if s["cat"] == "compute" and s["name"].startswith("forward "))  # fmt: skip
    starts = sorted(s["ts"] for s in spans if s["cat"] == "compute" and s["name"] == first)
    return list(pairwise(starts))


def breakdown(path: str, skip: int) -> tuple[int, float, dict[tuple[str, str], float], float]:
    """(iterations, mean iteration µs, mean µs per (lane, layer), mean uncovered µs)."""
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") in TRAINING_THREAD]
    windows = iterations(spans)[skip:]
    if not windows:
        raise SystemExit(f"{path}: fewer than {skip + 2} iterations on the timeline")
    per: dict[tuple[str, str], float] = defaultdict(float)
    total = uncovered = 0.0
    for start, end in windows:
        inside = sorted((s for s in spans if start <= s["ts"] < end), key=lambda s: s["ts"])
        covered, reached = 0.0, start
        for s in inside:
            per[(s["cat"], "" if s["cat"] == "compute" else s["name"])] += s["dur"]
            begin, finish = max(s["ts"], reached), s["ts"] + s["dur"]
            if finish > begin:
                covered += finish - begin
                reached = finish
        total += end - start
        uncovered += (end - start) - covered
    n = len(windows)
    return n, total / n, {k: v / n for k, v in per.items()}, uncovered / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", help="timeline JSON files")
    parser.add_argument("--skip", type=int, default=3, help="first iterations left out")
    args = parser.parse_args(argv)
    for path in args.traces:
        n, iteration, per, uncovered = breakdown(path, args.skip)
        print(f"{path}: {n} iterations, {iteration / 1e3:.2f} ms each; ms per iteration:")
        for (lane, layer), us in sorted(per.items(), key=lambda kv: -kv[1]):
            print(f"  {lane:<8}{layer or '(all layers)':<24}{us / 1e3:8.3f}")
        print(f"  {'uncovered (the thread between spans)':<32}{uncovered / 1e3:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
