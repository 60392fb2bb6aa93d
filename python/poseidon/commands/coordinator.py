"""Run the coordinator: rendezvous of P1 workers and P2 server shards, the
address book, the per-layer plan (BestScheme), barriers, heartbeats, and the
abort broadcast when any node dies or fails. Exits 0 when every worker has
shut down, 1 (reason on stderr) when the job aborts."""

from __future__ import annotations

import argparse

from poseidon.commands._common import (
    SettingError,
    add_cluster_arguments,
    config_from_args,
    fail,
    run_node,
)

HELP = "run the coordinator of a cluster"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", help="host:port to listen on (POSEIDON_COORDINATOR)")
    add_cluster_arguments(p)


def run(args: argparse.Namespace) -> int:
    from poseidon import _C

    try:
        cfg = config_from_args(args, role="coordinator", coordinator=args.address)
        node = _C.Coordinator(cfg.to_native())
    except (SettingError, _C.CommError) as e:
        return fail("coordinator", e)
    return run_node(node, "coordinator", f"poseidon coordinator listening on {node.address}")
