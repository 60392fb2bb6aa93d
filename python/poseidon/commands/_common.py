"""Pieces shared by the subcommands that run a node: flags, settings, the run loop."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any, Protocol

from poseidon.config import SCHEMES, Config, SettingError


class Node(Protocol):
    def run(self) -> None: ...
    def abort(self, reason: str) -> None: ...


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """Flags every node takes; each overrides its POSEIDON_* variable."""
    p.add_argument("--workers", type=int, help="P1, number of workers (POSEIDON_NUM_WORKERS)")
    p.add_argument("--servers", type=int, help="P2, number of shards (POSEIDON_NUM_SERVERS)")
    p.add_argument("--token", help="cluster token (POSEIDON_TOKEN; prefer the variable)")
    p.add_argument("--timeout-ms", type=int, help="limit of every wait (POSEIDON_TIMEOUT_MS)")
    p.add_argument("--chunk-bytes", help="PS chunk size, default 1MiB (POSEIDON_CHUNK_BYTES)")
    p.add_argument("--scheme", choices=SCHEMES, help="force every layer (POSEIDON_SCHEME)")
    p.add_argument(
        "--verbose", action="store_true", default=None, help="log connections (POSEIDON_VERBOSE)"
    )


def config_from_args(args: argparse.Namespace, **fields: Any) -> Config:
    """The environment, then the flags given on the command line."""
    return Config.from_env(
        num_workers=args.workers,
        num_servers=args.servers,
        token=args.token,
        timeout_ms=args.timeout_ms,
        chunk_bytes=args.chunk_bytes,
        scheme=args.scheme,
        verbose=args.verbose,
        **fields,
    )


def fail(name: str, message: object, code: int = 2) -> int:
    print(f"poseidon {name}: {message}", file=sys.stderr, flush=True)
    return code


def run_node(node: Node, name: str, announce: str) -> int:
    """Prints `announce`, runs node.run() to completion; returns 0, or 1 on abort.

    run() blocks in C++ with the GIL released; it runs on a helper thread so
    the main thread keeps receiving signals. SIGINT and SIGTERM abort the
    node (and through the coordinator, the job) with a reason that names the
    signal. The handlers are in place before `announce` is printed, so a
    signal sent as soon as the node says it listens is never lost.
    """
    outcome: dict[str, BaseException] = {}

    def on_signal(signum: int, frame: object) -> None:
        node.abort(f"{name} received {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(announce, flush=True)

        def target() -> None:
            try:
                node.run()
            except BaseException as e:  # reported below, on the main thread
                outcome["error"] = e

        thread = threading.Thread(target=target, name=f"poseidon-{name}", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    error = outcome.get("error")
    if error is not None:
        return fail(name, error, 1)
    return 0


__all__ = ["SettingError", "add_cluster_arguments", "config_from_args", "fail", "run_node"]
