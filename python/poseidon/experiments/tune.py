"""Poseidon with its plan chosen by time, not bytes: `poseidon-tuned`.

BestScheme (docs/paper.md §4) picks, for each FC layer, whichever of the PS and sufficient
factors moves fewer bytes. Bytes are not time: SFB's rebuild GEMM costs every node
2·M·N·K·P FLOPs each iteration, growing with the cluster, while a PS round's bytes cost
nothing when they hide behind the backward and forward passes (WFBP). With fast links the
PS wins a layer that bytes give to SFB; with slow ones the reverse.

`tune_layer_schemes` asks the predictor for every PS/SFB assignment of the FC layers (nets
have a few: VGG three, Inception-V3 one) and keeps the fastest on a derated link
(TUNE_LINK_SHARE); with more than
EXHAUSTIVE_UP_TO of them it flips one layer at a time from BestScheme's plan while a flip
shortens the predicted iteration. The
result is a POSEIDON_LAYER_SCHEMES value that `poseidon experiment --modes poseidon-tuned`
runs and checks.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

from poseidon.experiments.every_node import EveryNode, simulated
from poseidon.experiments.predict import (
    EXACT,
    PAPER_LAYOUT,
    TUNED,
    CellPrediction,
    Compression,
    Layout,
    Link,
    predict_cell,
)
from poseidon.experiments.profile import Profile
from poseidon.experiments.profile_layout import profile_plan

EXHAUSTIVE_UP_TO = 6  # FC layers: 2^6 predictions at most
# Plans are compared on a link this much slower than the fluid model's. Where the link is
# busy for more than about two thirds of the iteration the predictor is optimistic (it
# keeps the link busy to the last byte; real TCP between bulk-synchronous rounds does
# not): it read VGG19-22K within 1% at 5-10 GbE with Poseidon's plan (link busy 35-65%),
# 4.6% fast for WFBP at 20 GbE (73%), and the plan that moved fc7 and fc8 to the PS on
# 10 GbE (83%), predicted 1-2% faster than BestScheme's, ran 8-13% slower
# (docs/experiments.md §6.7). A plan must still win with 30% of the link lost.
TUNE_LINK_SHARE = 0.7


def tune_layer_schemes(
    profile: Profile, nodes: int, link: Link, chunk_bytes: int = 1 << 20
) -> tuple[CellPrediction, dict[str, str]]:
    """The fastest plan found and its prediction (mode TUNED). Only overrides that differ
    from BestScheme's choice are returned."""
    fc = [
        x.name
        for x in profile.layers
        if x.sync is not None and x.sync.kind == "FC" and not x.sync.late and x.sfb is not None
    ]
    bytes_rule = _schemes_chosen(profile, nodes, chunk_bytes)
    judged_on = replace(link, bandwidth_bps=link.bandwidth_bps * TUNE_LINK_SHARE)
    best = predict_cell(profile, "poseidon", nodes, judged_on, chunk_bytes)
    best_schemes: dict[str, str] = {}

    def trial(schemes: dict[str, str]) -> None:
        nonlocal best, best_schemes
        schemes = {k: v for k, v in schemes.items() if v != bytes_rule[k]}
        cell = predict_cell(
            profile, "poseidon", nodes, judged_on, chunk_bytes, layer_schemes=schemes
        )
        if cell.iteration_s < best.iteration_s * (1 - 1e-6):
            best, best_schemes = cell, schemes

    if len(fc) <= EXHAUSTIVE_UP_TO:
        for choice in itertools.product(("ps", "sfb"), repeat=len(fc)):
            trial(dict(zip(fc, choice)))
    else:  # one layer at a time, until no flip helps
        improved = True
        while improved:
            before = best.iteration_s
            for name in fc:
                current = best_schemes.get(name, bytes_rule[name])
                trial({**best_schemes, name: "ps" if current == "sfb" else "sfb"})
            improved = best.iteration_s < before
    best = predict_cell(profile, "poseidon", nodes, link, chunk_bytes, layer_schemes=best_schemes)
    best.mode = TUNED
    best.layer_schemes = best_schemes
    return best, best_schemes


def _schemes_chosen(profile: Profile, nodes: int, chunk_bytes: int) -> dict[str, str]:
    """BestScheme's choice ("ps" or "sfb") for every synchronised layer."""
    from poseidon import _C

    plan = profile_plan(profile, "poseidon", nodes, chunk_bytes)
    return {profile.layers[lp.layer_id].name: "sfb" if lp.scheme == _C.Scheme.SFB else "ps"
            for lp in plan.layers}  # fmt: skip


def format_layer_schemes(schemes: dict[str, str]) -> str:
    """The POSEIDON_LAYER_SCHEMES value: 'fc7=ps,fc8=ps' ('' for BestScheme's own plan)."""
    return ",".join(f"{name}={scheme}" for name, scheme in sorted(schemes.items()))


def predict(
    profile: Profile,
    modes: Sequence[str],
    nodes: Sequence[int],
    link: Link,
    chunk_bytes: int = 1 << 20,
    compression: Compression = EXACT,
    layouts: Sequence[Layout] = (PAPER_LAYOUT,),
    every: EveryNode | None = None,
) -> list[CellPrediction]:
    """Every (mode, layout, node count) cell; mode "poseidon-tuned" is Poseidon with the
    per-layer schemes tune_layer_schemes finds for that cell (among the exact ones; the
    paper's layout only); `compression` lets mode "poseidon" plan lossy schemes too. All-reduce
    takes the first layout's workers per node (it has no local aggregation of its own). With
    `every`, the saturated PS cells are simulated node by node (every_node.py)."""
    if TUNED in modes and any(x.per_node > 1 for x in layouts):
        raise ValueError("poseidon-tuned plans the paper's layout, one worker per node")
    cells = []
    for mode in modes:
        for layout in layouts[:1] if mode == "allreduce" else layouts:
            for p in nodes:
                if mode == TUNED:
                    cell, _ = tune_layer_schemes(profile, p, link, chunk_bytes)
                else:
                    cell = predict_cell(profile, mode, p, link, chunk_bytes,
                                        compression=compression, layout=layout)  # fmt: skip
                if every is not None:
                    cell = simulated(cell, profile, link, every, chunk_bytes, layout=layout,
                                     compression=compression)  # fmt: skip
                cells.append(cell)
    return cells
