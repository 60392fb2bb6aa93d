"""Does HybComm still pay on today's hardware, and where? (docs/experiments.md §6.10)

Predicts every zoo model of `--models` on `--machines` machines of `--gpus` GPUs each, over
each of `--bandwidths`, with the derived profile of `--profile` (models/profiles/, e.g. the
H100's): every sync mode with local aggregation (POSEIDON_WORKERS_PER_HOST = gpus), the
flat layout (every GPU pushing its own through the machine's NIC), and DDP-style all-reduce
(one ring over every GPU). Prints a Markdown table of speed-up over one GPU and scaling
efficiency, and writes the JSON and a figure of speed-up against the link.

    .venv/bin/python bench/todays_clusters.py --profile h100 --machines 8 --gpus 8 \
        --bandwidths 25gbit,100gbit,400gbit --local-bandwidth 3600gbit \
        -o docs/results/todays_clusters.h100.json --plot docs/results/todays_clusters.h100.png
"""

from __future__ import annotations

import argparse
import json
import sys

from poseidon.experiments.experiment import check_profile
from poseidon.experiments.predict import (
    SATURATED_LINK_BUSY,
    TCP_GOODPUT_ETHERNET,
    Layout,
    Link,
    predict_cell,
)
from poseidon.experiments.resolve import resolve_model, resolve_profile
from poseidon.experiments.units import format_bandwidth, parse_bandwidth

MODES = ("ps-nooverlap", "wfbp", "poseidon", "allreduce")


def cells(model: str, profile_tag: str, machines: int, gpus: int, bandwidths: list[float],
          local: Link | None) -> list[dict]:  # fmt: skip
    """Every (mode, layout, bandwidth) prediction of `model`: speed-up over one GPU."""
    label, prototxt = resolve_model(model)
    profile, batch = check_profile(resolve_profile(profile_tag, label), prototxt, None)
    out = []
    for bandwidth in bandwidths:
        link = Link(bandwidth, TCP_GOODPUT_ETHERNET)
        one = {m: predict_cell(profile, m, 1, link).iteration_s for m in MODES}
        for mode in MODES:
            layouts = [Layout(gpus, True, local)]
            if mode != "allreduce":
                layouts.append(Layout(gpus, False))
            for layout in layouts:
                cell = predict_cell(profile, mode, machines, link, layout=layout)
                speedup = machines * gpus * one[mode] / cell.iteration_s
                out.append({"model": label, "bandwidth_bps": bandwidth, "mode": cell.mode,
                            "machines": machines, "gpus_per_machine": gpus, "batch": batch,
                            "iteration_s": cell.iteration_s, "one_gpu_s": one[mode],
                            "speedup": speedup, "efficiency": speedup / (machines * gpus),
                            "bytes_per_machine": cell.bytes_per_node,
                            "link_busy": cell.link_busy(link),
                            "saturated": cell.saturated(link)})  # fmt: skip
    return out


SATURATED_MARK = "†"


def markdown(rows: list[dict]) -> str:
    """One row per model and link; one column per mode: speed-up (efficiency), marked where
    it is an upper bound (predict.py, Note [saturated cells])."""
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    lines = ["| model | link | " + " | ".join(modes) + " |",
             "|---|---|" + "---|" * len(modes)]  # fmt: skip
    keys = list(dict.fromkeys((r["model"], r["bandwidth_bps"]) for r in rows))
    for model, bandwidth in keys:
        found = {r["mode"]: r for r in rows
                 if r["model"] == model and r["bandwidth_bps"] == bandwidth}  # fmt: skip
        text = [f"{found[m]['speedup']:.1f}× ({100 * found[m]['efficiency']:.0f}%)"
                + (SATURATED_MARK if found[m]["saturated"] else "") for m in modes]  # fmt: skip
        lines.append(f"| {model} | {format_bandwidth(bandwidth)} | " + " | ".join(text) + " |")
    if any(r["saturated"] for r in rows):
        lines += ["", f"{SATURATED_MARK} a PS mode on a link busy for "
                  f"{SATURATED_LINK_BUSY:.0%} or more of the iteration: its speed-up is an "
                  "upper bound (docs/experiments.md §4)"]  # fmt: skip
    return "\n".join(lines)


def plot(rows: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    figure, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.8), sharey=True)
    for axis, model in zip(axes if len(models) > 1 else [axes], models):
        mine = [r for r in rows if r["model"] == model]
        bandwidths = sorted({r["bandwidth_bps"] for r in mine})
        for mode in dict.fromkeys(r["mode"] for r in mine):
            values = [next(r["speedup"] for r in mine if r["mode"] == mode
                           and r["bandwidth_bps"] == b) for b in bandwidths]  # fmt: skip
            axis.plot(range(len(bandwidths)), values, marker="o", label=mode,
                      linestyle="--" if mode.endswith("-flat") else "-")  # fmt: skip
        workers = mine[0]["machines"] * mine[0]["gpus_per_machine"]
        axis.axhline(workers, color="0.6", linestyle=":", label="linear")
        axis.set_xticks(range(len(bandwidths)), [format_bandwidth(b) for b in bandwidths])
        axis.set_title(model, fontsize=10)
        axis.set_xlabel("link per machine")
        axis.grid(alpha=0.3)
    (axes[0] if len(models) > 1 else axes).set_ylabel("speed-up over one GPU")
    (axes[-1] if len(models) > 1 else axes).legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="vgg19_22k,resnet50,inception_v3")
    p.add_argument("--profile", default="h100", help="device tag of the derived profiles")
    p.add_argument("--machines", type=int, default=8)
    p.add_argument("--gpus", type=int, default=8, help="GPUs (workers) per machine")
    p.add_argument("--bandwidths", default="25gbit,100gbit,400gbit")
    p.add_argument("--local-bandwidth", default="3600gbit",
                   help="between a machine's GPUs, each way (NVLink 4: 450 GB/s)")  # fmt: skip
    p.add_argument("-o", "--output")
    p.add_argument("--plot")
    args = p.parse_args()
    bandwidths = [parse_bandwidth(b) for b in args.bandwidths.split(",")]
    local = Link(parse_bandwidth(args.local_bandwidth), 1.0, 0.0)
    rows = []
    for model in args.models.split(","):
        rows += cells(model, args.profile, args.machines, args.gpus, bandwidths, local)
    print(markdown(rows))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({"command": "bench/todays_clusters.py " + " ".join(sys.argv[1:]),
                       "profile": args.profile, "local_bandwidth_bps": local.bandwidth_bps,
                       "cells": rows}, f, indent=1)  # fmt: skip
            f.write("\n")
    if args.plot:
        title = (f"{args.machines} machines × {args.gpus} GPUs ({args.profile}, derived), "
                 "predicted")  # fmt: skip
        plot(rows, args.plot, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
