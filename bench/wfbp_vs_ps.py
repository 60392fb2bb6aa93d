"""WFBP against Caffe+PS (ps-nooverlap) on capped links, repeated in pairs.

One cluster of P emulated hosts (poseidon/experiments/emulation.py, links capped by tc), the
scaling bench's FC-heavy net (bench/scaling_net.py); wfbp and ps-nooverlap take turns,
`--pairs` times, so that load changes hit both alike. Prints each run's iterations/s (the
slowest worker's) and the ratio of the means. Needs root. Transport settings come from the
environment (e.g. POSEIDON_SOCKET_BUFFER_BYTES, POSEIDON_CHUNK_BYTES).

    sudo .venv/bin/python bench/wfbp_vs_ps.py [--workers 4] [--pairs 3] [--iters 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scaling import run_poseidon, write_solver  # noqa: E402

from poseidon.experiments.emulation import EmulatedHosts  # noqa: E402

MODES = ("wfbp", "ps-nooverlap")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rate-mbit", type=float, default=100.0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=8)
    args = parser.parse_args(argv)
    run_args = types.SimpleNamespace(warmup=args.warmup, iters=args.iters, batch=args.batch)
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as directory:
        solver = write_solver(directory, args.batch)
        with EmulatedHosts(args.workers, args.rate_mbit * 1e6) as cluster:
            for _ in range(args.pairs):
                for mode in MODES:
                    rate, _ = run_poseidon(mode, args.workers, cluster, solver, run_args)
                    rates[mode].append(rate)
                    print(f"{mode:>13} {rate:.4f} it/s", flush=True)
    means = {mode: statistics.mean(values) for mode, values in rates.items()}
    print(f"P={args.workers}, {args.rate_mbit:g} Mbit/s: wfbp/ps-nooverlap "
          f"{means['wfbp'] / means['ps-nooverlap']:.3f} (means {means['wfbp']:.4f}, "
          f"{means['ps-nooverlap']:.4f} it/s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
