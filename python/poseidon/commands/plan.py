"""Print the communication plan of a network: for every learnable layer its
shape, the bytes one node sends and receives per iteration under the
parameter server (PS) and under sufficient-factor broadcasting (SFB), and
the scheme BestScheme picks (reference §4; only FC layers can use SFB)."""

from __future__ import annotations

import argparse

HELP = "print PS vs SFB bytes per iteration and the chosen scheme for each layer"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="network prototxt")
    p.add_argument("--workers", type=int, required=True, help="P1, number of workers")
    p.add_argument("--servers", type=int, help="P2, number of shards (default: P1)")
    p.add_argument("--batch", type=int, help="K, samples per worker (default: the net's batch)")
    p.add_argument(
        "--layer-schemes",
        default="",
        help="per-layer choices over BestScheme's, e.g. fc7=ps,fc8=ps (POSEIDON_LAYER_SCHEMES)",
    )


def run(args: argparse.Namespace) -> int:
    from poseidon.commands._common import fail
    from poseidon.config import SettingError, parse_layer_schemes
    from poseidon.plan import format_plan, layers_from_prototxt, plan_rows

    servers = args.servers or args.workers
    if args.workers < 1 or servers < 1:
        return fail("plan", "--workers and --servers must be >= 1")
    if args.batch is not None and args.batch < 1:
        return fail("plan", "--batch must be >= 1")
    try:
        forced = parse_layer_schemes(args.layer_schemes, "--layer-schemes")
    except SettingError as e:
        return fail("plan", e)
    try:
        layers = layers_from_prototxt(args.model, args.batch)
    except (OSError, ValueError, RuntimeError) as e:
        return fail("plan", f"cannot load {args.model}: {e}")
    try:
        rows = plan_rows(layers, args.workers, servers, forced)
    except ValueError as e:
        return fail("plan", e)
    print(format_plan(rows, args.workers, servers))
    return 0
