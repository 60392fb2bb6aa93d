"""Where the dilation rule's host-work constants come from (python/poseidon/experiments/
run.py, Note [host load]): a non-negative least-squares fit of the Poseidon cells'
measured CPU per worker and iteration (host_load x wall iteration x cores / workers) in
docs/results, on what expected_host_load counts — layers, MB of the byte-scaled model,
synchronised layers with a local stage, and wall seconds (with and without one). Prints
the constants, each cell's measured and fitted CPU with the load the rule expects of it,
and, for every emulated sweep in docs/results, the dilation each node count ran at, the
one the rule picks now and the one it would pick with the fitted constants.

    python3 bench/host_load_fit.py [--cores N]      (default: each file's `cores`, those of
                                                     the machine that ran it)
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from poseidon.experiments import run
from poseidon.experiments.profile import Profile, load_profile
from poseidon.experiments.resolve import resolve_profile

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
CONSTANTS = ("HOST_S_PER_LAYER", "HOST_S_PER_MODEL_BYTE", "HOST_S_PER_LOCAL_LAYER",
             "HOST_CORES_PER_WORKER", "HOST_CORES_PER_LOCAL_WORKER")  # fmt: skip
# The fit's unknowns are per MB where the constant is per byte.
UNITS = (1.0, 1e-6, 1.0, 1.0, 1.0)


def sweeps() -> Iterator[tuple[str, dict, Profile]]:
    """Every exact-plan emulated sweep in docs/results with its profile (the zoo's shipped
    ones, or bench/nets' for the nets the predictor had not seen)."""
    for path in sorted(RESULTS.glob("*.emulated.json")):
        data = json.loads(path.read_text())
        if "--compression" in data["command"]:
            continue
        local = ROOT / "bench" / "nets" / data["profile"]
        source = str(local) if local.is_file() else resolve_profile(data["profile"], data["model"])
        yield path.name, data, load_profile(source)


def rows(
    cores: int | None,
) -> tuple[list[str], np.ndarray, np.ndarray, list[tuple[float, float]]]:
    """Per Poseidon cell: its label, what the fit counts, its measured CPU per worker and
    iteration, and its measured and expected (by the rule as it is) host load."""
    labels, features, cpu, loads = [], [], [], []
    for name, data, profile in sweeps():
        if "titanx" not in data["profile"]:
            continue
        g = data.get("workers_per_node", 1)
        ran_on = cores or data["cores"]
        mb = profile.model_bytes / data["byte_scale"] / 1e6
        for cell in data["cells"]:
            if cell["mode"] not in ("poseidon", "poseidon-flat") or "host_load" not in cell:
                continue
            local = float(g > 1 and cell["mode"] == "poseidon")
            wall = cell["wall_iteration_s"]
            workers = cell["nodes"] * g
            labels.append(f"{name} {cell['mode']} {cell['nodes']}x{g} d={cell['dilation']:g}")
            features.append([len(profile.layers), mb, local * profile.synced_layers, wall,
                             local * wall])  # fmt: skip
            cpu.append(cell["host_load"] * wall * ran_on / workers)
            per_node = g if cell["mode"] == "poseidon" else 1
            nodes = cell["nodes"] * g // per_node
            rule = run.expected_host_load(profile, nodes, per_node, data["byte_scale"],
                                          cell["dilation"], ran_on)  # fmt: skip
            loads.append((cell["host_load"], rule))
    return labels, np.array(features), np.array(cpu), loads


@contextlib.contextmanager
def constants(values: list[float]) -> Iterator[None]:
    """The rule with other host-work constants, for as long as the block runs."""
    kept = [getattr(run, name) for name in CONSTANTS]
    try:
        for name, value in zip(CONSTANTS, values):
            setattr(run, name, value)
        yield
    finally:
        for name, value in zip(CONSTANTS, kept):
            setattr(run, name, value)


def picks(data: dict, profile: Profile, cores: int | None) -> dict[int, float]:
    g = data.get("workers_per_node", 1)
    return {p: run.choose_dilation(p, data["bandwidth_bps"], data["byte_scale"], profile, g,
                                   cores or data["cores"], data.get("gso", "on") != "off")
            for p in sorted({cell["nodes"] for cell in data["cells"]})}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, help="instead of each results file's `cores`")
    args = parser.parse_args()
    labels, a, y, loads = rows(args.cores)
    x, _ = nnls(a, y)
    fitted = [value * unit for value, unit in zip(x, UNITS)]
    for name, value, now in zip(CONSTANTS, fitted, (getattr(run, n) for n in CONSTANTS)):
        print(f"{name:>28}: {value:.3g} (the rule's: {now:.3g})")
    print(f"\n{'cell':60s} {'CPU measured':>12} {'fitted':>8}  load measured / the rule's")
    for label, measured, fit, load in zip(labels, y, a @ x, loads):
        print(
            f"{label:60s} {1e3 * measured:9.1f} ms {1e3 * fit:5.1f} ms  "
            f"{load[0]:.3f} / {load[1]:.3f}"
        )
    print("\nsweep: nodes -> dilation run / the rule's now / fitted constants' (most host load)")
    for name, data, profile in sweeps():
        ran = {cell["nodes"]: cell["dilation"] for cell in data["cells"]}
        busiest: dict[int, float] = {}
        for cell in data["cells"]:
            busiest[cell["nodes"]] = max(busiest.get(cell["nodes"], 0.0),
                                         cell.get("host_load", 0.0))  # fmt: skip
        now = picks(data, profile, args.cores)
        with constants(fitted):
            refit = picks(data, profile, args.cores)
        cells = ", ".join(
            f"{p}: {ran[p]:g}/{now[p]:g}/{refit[p]:g} ({busiest[p]:.2f})" for p in now
        )
        print(f"{name:48s} {cells}")


if __name__ == "__main__":
    main()
