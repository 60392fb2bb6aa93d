"""Markdown tables (and a figure) for docs/experiments.md from `poseidon experiment -o` files.

    # speed-up per mode and node count, one file [and its figure, as --plot drew it]
    .venv/bin/python bench/results_markdown.py scaling docs/results/vgg19_22k.10gbit.emulated.json \
        [--plot scaling.png]
    # speed-up per mode and link at one node count, several files (one per bandwidth)
    .venv/bin/python bench/results_markdown.py bandwidth \
        docs/results/vgg19_22k.*.8nodes.emulated.json --nodes 8 [--plot bandwidth.png]

Every number comes from the files: nothing here is measured or predicted.
"""

from __future__ import annotations

import argparse
import json
import sys

from poseidon.experiments.report import MODE_LABELS, Results, plot
from poseidon.experiments.units import format_bandwidth

MODE_ORDER = list(MODE_LABELS)


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def ordered_modes(cells: list[dict]) -> list[str]:
    modes = {c["mode"] for c in cells}
    return [m for m in MODE_ORDER if m in modes] + sorted(modes - set(MODE_ORDER))


def scaling_table(data: dict) -> str:
    cells = data["cells"]
    nodes = sorted({c["nodes"] for c in cells})
    lines = [
        "| mode | " + " | ".join(f"P={p}" for p in nodes) + " |",
        "|---|" + "---|" * len(nodes),
    ]
    for mode in ordered_modes(cells):
        row = []
        for p in nodes:
            cell = next((c for c in cells if c["mode"] == mode and c["nodes"] == p), None)
            row.append(f"{cell['speedup']:.2f}× ({cell['iteration_s']:.3f} s)" if cell else "—")
        lines.append(f"| {mode} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def bandwidth_rows(files: list[dict], nodes: int) -> tuple[list[str], list[tuple[float, dict]]]:
    rows = []
    for data in sorted(files, key=lambda d: d["bandwidth_bps"]):
        by_mode = {c["mode"]: c for c in data["cells"] if c["nodes"] == nodes}
        if by_mode:
            rows.append((data["bandwidth_bps"], by_mode))
    modes = ordered_modes([c for _, by_mode in rows for c in by_mode.values()])
    return modes, rows


def bandwidth_table(files: list[dict], nodes: int) -> str:
    modes, rows = bandwidth_rows(files, nodes)
    lines = [
        "| link | " + " | ".join(modes) + " |",
        "|---|" + "---|" * len(modes),
    ]
    for bps, by_mode in rows:
        row = [
            f"{by_mode[m]['speedup']:.2f}× ({by_mode[m]['iteration_s']:.3f} s)"
            if m in by_mode
            else "—"
            for m in modes
        ]
        lines.append(f"| {format_bandwidth(bps)} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def bandwidth_plot(files: list[dict], nodes: int, path: str) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes, rows = bandwidth_rows(files, nodes)
    figure, axis = plt.subplots(figsize=(5.2, 4.2))
    axis.axhline(nodes, color="0.6", linestyle="--", label="linear")
    for mode in modes:
        points = [(bps / 1e9, r[mode]["speedup"]) for bps, r in rows if mode in r]
        axis.plot(*zip(*points), marker="o", label=MODE_LABELS.get(mode, mode))
    axis.set_xscale("log")
    gbits = [bps / 1e9 for bps, _ in rows]
    axis.set_xticks(gbits)
    axis.set_xticklabels([f"{g:g}" for g in gbits])
    axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axis.set_xlabel("link bandwidth per node (Gbit/s)")
    axis.set_ylabel("speed-up")
    axis.set_title(f"{files[0]['model']}, {nodes} nodes ({files[0]['kind']})", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("table", choices=["scaling", "bandwidth"])
    parser.add_argument("results", nargs="+", help="JSON files of poseidon experiment -o")
    parser.add_argument("--nodes", type=int, default=8, help="bandwidth: the node count")
    parser.add_argument(
        "--plot",
        help="write a PNG: speed-up against nodes (scaling, one file: the figure of "
        "poseidon experiment --plot) or against link (bandwidth)",
    )
    args = parser.parse_args(argv)
    files = [load(path) for path in args.results]
    if args.table == "scaling":
        if args.plot and len(files) != 1:
            print("scaling --plot draws one file's figure; give one file", file=sys.stderr)
            return 1
        for path, data in zip(args.results, files):
            print(f"{path}\n\n{scaling_table(data)}\n")
        if args.plot:
            plot(Results.load(args.results[0]), args.plot)
        return 0
    if not bandwidth_rows(files, args.nodes)[1]:
        print(f"no cells with {args.nodes} nodes in the given files", file=sys.stderr)
        return 1
    print(bandwidth_table(files, args.nodes))
    if args.plot:
        bandwidth_plot(files, args.nodes, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
