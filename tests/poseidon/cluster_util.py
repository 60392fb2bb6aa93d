"""Helpers for the poseidon tests: an in-process cluster on threads, and
real processes started through the `poseidon` command."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from poseidon import _C
from poseidon.config import Config

TOKEN = "pytest-token"
HERE = Path(__file__).resolve().parent


def base_config(workers: int, servers: int, **changes: object) -> Config:
    cfg = Config(
        num_workers=workers,
        num_servers=servers,
        token=TOKEN,
        coordinator="127.0.0.1:0",
        listen="127.0.0.1:0",
        timeout_ms=20000,
        heartbeat_interval_ms=200,
        heartbeat_timeout_ms=3000,
        chunk_bytes=64 << 10,
    )
    return cfg.replace(**changes)


@dataclass
class ThreadCluster:
    """Coordinator and shards on threads of this process (their run() releases the GIL)."""

    config: Config
    errors: dict[str, BaseException] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    # colocated: worker r reaches shard r through its in-process door.
    local_servers: list[str] = field(default_factory=list)
    servers: list[_C.KVServer] = field(default_factory=list)

    def worker_config(self, rank: int) -> object:
        native = self.config.replace(role="worker", rank=rank).to_native()
        if rank < len(self.local_servers):
            native.local_server = self.local_servers[rank]
        return native


@contextlib.contextmanager
def thread_cluster(
    workers: int, servers: int, colocated: bool = False, **changes: object
) -> Iterator[ThreadCluster]:
    """Coordinator and `servers` shards on threads; with `colocated`, worker r dials
    shard r in-process (Config.local_server), as a worker running its own shard does."""
    cfg = base_config(workers, servers, **changes)
    coordinator = _C.Coordinator(cfg.replace(role="coordinator").to_native())
    cluster = ThreadCluster(cfg.replace(coordinator=coordinator.address))
    nodes: list[tuple[str, object]] = [("coordinator", coordinator)]
    for s in range(servers):
        native = cluster.config.replace(role="server", rank=s).to_native()
        server = _C.KVServer(native)
        nodes.append((f"server {s}", server))
        cluster.servers.append(server)
        if colocated:
            cluster.local_servers.append(server.local_address)

    def run(name: str, node: object) -> None:
        try:
            node.run()  # type: ignore[attr-defined]
        except BaseException as e:
            cluster.errors[name] = e

    for name, node in nodes:
        t = threading.Thread(target=run, args=(name, node), daemon=True)
        t.start()
        cluster.threads.append(t)
    try:
        yield cluster
    finally:
        for t in cluster.threads:
            t.join(30)


def run_workers(cluster: ThreadCluster, body, count: int) -> dict[int, BaseException]:
    """Runs body(worker, rank) on one thread per worker (after connect)."""
    errors: dict[int, BaseException] = {}

    def one(rank: int) -> None:
        try:
            w = _C.Worker(cluster.worker_config(rank))
            w.connect()
            body(w, rank)
        except BaseException as e:
            errors[rank] = e

    threads = [threading.Thread(target=one, args=(r,)) for r in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


# ---- real processes ---------------------------------------------------------------------------


def cluster_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        POSEIDON_TOKEN=TOKEN,
        POSEIDON_TIMEOUT_MS="30000",
        POSEIDON_HEARTBEAT_INTERVAL_MS="200",
        POSEIDON_HEARTBEAT_TIMEOUT_MS="2000",
        POSEIDON_CHUNK_BYTES="256KiB",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def poseidon_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "poseidon.cli", *args]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    stdout_path: Path
    stderr_path: Path

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def spawn(name: str, cmd: list[str], env: dict[str, str], tmp: Path) -> Proc:
    out = tmp / f"{name.replace(' ', '_')}.out"
    err = tmp / f"{name.replace(' ', '_')}.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        p = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe)
    return Proc(name, p, out, err)


def wait_for_output(proc: Proc, needle: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = proc.stdout()
        if needle in text:
            return text
        if proc.popen.poll() is not None:
            break
        time.sleep(0.02)
    raise AssertionError(
        f"{proc.name} never printed {needle!r}; rc={proc.popen.poll()}\n"
        f"stdout:\n{proc.stdout()}\nstderr:\n{proc.stderr()}"
    )


def listening_address(proc: Proc, timeout_s: float = 30) -> str:
    text = wait_for_output(proc, "listening on ", timeout_s)
    line = next(x for x in text.splitlines() if "listening on " in x)
    return line.rsplit(" ", 1)[1]
