"""How a training process joins a Poseidon job, whoever started it; its Session; and how it
leaves. Front-end neutral: the Caffe engine (caffe/parallel/attach.py) and poseidon.torch both
join through here.

- `poseidon launch -n 4 -- caffe train ...` (or `-- python train.py`): the launcher has
  started the coordinator and the shards and set POSEIDON_* (coordinator, token, counts,
  rank); the worker joins, running the shard of its rank in its own process when
  POSEIDON_COLOCATE says so.
- `torchrun --nproc-per-node 4 train.py` (or any launcher that sets RANK, WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT): nobody started a coordinator, so the job hosts itself: rank 0
  runs the coordinator at MASTER_ADDR:(MASTER_PORT+1), every rank runs one KV-store shard in
  its own process (P2 = P1, the paper's layout), and the cluster token, which only rank 0
  draws, reaches the others through torch.distributed's default group when one exists, else
  through a TCPStore of our own at MASTER_ADDR:(MASTER_PORT+2) — as trusted as torchrun's own
  rendezvous, no more. A process may join several jobs one after another.
  SLURM (`srun`) and Open MPI (`mpirun`) set the ranks but no address: managers.py derives
  MASTER_ADDR and MASTER_PORT from what they do set, where it can.
- pycaffe's `caffe.NCCL(solver, uid)`: the processes host the job among themselves from a
  uid (poseidon/rendezvous.py); rank 0 runs the coordinator (`connect(...,
  host_coordinator=True)`).
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
from poseidon.failures import explain
from poseidon.sync import managers

LOCALHOST = "127.0.0.1"
TOKEN_KEY = "poseidon/token"


class JobError(RuntimeError):
    """This process's part of a job failed to start or to end; the message says why."""


class JoinError(JobError):
    """The process cannot join the job; the message says why and what to set. `stage` is
    "settings", "coordinator" (rank 0 could not start it) or "connect"."""

    def __init__(self, message: str, stage: str = "connect") -> None:
        super().__init__(message)
        self.stage = stage


@dataclass
class Session:
    """This process's membership of a job: its settings, its connected worker, and the
    colocated shard and the coordinator it runs, if any (on threads: rendezvous.NodeThread)."""

    config: Config
    worker: _C.Worker
    shard: rendezvous.NodeThread | None = None
    coordinator: rendezvous.NodeThread | None = None

    def close(self, error: BaseException | None = None, timeout_s: float = 60.0) -> None:
        """End this process's part of the job: cleanly (the worker shuts down, then the
        colocated shard and the coordinator must end within `timeout_s`), or with `error`,
        aborting the job with the reason so that every other process stops too."""
        if error is not None:
            reason = f"worker {self.config.rank} failed: {error}"
            with contextlib.suppress(poseidon.CommError):  # aborted already (maybe the error)
                self.worker.abort(reason)
            with contextlib.suppress(poseidon.CommError):
                self.worker.shutdown()  # aborted: closes at once
            # Ended before the process may end (their C++ threads). The coordinator keeps the
            # reason; its teardown waits for every node to close, this worker's too (closed).
            for node in (self.shard, self.coordinator):
                if node is not None:
                    node.abort(reason)
            return
        self.worker.shutdown()
        for what, node in (("colocated shard", self.shard), ("coordinator", self.coordinator)):
            if node is not None and not node.join(timeout_s):
                raise JobError(f"{what} of worker {self.config.rank} still running "
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
    if not _launched_by_poseidon(env):
        managers.apply_meeting_point(env)  # SLURM's and single-machine MPI's MASTER_ADDR
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
        raise JoinError(f"poseidon settings: {e}", stage="settings") from None
    if "MASTER_ADDR" not in env:
        size = next((f"{name}={env[name]}" for name in LAUNCHER_SIZE if name in env),
                    f"POSEIDON_NUM_WORKERS={probe.num_workers}")  # fmt: skip
        across = ""
        if "OMPI_COMM_WORLD_SIZE" in env:
            across = ("; Open MPI across machines names no host: pass `mpirun -x "
                      "MASTER_ADDR=<the first host> ...`")  # fmt: skip
        raise JoinError(f"worker {probe.rank}: a job of {probe.num_workers} workers ({size}) "
                        "but no address to meet at: set MASTER_ADDR and MASTER_PORT (torchrun "
                        f"does), or start the job with `poseidon launch`{across}",
                        stage="settings")  # fmt: skip
    token = _shared_token(probe.rank, probe.num_workers, env, probe.timeout_ms / 1e3)
    # One shard per machine, inside its leader (every worker's, with one worker per machine).
    servers = probe.num_workers // probe.workers_per_host
    return probe.replace(token=token, num_servers=servers, colocate=True), True


def connect(config: Config, host_coordinator: bool = False) -> Session:
    """Join the job `config` describes: start the coordinator first when this process hosts
    the job and is rank 0, the colocated shard of this rank when the layout has one, then
    connect the worker. Raises JoinError naming the stage and the address; whatever was
    started is aborted first."""
    coordinator = None
    if host_coordinator and config.rank == 0:
        try:
            coordinator = rendezvous.NodeThread.coordinator(config)
        except poseidon.CommError as e:
            raise JoinError(f"worker 0: cannot start the coordinator at {config.coordinator}: "
                            f"{e}", stage="coordinator") from None  # fmt: skip
    native = config.to_native()
    shard = None
    hosted = config.colocated_shard()
    if hosted is not None:
        shard = rendezvous.NodeThread.shard(config.replace(rank=hosted))
        native.local_server = shard.node.local_address
    worker = None
    try:
        worker = _C.Worker(native)
        worker.connect()
        return Session(config, worker, shard, coordinator)
    except BaseException as e:
        # The failed worker is dropped first: a node's abort waits for the nodes of this
        # process to close, and a worker still referenced here would hold it up.
        worker = None
        for node in (shard, coordinator):
            if node is not None:  # ended before the process may end (its C++ threads)
                node.abort(f"worker {config.rank} failed to join the job")
        if isinstance(e, poseidon.CommError):
            raise JoinError(f"worker {config.rank}: joining the job of coordinator "
                            f"{config.coordinator} failed: "
                            f"{explain(e, config.colocated_shards, config.workers_per_host)}"
                            ) from None  # fmt: skip
        raise


def join(overrides: dict[str, object] | None = None) -> Session:
    """Join (or host) the job described by the environment; see the module's docstring."""
    config, hosted = job_config(overrides)
    return connect(config, host_coordinator=hosted)
