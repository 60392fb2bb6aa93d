"""What `poseidon experiment` and `poseidon predict` print and write: a table of iteration
time and speed-up per mode and node count, the JSON file, and the figure.

JSON schema (more keys allowed): {"model": str, "profile": str, "bandwidth_bps": float,
"cells": [{"mode": str, "nodes": int, "iteration_s": float, "images_per_s": float,
"speedup": float, ...}, ...], "workers_per_node": int, ...}. A cell's speed-up is its
images/s over the same mode's on one worker (weak scaling: the batch per worker is fixed),
i.e. P·G · t(1) / t(P) with G workers on each of P nodes; a mode `X-flat` (several workers
per node, no local aggregation) is compared with X's one worker.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from poseidon.experiments.units import format_bandwidth

MODE_LABELS = {
    "ps-nooverlap": "Caffe+PS (ps-nooverlap)",
    "wfbp": "Caffe+WFBP (wfbp)",
    "poseidon": "Poseidon (WFBP + HybComm)",
    "allreduce": "DDP-style all-reduce",
    "poseidon-tuned": "Poseidon, plan by time (tuned)",
    "poseidon-flat": "Poseidon, no local aggregation (flat)",
    "wfbp-flat": "Caffe+WFBP, no local aggregation (flat)",
    "ps-nooverlap-flat": "Caffe+PS, no local aggregation (flat)",
}


def base_mode(mode: str) -> str:
    """The mode whose one worker a cell's speed-up is over: `poseidon-flat` -> `poseidon`."""
    return mode.removesuffix("-flat")


@dataclass
class Cell:
    mode: str
    nodes: int
    iteration_s: float
    images_per_s: float = 0.0
    speedup: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(out.pop("extra"))
        return out


_CELL_KEYS = ("mode", "nodes", "iteration_s")  # what every cell of a file has
_CELL_FIELDS = (*_CELL_KEYS, "images_per_s", "speedup")  # Cell's own; the rest is `extra`


@dataclass
class Results:
    model: str
    profile: str
    bandwidth_bps: float | None
    batch: int
    kind: str  # "emulated", "cluster" or "predicted"
    cells: list[Cell] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    workers_per_node: int = 1

    def add(self, cell: Cell) -> None:
        cell.images_per_s = cell.nodes * self.workers_per_node * self.batch / cell.iteration_s
        self.cells.append(cell)
        self.update_speedups()

    def update_speedups(self, single_node_s: dict[str, float] | None = None) -> None:
        """Speed-up over the same mode on one worker (measured — a one-node cell when a node
        has one worker — else `single_node_s`, by mode)."""
        base = dict(single_node_s or {})
        for cell in self.cells:
            if cell.nodes == 1 and self.workers_per_node == 1:
                base[cell.mode] = cell.iteration_s
        workers = self.workers_per_node
        for cell in self.cells:
            one = base.get(cell.mode, base.get(base_mode(cell.mode)))
            if one is not None:
                cell.speedup = cell.nodes * workers * one / cell.iteration_s

    def cell(self, mode: str, nodes: int) -> Cell | None:
        return next((c for c in self.cells if c.mode == mode and c.nodes == nodes), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "profile": self.profile,
            "bandwidth_bps": self.bandwidth_bps,
            "batch": self.batch,
            "kind": self.kind,
            "workers_per_node": self.workers_per_node,
            **self.info,
            "cells": [c.as_json() for c in self.cells],
        }

    @classmethod
    def load(cls, path: str) -> Results:
        """A file that save() wrote, the figure's input again (older files lack some keys;
        the header's required ones are named when missing)."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        missing = [k for k in ("model", "batch", "kind", "cells") if k not in data]
        if missing:
            raise ValueError(f"{path}: not a results file of poseidon experiment/predict "
                             f"(no {', '.join(missing)})")  # fmt: skip
        cells = []
        for number, c in enumerate(data["cells"]):
            if not all(k in c for k in _CELL_KEYS):
                raise ValueError(f"{path}: cell {number} lacks one of {', '.join(_CELL_KEYS)}")
            cells.append(Cell(c["mode"], c["nodes"], c["iteration_s"], c.get("images_per_s", 0.0),
                              c.get("speedup", 0.0),
                              {k: v for k, v in c.items() if k not in _CELL_FIELDS}))  # fmt: skip
        header = ("model", "profile", "bandwidth_bps", "batch", "kind", "workers_per_node", "cells")
        return cls(data["model"], data.get("profile", ""), data.get("bandwidth_bps"), data["batch"],
                   data["kind"], cells, {k: v for k, v in data.items() if k not in header},
                   data.get("workers_per_node", 1))  # fmt: skip

    def save(self, path: str) -> None:
        """Atomically: a half-written file never replaces a good one."""
        temporary = f"{path}.tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=1)
            f.write("\n")
        os.replace(temporary, path)

    # ----- the table --------------------------------------------------------------------------
    def table(self) -> str:
        modes = list(dict.fromkeys(c.mode for c in self.cells))
        nodes = sorted({c.nodes for c in self.cells})
        link = format_bandwidth(self.bandwidth_bps) if self.bandwidth_bps else "real links"
        per = (f"batch {self.batch} per worker, {self.workers_per_node} workers per node"
               if self.workers_per_node > 1 else f"batch {self.batch} per node")  # fmt: skip
        lines = [
            f"{self.model}: {self.kind}, {link}, {per}; profile {self.profile or '(real compute)'}"
        ]
        for key in ("scaling", "note"):
            if self.info.get(key):
                lines.append(str(self.info[key]))
        one = "1 worker" if self.workers_per_node > 1 else "1 node"
        lines.append(f"speed-up over {one} (iteration s, images/s)")
        width = max([14, *(len(m) + 1 for m in modes)])
        header = f"{'mode':<{width}}" + "".join(f"{'P=' + str(p):>26}" for p in nodes)
        lines.append(header)
        for mode in modes:
            row = f"{mode:<{width}}"
            for p in nodes:
                c = self.cell(mode, p)
                if c is None:
                    text = "-"
                else:  # no speed-up without a one-node time (measured or predicted)
                    speedup = f"{c.speedup:6.2f}x" if c.speedup else "     -"
                    text = f"{speedup} ({c.iteration_s:.3f} s, {c.images_per_s:7.1f})"
                row += f"{text:>26}"
            lines.append(row)
        return "\n".join(lines)


def write_outputs(results: Results, output: str | None, plot_path: str | None) -> None:
    """What both commands end with: the table (and the plans poseidon-tuned ran), the JSON,
    the figure."""
    print(results.table())
    for cell in results.cells:
        if "layer_schemes" in cell.extra:
            plan = cell.extra["layer_schemes"] or "(BestScheme's own plan)"
            print(f"poseidon-tuned on {cell.nodes} node(s): POSEIDON_LAYER_SCHEMES={plan}")
    if output:
        results.save(output)
        print(f"results: {output}")
    if plot_path:
        plot(results, plot_path)
        print(f"figure: {plot_path}")


def plot(results: Results, path: str, title: str | None = None) -> None:
    """Speed-up against nodes, one line per mode and the linear line, as the paper's
    figures show scaling."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("--plot needs matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = sorted({c.nodes for c in results.cells})
    g = results.workers_per_node
    figure, axis = plt.subplots(figsize=(5.2, 4.2))
    axis.plot(nodes, [g * p for p in nodes], color="0.6", linestyle="--", label="linear")
    for mode in dict.fromkeys(c.mode for c in results.cells):
        cells = sorted((c for c in results.cells if c.mode == mode), key=lambda c: c.nodes)
        axis.plot(
            [c.nodes for c in cells],
            [c.speedup for c in cells],
            marker="o",
            label=MODE_LABELS.get(mode, mode),
        )
    link = format_bandwidth(results.bandwidth_bps) if results.bandwidth_bps else "real links"
    axis.set_title(title or f"{results.model}, {link} ({results.kind})", fontsize=10)
    axis.set_xlabel(f"nodes ({g} workers each)" if g > 1 else "nodes")
    axis.set_ylabel("speed-up over one worker" if g > 1 else "speed-up")
    axis.set_xticks(nodes)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
