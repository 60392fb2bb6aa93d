"""The predictor against emulated runs: for every cell of the given `poseidon experiment
--emulate -o` results, the prediction for the same profile, mode, node count and bandwidth
(tc's framing), side by side, with the mean and worst absolute error.

    .venv/bin/python bench/predictor_vs_emulation.py docs/results/*.json [--markdown]

    .venv/bin/python bench/predictor_vs_emulation.py --profile-dir bench/nets \
        docs/results/unseen_*.json            (nets the predictor was not built on)

Targets (docs/experiments.md §6.5, issue 23): mean absolute error <= 3%, worst <= 8%.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from dataclasses import replace

from poseidon.config import parse_bytes, parse_layer_schemes
from poseidon.experiments.emulation import DEFAULT_QUEUE_MS, TCP_GOODPUT_TBF
from poseidon.experiments.every_node import EveryNode, simulated
from poseidon.experiments.predict import EXACT, Compression, Layout, Link, predict_cell
from poseidon.experiments.profile import load_profile
from poseidon.experiments.resolve import resolve_profile
from poseidon.experiments.run import DEFAULT_CHUNK_BYTES

# Modes within this much of each other in the emulation are a tie in a run (its run-to-run
# spread; docs/experiments.md §6.5): ordered either way, they do not count as a miss.
ORDER_TIE = 0.01


def predict(profile, cell: dict, link: Link, per_node: int = 1,  # type: ignore[no-untyped-def]
            compression: Compression = EXACT, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
            every: EveryNode | None = None) -> tuple[float, float]:  # fmt: skip
    """A cell's predicted iteration (a poseidon-tuned cell with the plan it ran; a `-flat`
    cell of several workers per node without local aggregation) and the share of it that
    one node's uplink is busy (bytes over goodput): where that share is high, the fluid
    link of the model is optimistic (docs/experiments.md §6.5)."""
    mode, schemes = cell["mode"], None
    if mode == "poseidon-tuned":
        mode = "poseidon"
        schemes = parse_layer_schemes(cell.get("layer_schemes", ""), "layer_schemes")
    layout = Layout(per_node, not mode.endswith("-flat"))
    mode = mode.removesuffix("-flat")
    allowed = compression if mode == "poseidon" else EXACT
    cell_prediction = predict_cell(profile, mode, cell["nodes"], link, chunk_bytes,
                                   layer_schemes=schemes, layout=layout,
                                   compression=allowed)  # fmt: skip
    if every is not None:
        cell_prediction = simulated(cell_prediction, profile, link, every, chunk_bytes,
                                    layout=layout, compression=allowed)  # fmt: skip
    return cell_prediction.iteration_s, cell_prediction.link_busy(link)


def find_profile(name: str, model: str, profile_dirs: list[str]):  # type: ignore[no-untyped-def]
    """The profile a results file names: a shipped one, or a file in one of `profile_dirs`
    (results files keep the profile's file name only)."""
    for directory in profile_dirs:
        candidate = os.path.join(directory, name)
        if os.path.exists(candidate):
            return load_profile(candidate)
    return load_profile(resolve_profile(name, model))


def compare(paths: list[str], profile_dirs: list[str] | None = None,
            every: EveryNode | None = None) -> list[tuple]:  # fmt: skip
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("kind") != "emulated" or not data.get("profile"):
            continue
        profile = find_profile(data["profile"], data["model"], profile_dirs or [])
        link = Link(data["bandwidth_bps"], TCP_GOODPUT_TBF)
        per_node = int(data.get("workers_per_node", 1))
        kind, _, rank = str(data.get("compression", "none:4")).partition(":")
        compression = Compression(kind, int(rank or 4))
        queue_ms = float(data.get("queue_ms", DEFAULT_QUEUE_MS))  # older files: the default
        chunk_bytes = int(data.get("chunk_bytes", DEFAULT_CHUNK_BYTES))  # likewise
        # The emulation scales frames down by its byte scale, not the sockets' low-water mark.
        scale = data.get("byte_scale", 1)
        scaled = every and replace(
            every,
            lowat_bytes=every.lowat_bytes * scale,
            depth_bytes=every.depth_bytes * scale,
        )
        for cell in data["cells"]:
            predicted, busy = predict(profile, cell, link, per_node, compression, chunk_bytes,
                                      scaled)  # fmt: skip
            error = predicted / cell["iteration_s"] - 1
            rows.append(
                (
                    data["model"],
                    data["bandwidth_bps"],
                    queue_ms,
                    cell["mode"],
                    f"{cell['nodes']}x{per_node}" if per_node > 1 else cell["nodes"],
                    cell["iteration_s"],
                    predicted,
                    busy,
                    error,
                    path,
                )
            )
    return rows


def order_flips(rows: list[tuple]) -> list[tuple[str, str, str, float]]:
    """Pairs of modes of one file and node count that the predictor orders otherwise than
    the emulation: (where, faster mode as emulated, slower, their emulated gap)."""
    flips = []
    groups: dict[tuple, list[tuple]] = {}
    for row in rows:
        groups.setdefault((row[-1], row[4]), []).append(row)
    for (path, p), cells in groups.items():
        for a, b in itertools.combinations(cells, 2):
            fast, slow = (a, b) if a[5] <= b[5] else (b, a)
            if fast[6] > slow[6]:
                where = f"{os.path.basename(path)} P={p}"
                flips.append((where, fast[3], slow[3], slow[5] / fast[5] - 1))
    return flips


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="JSON files of poseidon experiment -o")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--profile-dir",
        action="append",
        default=[],
        help="where to look for profiles that are not shipped (e.g. bench/nets)",
    )
    parser.add_argument("--every-node", type=float, metavar="SIGMA",
                        help="simulate the saturated PS cells node by node, the frames' "
                        "shares spread by SIGMA (every_node.py)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=EveryNode.seeds,
                        help="random draws averaged with --every-node")  # fmt: skip
    parser.add_argument("--depth", type=lambda text: parse_bytes(text, "--depth"),
                        default=EveryNode.depth_bytes,
                        help="with --every-node: the bytes a socket holds ahead of a "
                        "new frame (EveryNode.depth_bytes, 0), times the byte scale")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=EveryNode.warmup,
                        help="with --every-node: untimed iterations")  # fmt: skip
    parser.add_argument("--iterations", type=int, default=EveryNode.iterations,
                        help="with --every-node: timed iterations")  # fmt: skip
    args = parser.parse_args(argv)
    every = None
    if args.every_node is not None:
        every = EveryNode(
            sigma=args.every_node,
            seeds=args.seeds,
            depth_bytes=args.depth,
            warmup=args.warmup,
            iterations=args.iterations,
        )
    rows = compare(args.results, args.profile_dir, every)
    if not rows:
        print("no emulated cells in the given files", file=sys.stderr)
        return 1
    if args.markdown:
        print("| model | link | queue | mode | P | emulated s | predicted s | link busy | error |")
        print("|---|---|---|---|---|---|---|---|---|")
    for model, bps, queue_ms, mode, p, measured, predicted, busy, error, _ in rows:
        link = f"{bps / 1e9:g} Gbit/s"
        if args.markdown:
            print(
                f"| {model} | {link} | {queue_ms:g} ms | {mode} | {p} | {measured:.4f} | "
                f"{predicted:.4f} | {busy:.0%} | {error:+.1%} |"
            )
        else:
            print(
                f"{model:<14}{link:>12}{queue_ms:>6g} ms {mode:<18}{p!s:>5}{measured:>10.4f}"
                f"{predicted:>10.4f}{busy:>7.0%}{error:>+9.1%}"
            )
    # One summary per queue depth: the emulated network differs between them.
    print()
    for queue_ms in sorted({r[2] for r in rows}):
        errors = [abs(r[-2]) for r in rows if r[2] == queue_ms]
        print(
            f"{len(errors)} cells with {queue_ms:g} ms queues: mean absolute error "
            f"{sum(errors) / len(errors):.1%} (target <= 3%), worst {max(errors):.1%} "
            f"(target <= 8%)"
        )
    flips = order_flips(rows)
    for where, fast, slow, gap in flips:
        print(f"order: {where}: {fast} ran {gap:.1%} faster than {slow}, predicted slower")
    beyond = [f for f in flips if f[-1] > ORDER_TIE]
    print(f"{len(flips)} pairs of modes ordered otherwise than emulated, {len(beyond)} of them "
          f"more than {ORDER_TIE:.0%} apart in the emulation (target: none)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
