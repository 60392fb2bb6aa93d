"""How far apart a PS layer's workers are around its round, from every worker's timeline.

Reads the traces of one cell that `poseidon experiment --timeline DIR` writes, one per worker
(DIR/poseidon-P8.0.json … DIR/poseidon-P8.7.json), and for each iteration that every worker
recorded, takes each worker's `queued` span of the layer (handed to the comm core, the end of
its backward) and its `sending` span (first byte out until the last reply in). Prints, per
layer, medians over those iterations (and the largest), in undilated ms:

- submit spread: the last worker's hand-over minus the first's (how far apart they finished
  backward: a round cannot end before the last one pushes);
- thread wait: how long a worker's push waited for a sender thread (its `queued` span), the
  mean over the workers and the slowest worker's;
- reply spread: the last reply's arrival minus the first's (how far apart they may start the
  next forward);
- round: from the last hand-over to the last reply, what the bulk-synchronous round itself
  took once every worker was in (the predictor's round for that layer is its `sync` time).

    .venv/bin/python bench/round_spread.py --dilation 4 DIR/poseidon-P8.*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict

# (layer, iteration) -> worker file -> lane -> (start µs, duration µs)
Spans = dict[tuple[str, int], dict[str, dict[str, tuple[float, float]]]]


def read_spans(paths: list[str]) -> tuple[Spans, list[str]]:
    """Every worker's queued and sending spans, and the layers in the order first seen."""
    spans: Spans = defaultdict(dict)
    layers: list[str] = []
    for path in paths:
        with open(path) as f:
            trace = json.load(f)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        for e in events:
            if e.get("ph") != "X" or e.get("cat") not in ("queued", "sending"):
                continue
            if e["name"] not in layers:
                layers.append(e["name"])
            key = (e["name"], e["args"]["iteration"])
            spans[key].setdefault(path, {})[e["cat"]] = (e["ts"], e["dur"])
    return spans, layers


def spreads(spans: Spans, layer: str, workers: int) -> list[tuple[float, ...]]:
    """(submit spread, mean and slowest thread wait, reply spread, round) in µs for each
    iteration all workers recorded."""
    out = []
    for (name, _), per_worker in sorted(spans.items(), key=lambda kv: kv[0][1]):
        complete = [v for v in per_worker.values() if "queued" in v and "sending" in v]
        if name != layer or len(complete) < workers:
            continue
        submitted = [v["queued"][0] for v in complete]
        waited = [v["queued"][1] for v in complete]
        replied = [v["sending"][0] + v["sending"][1] for v in complete]
        out.append((max(submitted) - min(submitted), statistics.mean(waited), max(waited),
                    max(replied) - min(replied), max(replied) - max(submitted)))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", help="one cell's timelines, one file per worker")
    parser.add_argument("--dilation", type=float, default=1.0, help="the cell's time dilation")
    parser.add_argument("--skip", type=int, default=2, help="first iterations left out")
    args = parser.parse_args(argv)
    spans, layers = read_spans(args.traces)
    scale = 1e3 * args.dilation  # µs on the trace -> undilated ms
    print(f"{len(args.traces)} workers; undilated ms, median (max) over the iterations")
    columns = ("submit spread", "thread wait", "slowest wait", "reply spread", "round")
    print(f"{'layer':<12}{'iterations':>11}" + "".join(f"{c:>18}" for c in columns))
    for layer in layers:
        rows = spreads(spans, layer, len(args.traces))[args.skip :]
        if not rows:
            continue
        cells = []
        for column in zip(*rows):
            cells.append(f"{statistics.median(column) / scale:8.1f} ({max(column) / scale:6.1f})")
        print(f"{layer:<12}{len(rows):>11}" + "".join(f"{c:>18}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
