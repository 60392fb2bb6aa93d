"""Run one KV-store server shard: it registers with the coordinator, takes
the chunks the plan assigns to it, and sums the workers' pushes round by
round. Exits 0 when the job ends normally, 1 (reason and the rounds left
open on stderr) when it aborts."""

from __future__ import annotations

import argparse

from poseidon.commands._common import (
    SettingError,
    add_cluster_arguments,
    config_from_args,
    fail,
    run_node,
)

HELP = "run a KV-store server shard"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rank", type=int, help="shard index, 0..P2-1 (POSEIDON_RANK)")
    p.add_argument("--coordinator", help="coordinator host:port (POSEIDON_COORDINATOR)")
    p.add_argument("--listen", help="host:port for worker connections (POSEIDON_LISTEN)")
    add_cluster_arguments(p)


def run(args: argparse.Namespace) -> int:
    from poseidon import _C

    try:
        cfg = config_from_args(
            args, role="server", rank=args.rank, coordinator=args.coordinator, listen=args.listen
        )
        node = _C.KVServer(cfg.to_native())
    except (SettingError, _C.CommError) as e:
        return fail("server", e)
    return run_node(
        node, f"server {cfg.rank}", f"poseidon server {cfg.rank} listening on {node.address}"
    )
