"""How a PyTorch training process joins a Poseidon job, whoever started it.

- `poseidon launch -n 4 -- python train.py`: the launcher has started the coordinator and the
  shards and set POSEIDON_* (coordinator, token, counts, rank); the worker joins as a Caffe
  worker does (caffe/parallel.py), running the shard of its rank in its own process when
  POSEIDON_COLOCATE says so.
- `torchrun --nproc-per-node 4 train.py` (or any launcher that sets RANK, WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT): nobody started a coordinator, so the job hosts itself, as
  `caffe.NCCL` does: rank 0 runs the coordinator at MASTER_ADDR:(MASTER_PORT+1), every rank
  runs one KV-store shard in its own process (P2 = P1, the paper's layout), and the cluster
  token, which only rank 0 draws, reaches the others through torch.distributed's default
  group when one exists, else through a TCPStore of our own at MASTER_ADDR:(MASTER_PORT+2) —
  as trusted as torchrun's own rendezvous, no more. A process may join several jobs one
  after another (a new DistributedDataParallel after the last one closed).
- a single process with none of these: a job of one, hosted in the process.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import secrets
from dataclasses import dataclass

import poseidon
from poseidon import _C, rendezvous
from poseidon.config import LAUNCHER_SIZE, Config, SettingError

LOCALHOST = "127.0.0.1"
TOKEN_KEY = "poseidon/token"


class JoinError(RuntimeError):
    """The process cannot join the job; the message says why and what to set."""


@dataclass
class Session:
    config: Config
    worker: _C.Worker
    shard: rendezvous.NodeThread | None = None
    coordinator: rendezvous.NodeThread | None = None

    def close(self, error: BaseException | None = None, timeout_s: float = 60.0) -> None:
        """End this process's part of the job: cleanly, or (with `error`) aborting it with
        the reason so that every other process stops too."""
        if error is not None:
            with contextlib.suppress(poseidon.CommError):  # aborted already (maybe the error)
                self.worker.abort(f"worker {self.config.rank} failed: {error}")
            with contextlib.suppress(poseidon.CommError):
                self.worker.shutdown()  # aborted: closes at once
            for node in (self.shard, self.coordinator):
                if node is not None:  # ended before the process may end (its C++ threads)
                    node.abort(f"worker {self.config.rank} failed")
            return
        self.worker.shutdown()
        for what, node in (("colocated shard", self.shard), ("coordinator", self.coordinator)):
            if node is not None and not node.join(timeout_s):
                raise JoinError(f"{what} of worker {self.config.rank} still running "
                                f"{timeout_s:.0f}s after the job ended")  # fmt: skip


def _launched_by_poseidon(env: os._Environ[str] | dict[str, str]) -> bool:
    return "POSEIDON_COORDINATOR" in env or "POSEIDON_TOKEN" in env


# torchrun's path: one token store per process and rendezvous address, kept for the process's
# life (rank 0's serves the others), and one key per job the process joins, so that a script
# may train several models one after another (each a job of its own).
_token_stores: dict[tuple[str, int], object] = {}
_jobs_joined = itertools.count()


def _shared_token(rank: int, size: int, env: os._Environ[str] | dict[str, str],
                  timeout_s: float) -> str:  # fmt: skip
    """Rank 0's fresh token, on every rank (see the module's docstring)."""
    import torch.distributed as dist

    token = secrets.token_hex(16) if rank == 0 else ""
    job = next(_jobs_joined)
    if dist.is_available() and dist.is_initialized():
        box = [token]
        dist.broadcast_object_list(box, src=0)
        return str(box[0])
    address, port = env["MASTER_ADDR"], int(env.get("MASTER_PORT", "29500")) + 2
    where = f"{address}:{port} (MASTER_PORT + 2)"
    store = _token_stores.get((address, port))
    if store is None:
        try:
            # Rank 0 does not wait for the others here: the coordinator does, and names those
            # that never come.
            store = dist.TCPStore(address, port, size, rank == 0, wait_for_workers=False,
                                  timeout=datetime.timedelta(seconds=timeout_s))  # fmt: skip
        except (RuntimeError, OSError) as e:
            raise JoinError(f"worker {rank}: cannot reach the token store at {where}: "
                            f"{e}") from None  # fmt: skip
        _token_stores[(address, port)] = store
    key = f"{TOKEN_KEY}/{job}"
    if rank == 0:
        store.set(key, token)  # type: ignore[attr-defined]
        return token
    try:
        return store.get(key).decode()  # type: ignore[attr-defined]
    except (RuntimeError, OSError) as e:
        raise JoinError(f"worker {rank}: no token from rank 0 at {where} within "
                        f"{timeout_s:.0f}s: {e}") from None  # fmt: skip


def job_config(overrides: dict[str, object] | None = None) -> tuple[Config, bool]:
    """This process's worker settings, and whether it must host the job itself."""
    env = os.environ
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    try:
        if _launched_by_poseidon(env):
            return Config.from_env(role="worker", **overrides), False
        probe = Config.from_env(role="worker", token="-", **overrides)
        if probe.num_workers == 1:  # no launcher (or a job of one): hosted in this process
            port = rendezvous.free_port()
            config = probe.replace(num_servers=1, coordinator=f"{LOCALHOST}:{port}",
                                   token=secrets.token_hex(16), colocate=True)  # fmt: skip
            return config, True
    except SettingError as e:
        raise JoinError(f"poseidon.torch settings: {e}") from None
    if "MASTER_ADDR" not in env:
        size = next((f"{name}={env[name]}" for name in LAUNCHER_SIZE if name in env),
                    f"POSEIDON_NUM_WORKERS={probe.num_workers}")  # fmt: skip
        raise JoinError(f"worker {probe.rank}: a job of {probe.num_workers} workers ({size}) "
                        "but no address to meet at: set MASTER_ADDR and MASTER_PORT (torchrun "
                        "does), or start the job with `poseidon launch`")  # fmt: skip
    token = _shared_token(probe.rank, probe.num_workers, env, probe.timeout_ms / 1e3)
    return probe.replace(token=token, num_servers=probe.num_workers, colocate=True), True


def join(overrides: dict[str, object] | None = None) -> Session:
    """Join (or host) the job described by the environment; see the module's docstring."""
    config, hosted = job_config(overrides)
    coordinator = None
    if hosted and config.rank == 0:
        try:
            coordinator = rendezvous.NodeThread.coordinator(config)
        except poseidon.CommError as e:
            raise JoinError(f"worker 0: cannot start the coordinator at {config.coordinator}: "
                            f"{e}") from None  # fmt: skip
    native = config.to_native()
    shard = None
    if config.rank < config.colocated_shards:
        shard = rendezvous.NodeThread.shard(config)
        native.local_server = shard.node.local_address
    try:
        worker = _C.Worker(native)
        worker.connect()
    except BaseException as e:
        for node in (shard, coordinator):
            if node is not None:  # joined before the process may end (its C++ threads)
                node.abort(f"worker {config.rank} failed to join the job")
        if isinstance(e, poseidon.CommError):
            raise JoinError(f"worker {config.rank}: joining the job of coordinator "
                            f"{config.coordinator} failed: {e}") from None  # fmt: skip
        raise
    return Session(config, worker, shard, coordinator)
