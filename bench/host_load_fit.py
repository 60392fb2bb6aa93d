"""Where the dilation rule's host-work constants come from (python/poseidon/experiments/
run.py, Note [host load]): a non-negative least-squares fit of the Poseidon cells'
measured CPU per worker and iteration (host_load x wall iteration x cores / workers) in
docs/results, on what expected_host_load counts — layers, MB of the byte-scaled model,
synchronised layers with a local stage, and wall seconds (with and without one). Prints
the constants and each cell's measured and fitted CPU.

    python3 bench/host_load_fit.py [--cores 2]      (the cores of the machine that ran them)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from poseidon.experiments.profile import load_profile
from poseidon.experiments.resolve import resolve_profile

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
NAMES = ("s per layer", "s per MB", "s per local layer", "cores per worker",
         "cores per local worker")  # fmt: skip


def rows(cores: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    labels, features, cpu = [], [], []
    for path in sorted(RESULTS.glob("*.emulated.json")):
        data = json.loads(path.read_text())
        if "--compression" in data["command"] or "titanx" not in data["profile"]:
            continue
        profile = load_profile(resolve_profile("titanx-maxwell", data["model"]))
        g = data.get("workers_per_node", 1)
        synced = sum(1 for layer in profile.layers if layer.blobs)
        mb = profile.model_bytes / data["byte_scale"] / 1e6
        for cell in data["cells"]:
            if cell["mode"] not in ("poseidon", "poseidon-flat") or "host_load" not in cell:
                continue
            local = float(g > 1 and cell["mode"] == "poseidon")
            wall = cell["wall_iteration_s"]
            workers = cell["nodes"] * g
            labels.append(f"{path.name} {cell['mode']} {cell['nodes']}x{g} d={cell['dilation']:g}")
            features.append([len(profile.layers), mb, local * synced, wall, local * wall])
            cpu.append(cell["host_load"] * wall * cores / workers)
    return labels, np.array(features), np.array(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    labels, a, y = rows(args.cores)
    x, _ = nnls(a, y)
    for name, value in zip(NAMES, x):
        print(f"{name:>24}: {value:.3g}")
    for label, measured, fitted in zip(labels, y, a @ x):
        print(f"{label:60s} {1e3 * measured:7.1f} ms {1e3 * fitted:7.1f} ms")


if __name__ == "__main__":
    main()
