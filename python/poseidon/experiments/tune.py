"""Poseidon with its plan chosen by time, not bytes: `poseidon-tuned`.

BestScheme (reference §4) picks, for each FC layer, whichever of the PS and sufficient
factors moves fewer bytes. Bytes are not time: SFB's rebuild GEMM costs every node
2·M·N·K·P FLOPs each iteration, growing with the cluster, while a PS round's bytes cost
nothing when they hide behind the backward and forward passes (WFBP). With fast links the
PS wins a layer that bytes give to SFB; with slow ones the reverse.

`tune_layer_schemes` asks the predictor for every PS/SFB assignment of the FC layers (nets
have a few: VGG three, Inception-V3 one) and keeps the fastest; with more than
EXHAUSTIVE_UP_TO of them it flips one layer at a time from BestScheme's plan while a flip
shortens the predicted iteration. The
result is a POSEIDON_LAYER_SCHEMES value that `poseidon experiment --modes poseidon-tuned`
runs and checks.
"""

from __future__ import annotations

import itertools

from poseidon.experiments.predict import TUNED, CellPrediction, Link, predict_cell
from poseidon.experiments.profile import Profile

EXHAUSTIVE_UP_TO = 6  # FC layers: 2^6 predictions at most


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
    best = predict_cell(profile, "poseidon", nodes, link, chunk_bytes)
    best_schemes: dict[str, str] = {}

    def trial(schemes: dict[str, str]) -> None:
        nonlocal best, best_schemes
        schemes = {k: v for k, v in schemes.items() if v != bytes_rule[k]}
        cell = predict_cell(profile, "poseidon", nodes, link, chunk_bytes, layer_schemes=schemes)
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
    best.mode = TUNED
    best.layer_schemes = best_schemes
    return best, best_schemes


def _schemes_chosen(profile: Profile, nodes: int, chunk_bytes: int) -> dict[str, str]:
    """BestScheme's choice ("ps" or "sfb") for every synchronised layer."""
    from poseidon.experiments.predict import _planned_layers

    planned = _planned_layers(profile, "poseidon", nodes, chunk_bytes)
    return {profile.layers[s.index].name: s.scheme.lower() for s in planned}


def format_layer_schemes(schemes: dict[str, str]) -> str:
    """The POSEIDON_LAYER_SCHEMES value: 'fc7=ps,fc8=ps' ('' for BestScheme's own plan)."""
    return ",".join(f"{name}={scheme}" for name, scheme in sorted(schemes.items()))
