"""Predict the scaling experiment's table without running it: from a compute profile, the
plan of the cost model, the link bandwidth, WFBP's overlap, links shared between
concurrent transfers, the SFB rebuild and the bulk-synchronous shape of a PS round
(poseidon/experiments/predict.py), for any node count. Same table, JSON and figure as
`poseidon experiment`. See docs/experiments.md."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from poseidon.config import SYNC_MODES

if TYPE_CHECKING:
    from poseidon.experiments.predict import CellPrediction, Link

HELP = "predict iteration time and speed-up per mode and node count from a compute profile"
MODES = (*SYNC_MODES, "poseidon-tuned")
DEFAULT_MODES = ",".join(SYNC_MODES)
FRAMINGS = ("ethernet", "tbf")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="zoo name (e.g. vgg19_22k) or net prototxt")
    p.add_argument(
        "--profile",
        required=True,
        help="compute profile: a file, or a models/profiles name (titanx-maxwell)",
    )
    p.add_argument("--nodes", default="1,2,4,8,16,32", help="node counts, e.g. 1,2,4,8,16,32")
    p.add_argument("--bandwidth", required=True, help="link speed per node, e.g. 10gbit, 25GbE")
    p.add_argument(
        "--modes",
        default=DEFAULT_MODES,
        help="sync modes, comma-separated; poseidon-tuned: Poseidon with per-layer "
        "schemes chosen by predicted time (prints the POSEIDON_LAYER_SCHEMES)",
    )
    p.add_argument(
        "--framing",
        choices=FRAMINGS,
        default="ethernet",
        help="what the bandwidth counts: ethernet (a real NIC: TCP payload is 0.915 of it, "
        "headers and ACKs counted) or tbf (tc's token bucket, as in --emulate: 0.936)",
    )
    p.add_argument("--chunk-bytes", type=int, default=1 << 20, help="PS chunk size (bytes)")
    p.add_argument("--compression", default="none",
                   help="lossy schemes mode poseidon may plan per layer: none (default), bf16, "
                   "powersgd[:R], auto[:R] (POSEIDON_COMPRESSION)")  # fmt: skip
    p.add_argument("--powersgd-rank", type=int, default=4, help="PowerSGD's rank (default 4)")
    p.add_argument("--workers-per-node", type=int, default=1, metavar="G",
                   help="G workers behind each node's link (e.g. GPUs per machine): each mode "
                   "with local aggregation (POSEIDON_WORKERS_PER_HOST) and, as MODE-flat, "
                   "without; all-reduce as one ring over every worker")  # fmt: skip
    p.add_argument("--local-bandwidth", default="0",
                   help="with --workers-per-node: the bandwidth between a node's workers, "
                   "e.g. 100gbit (PCIe 3 x16), 3600gbit (NVLink 4); default: free")  # fmt: skip
    p.add_argument("--every-node", type=float, metavar="SIGMA",
                   help="simulate the saturated PS cells node by node (every node's links, "
                   "TCP's shares spread by SIGMA, 0 for even shares) and read them midway "
                   "between the fluid bound and the simulation: slower, and nearer the "
                   "emulation where one node cannot stand for all "
                   "(docs/experiments.md §4)")  # fmt: skip
    p.add_argument("-o", "--output", help="write the predictions as JSON")
    p.add_argument("--plot", help="write a PNG of speed-up against nodes")


def run(args: argparse.Namespace) -> int:
    from poseidon.commands._common import fail
    from poseidon.config import Config, parse_compression, parse_positive
    from poseidon.experiments.emulation import TCP_GOODPUT_TBF
    from poseidon.experiments.every_node import EveryNode
    from poseidon.experiments.experiment import check_profile
    from poseidon.experiments.predict import TCP_GOODPUT_ETHERNET, Compression, Layout, Link
    from poseidon.experiments.report import Cell, Results, write_outputs
    from poseidon.experiments.resolve import resolve_model, resolve_profile
    from poseidon.experiments.tune import format_layer_schemes, predict
    from poseidon.experiments.units import (
        check_chunk_bytes,
        parse_bandwidth,
        parse_list,
        parse_nodes,
    )

    try:
        nodes = parse_nodes(args.nodes)
        modes = parse_list(args.modes, MODES, "mode")
        bandwidth = parse_bandwidth(args.bandwidth)
        label, prototxt = resolve_model(args.model)
        profile_path = resolve_profile(args.profile, label)
        profile, batch = check_profile(profile_path, prototxt, None)
        check_chunk_bytes(args.chunk_bytes)
        allowed = Config(compression=parse_compression(args.compression, "--compression"),
                         powersgd_rank=parse_positive(str(args.powersgd_rank),
                                                      "--powersgd-rank")).allowance()  # fmt: skip
        compression = Compression(*allowed)
        g = parse_positive(str(args.workers_per_node), "--workers-per-node")
        local_bps = parse_bandwidth(args.local_bandwidth) if args.local_bandwidth != "0" else 0
        every = None
        if args.every_node is not None:
            if not args.every_node >= 0:
                raise ValueError(f"--every-node {args.every_node}: want a spread >= 0")
            every = EveryNode(sigma=args.every_node)
    except ValueError as e:
        return fail("predict", e)
    goodput = TCP_GOODPUT_TBF if args.framing == "tbf" else TCP_GOODPUT_ETHERNET
    link = Link(bandwidth, goodput)
    local = Link(local_bps, 1.0, 0.0) if local_bps else None
    layouts = [Layout(g, True, local), Layout(g, False)] if g > 1 else [Layout()]
    results = Results(label, profile.label(), bandwidth, batch, "predicted", workers_per_node=g)
    results.info = {"framing": args.framing, "goodput": goodput, "chunk_bytes": args.chunk_bytes,
                    "compression": f"{compression.kind}:{compression.powersgd_rank}",
                    "local_bandwidth_bps": local_bps,
                    "every_node_sigma": args.every_node}  # fmt: skip
    try:
        predictions = predict(profile, modes, nodes, link, args.chunk_bytes, compression, layouts,
                              every)  # fmt: skip
    except ValueError as e:
        return fail("predict", e)
    for prediction in predictions:
        extra = {
            "compute_s": prediction.compute_s,
            "rebuild_s": prediction.rebuild_s,
            "wait_s": prediction.wait_s,
            "bytes_per_node": prediction.bytes_per_node,
            "link_busy": prediction.link_busy(link),
            "saturated": prediction.saturated(link),
            "every_node": prediction.every_node,
        }
        if prediction.bounds_s is not None:
            extra["fluid_s"], extra["simulated_s"] = prediction.bounds_s
        if prediction.mode == "poseidon-tuned":
            extra["layer_schemes"] = format_layer_schemes(prediction.layer_schemes)
        results.add(Cell(prediction.mode, prediction.nodes, prediction.iteration_s, extra=extra))
    single = {m: p.iteration_s for m in modes for p in [predict(profile, [m], [1], link)[0]]}
    results.update_speedups(single)
    write_outputs(results, args.output, args.plot)
    saturated = [p for p in predictions if p.saturated(link) and not p.every_node]
    if saturated:
        print(saturation_note(saturated, link))
    between = [p for p in predictions if p.bounds_s is not None]
    if between:
        print(bounds_note(between))
    return 0


def bounds_note(cells: list[CellPrediction]) -> str:
    """The ends of the range each simulated cell's estimate lies in (every_node.py, Note
    [between the bounds])."""
    listed = "; ".join(f"{c.mode} at P={c.nodes}: {c.iteration_s:.4f} s, from {c.bounds_s[0]:.4f}"
                       f" to {c.bounds_s[1]:.4f}" for c in cells if c.bounds_s)  # fmt: skip
    return ("note: simulated node by node, each read midway between the fluid bound and the "
            f"simulation (docs/experiments.md §4): {listed}")  # fmt: skip


def saturation_note(cells: list[CellPrediction], link: Link) -> str:
    """The caution printed under the table for cells that are lower bounds (predict.py,
    Note [saturated cells])."""
    from poseidon.experiments.predict import SATURATED_LINK_BUSY

    by_mode: dict[str, list[str]] = {}
    for cell in cells:
        by_mode.setdefault(cell.mode, []).append(f"P={cell.nodes} ({cell.link_busy(link):.0%})")
    listed = "; ".join(f"{mode} at {', '.join(c)}" for mode, c in by_mode.items())
    return (f"note: {listed}: a PS mode on a link busy for {SATURATED_LINK_BUSY:.0%} or more "
            "of the iteration, where emulated runs took up to 26% longer than predicted (a "
            "round waits for the slowest worker's push): read their times as lower bounds "
            "and their speed-ups as upper bounds, or simulate them node by node with "
            "--every-node 0 (docs/experiments.md §4)")  # fmt: skip
