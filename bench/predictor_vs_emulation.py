"""The predictor against emulated runs: for every cell of the given `poseidon experiment
--emulate -o` results, the prediction for the same profile, mode, node count and bandwidth
(tc's framing), side by side, with the mean and worst absolute error.

    .venv/bin/python bench/predictor_vs_emulation.py docs/results/*.json [--markdown]

    .venv/bin/python bench/predictor_vs_emulation.py --profile-dir bench/nets \
        docs/results/unseen_*.json            (nets the predictor was not built on)

Targets (docs/experiments.md §6.5, issue 23): mean absolute error <= 3%, worst <= 8%.
A cell run at less dilation than the rule picks for it (`choose_dilation` on the cores the
emulation had) is printed but left out of the summary: its replay was short of CPU, as the
rule says it would be (docs/experiments.md §2); `--all-cells` counts it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from dataclasses import replace
from typing import NamedTuple

from poseidon.config import parse_bytes, parse_layer_schemes
from poseidon.experiments.emulation import DEFAULT_QUEUE_MS, TCP_GOODPUT_TBF
from poseidon.experiments.every_node import EveryNode, simulated
from poseidon.experiments.predict import EXACT, Compression, Layout, Link, predict_cell
from poseidon.experiments.profile import load_profile
from poseidon.experiments.resolve import resolve_profile
from poseidon.experiments.run import DEFAULT_CHUNK_BYTES, choose_dilation

# Modes within this much of each other in the emulation are a tie in a run (its run-to-run
# spread; docs/experiments.md §6.5): ordered either way, they do not count as a miss.
ORDER_TIE = 0.01


class Row(NamedTuple):
    """One emulated cell beside its prediction."""

    model: str
    bandwidth_bps: float
    queue_ms: float
    mode: str
    nodes: int | str  # "4x4" with several workers per node
    emulated_s: float
    predicted_s: float
    link_busy: float
    error: float  # predicted / emulated - 1
    below_rule: float | None  # the rule's dilation where the cell ran at less, else None
    drops: tuple[float, float] | None  # packets dropped leaving, entering hosts per iteration
    path: str
    runs_s: tuple[float, ...] = ()  # every run's time, for a cell run more than once (--repeat)


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
            every: EveryNode | None = None, depth_bytes: float | None = None,
            ) -> list[Row]:  # fmt: skip
    """Every emulated cell of the files beside its prediction (with `every`, the saturated
    PS cells simulated node by node, sockets holding `depth_bytes` ahead of a new frame;
    None: `every`'s for files whose links carried GSO super-packets, else 0)."""
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
        cores = int(data.get("cores") or os.cpu_count() or 1)  # older files: this machine's
        gso = data.get("gso", "on") != "off"  # older files: on
        # The emulation shrinks frames and the sockets' low-water mark alike by its byte scale
        # (run.py: CellJob.environment), so the simulation keeps the real cluster's. What a
        # socket holds ahead of a new frame is the links' grain, in the emulation's bytes: a
        # GSO super-packet, or without GSO one packet, next to nothing (EveryNode.depth_bytes).
        scale = data.get("byte_scale", 1)
        scaled = None
        if every is not None:
            depth = depth_bytes if depth_bytes is not None else every.depth_bytes if gso else 0.0
            scaled = replace(every, depth_bytes=depth * scale)
        per_job = int(data.get("iterations", 1)) + int(data.get("warmup", 0))
        for cell in data["cells"]:
            predicted, busy = predict(profile, cell, link, per_node, compression, chunk_bytes,
                                      scaled)  # fmt: skip
            rule = choose_dilation(cell["nodes"], data["bandwidth_bps"], scale, profile,
                                   per_node, cores, gso)  # fmt: skip
            ran = cell.get("dilation", rule)  # cells written before it was recorded: the rule's
            # Drops over the job, warm-up included (emulation.py, Note [link losses]); files
            # written before 2026-12-06 have none.
            drops = None
            if "dropped_in" in cell:
                drops = (cell["dropped_out"] / per_job, cell["dropped_in"] / per_job)
            rows.append(
                Row(
                    data["model"],
                    data["bandwidth_bps"],
                    queue_ms,
                    cell["mode"],
                    f"{cell['nodes']}x{per_node}" if per_node > 1 else cell["nodes"],
                    cell["iteration_s"],
                    predicted,
                    busy,
                    predicted / cell["iteration_s"] - 1,
                    rule if ran < rule else None,
                    drops,
                    path,
                    tuple(cell.get("runs_s", ())),
                )
            )
    return rows


def order_flips(rows: list[Row]) -> list[tuple[str, str, str, float]]:
    """Pairs of modes of one file and node count that the predictor orders otherwise than
    the emulation: (where, faster mode as emulated, slower, their emulated gap)."""
    flips = []
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault((row.path, row.nodes), []).append(row)
    for (path, p), cells in groups.items():
        for a, b in itertools.combinations(cells, 2):
            fast, slow = (a, b) if a.emulated_s <= b.emulated_s else (b, a)
            if fast.predicted_s > slow.predicted_s:
                where = f"{os.path.basename(path)} P={p}"
                flips.append((where, fast.mode, slow.mode, slow.emulated_s / fast.emulated_s - 1))
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
                        default=None,
                        help="with --every-node: the bytes a socket holds ahead of a new "
                        "frame, times the byte scale (default: EveryNode.depth_bytes for "
                        "files run with GSO on, 0 for those with --gso off)")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=EveryNode.warmup,
                        help="with --every-node: untimed iterations")  # fmt: skip
    parser.add_argument("--iterations", type=int, default=EveryNode.iterations,
                        help="with --every-node: timed iterations")  # fmt: skip
    parser.add_argument("--blend", type=float, default=EveryNode.blend,
                        help="with --every-node: where a simulated cell's estimate lies from "
                        "the fluid bound (0) to the simulation (1) (every_node.py, Note "
                        "[between the bounds])")  # fmt: skip
    parser.add_argument("--all-cells", action="store_true",
                        help="count the cells run below the dilation rule's pick too")  # fmt: skip
    args = parser.parse_args(argv)
    every = None
    if args.every_node is not None:
        every = EveryNode(
            sigma=args.every_node,
            seeds=args.seeds,
            warmup=args.warmup,
            iterations=args.iterations,
            blend=args.blend,
        )
    rows = compare(args.results, args.profile_dir, every, args.depth)
    if not rows:
        print("no emulated cells in the given files", file=sys.stderr)
        return 1
    if args.markdown:
        print("| model | link | queue | mode | P | emulated s | predicted s | link busy | error "
              "| note |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        link = f"{row.bandwidth_bps / 1e9:g} Gbit/s"
        notes = []
        if row.below_rule:
            notes.append(f"ran below the dilation rule's {row.below_rule:g}")
        if row.drops and any(row.drops):
            notes.append(f"packets dropped per iteration: {row.drops[0]:.0f} leaving hosts, "
                         f"{row.drops[1]:.0f} entering")  # fmt: skip
        if row.runs_s:
            notes.append(f"median of {len(row.runs_s)} runs, {min(row.runs_s):.4f}–"
                         f"{max(row.runs_s):.4f} s")  # fmt: skip
        if args.markdown:
            print(
                f"| {row.model} | {link} | {row.queue_ms:g} ms | {row.mode} | {row.nodes} | "
                f"{row.emulated_s:.4f} | {row.predicted_s:.4f} | {row.link_busy:.0%} | "
                f"{row.error:+.1%} | {'; '.join(notes)} |"
            )
        else:
            print(
                f"{row.model:<14}{link:>12}{row.queue_ms:>6g} ms {row.mode:<18}{row.nodes!s:>5}"
                f"{row.emulated_s:>10.4f}{row.predicted_s:>10.4f}{row.link_busy:>7.0%}"
                f"{row.error:>+9.1%}" + "".join(f" ({note})" for note in notes)
            )
    counted = [r for r in rows if args.all_cells or not r.below_rule]
    # One summary per queue depth: the emulated network differs between them.
    print()
    left_out = len(rows) - len(counted)
    if left_out:
        print(f"{left_out} cells ran below the dilation the rule picks for them (short of "
              "CPU: docs/experiments.md §2) and are left out below; --all-cells counts them"
              )  # fmt: skip
    for queue_ms in sorted({r.queue_ms for r in counted}):
        errors = [abs(r.error) for r in counted if r.queue_ms == queue_ms]
        print(
            f"{len(errors)} cells with {queue_ms:g} ms queues: mean absolute error "
            f"{sum(errors) / len(errors):.1%} (target <= 3%), worst {max(errors):.1%} "
            f"(target <= 8%)"
        )
    flips = order_flips(counted)
    for where, fast, slow, gap in flips:
        print(f"order: {where}: {fast} ran {gap:.1%} faster than {slow}, predicted slower")
    beyond = [f for f in flips if f[-1] > ORDER_TIE]
    print(f"{len(flips)} pairs of modes ordered otherwise than emulated, {len(beyond)} of them "
          f"more than {ORDER_TIE:.0%} apart in the emulation (target: none)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
