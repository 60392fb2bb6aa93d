"""How a Caffe training process joins a job and attaches to its Solver: from POSEIDON_*
variables (`poseidon launch`; `caffe train` under srun, mpirun or torchrun with
POSEIDON_ROLE=worker, a job the tasks host among themselves), from a uid (pycaffe's
caffe.NCCL), or, with POSEIDON_SYNC=allreduce, the DDP-style baseline's process group.
Joining itself is the core's (poseidon/sync/job.py); this file turns the job's settings
into a syncer of the Solver and the core's failures into the engine's errors.
"""

from __future__ import annotations

from typing import Any

import poseidon
from caffe.common import set_multiprocess, set_solver_count, set_solver_rank
from caffe.errors import CaffeError, DistributedError
from caffe.parallel.allreduce import AllreduceSync, attach_allreduce, prepare_allreduce_worker
from caffe.parallel.errors import distributed_errors
from caffe.parallel.syncer import PoseidonSync
from poseidon import rendezvous
from poseidon.config import SettingError
from poseidon.sync import managers
from poseidon.sync.allreduce import Rendezvous
from poseidon.sync.client import SyncClient
from poseidon.sync.job import JoinError, Session, connect, job_config


def worker_config() -> poseidon.Config:
    """This worker's settings, from the POSEIDON_* (and launcher) variables."""
    try:
        return poseidon.Config.from_env(role="worker")
    except SettingError as e:
        raise CaffeError(f"Poseidon worker settings: {e}") from None


@distributed_errors
def _rendezvous(config: poseidon.Config) -> Rendezvous:
    """sync=allreduce: torchrun's MASTER_ADDR/MASTER_PORT (or those SLURM's and
    single-machine MPI's variables imply), the rest from the settings."""
    managers.apply_meeting_point()
    return Rendezvous.from_env(
        rank=config.rank, world_size=config.num_workers, local_rank=config.local_rank,
        timeout_s=config.timeout_ms / 1000.0,
    )  # fmt: skip


def prepare_worker() -> int:
    """Before nets are built: solver rank and count (data sharding, seed offset).

    Returns the worker's local rank on its host (which GPU it uses)."""
    config = worker_config()
    if config.sync == "allreduce":
        return prepare_allreduce_worker(_rendezvous(config))
    set_solver_count(config.num_workers)
    set_solver_rank(config.rank)
    set_multiprocess(True)
    return config.local_rank


@distributed_errors
def attach_from_environment(
    solver: Any, broadcast_weights: bool = True
) -> PoseidonSync | AllreduceSync:
    """Join the Poseidon job described by POSEIDON_* variables and attach to `solver`
    (POSEIDON_SYNC=allreduce: the DDP-style baseline of allreduce.py instead).
    `broadcast_weights=False`: every worker starts from identical weights by construction
    (the compute replay), so rank 0's are not sent at the first step."""
    config = worker_config()
    if config.sync == "allreduce":
        return attach_allreduce(
            solver, _rendezvous(config), SyncClient.timeline_of(config),
            bucket_cap_bytes=config.bucket_cap_bytes,
            first_bucket_bytes=config.first_bucket_bytes,
        )  # fmt: skip
    return _join_environment_job(solver, broadcast_weights)


@distributed_errors
def _join_environment_job(solver: Any, broadcast_weights: bool) -> PoseidonSync:
    """Started by `poseidon launch`: join its job. Started by a cluster manager (srun,
    mpirun, torchrun) with POSEIDON_ROLE=worker: the tasks host the job among themselves —
    rank 0 the coordinator, every rank its KV-store shard (poseidon/sync/job.py)."""
    config, hosted = job_config()
    return join(solver, config, broadcast_weights=broadcast_weights, host_coordinator=hosted)


@distributed_errors
def join(
    solver: Any,
    config: poseidon.Config,
    broadcast_weights: bool = True,
    hooks: bool = True,
    host_coordinator: bool = False,
) -> PoseidonSync:
    """Connect this worker (and its colocated shard; with `host_coordinator`, rank 0's
    coordinator too) to the job `config` describes and attach a PoseidonSync to `solver`.
    Raises DistributedError naming what failed."""
    session = connect(config, host_coordinator)
    return attach(solver, session, broadcast_weights=broadcast_weights, hooks=hooks)


def attach(solver: Any, session: Session, broadcast_weights: bool = True,
           hooks: bool = True) -> PoseidonSync:  # fmt: skip
    """A PoseidonSync of `solver` over the joined `session`; a failure to attach aborts the
    job with its reason (the other workers stop too)."""
    config = session.config
    client = SyncClient(session, solver.net.device, SyncClient.timeline_of(config))
    try:
        return PoseidonSync(solver, client, config.sync, config.scheme, broadcast_weights,
                            config.layer_schemes, hooks)  # fmt: skip
    except BaseException as e:
        client.close(e)
        raise


# ----- caffe.NCCL: a job that the training processes start among themselves ----------------
def new_uid() -> bytes:
    """caffe.NCCL.new_uid(): where rank 0's coordinator will listen, and a fresh token."""
    return rendezvous.new_uid()


def join_uid(solver: Any, uid: bytes, rank: int, count: int) -> PoseidonSync:
    """caffe.NCCL(solver, uid) for solver `rank` of `count`: rank 0 starts the coordinator
    at the uid's address; every rank runs its KV-store shard (P2 = P1, the paper's layout)
    and joins. Layers go through the PS (Caffe's all-reduce arithmetic), driven by the
    caller's hooks. Other settings (timeouts, chunk size, timeline) come from POSEIDON_*."""
    try:
        session = rendezvous.Uid.parse(uid)
    except ValueError as e:
        raise CaffeError(f"caffe.NCCL: {e}") from None
    if not 0 <= rank < count:
        raise CaffeError(f"caffe.NCCL: solver rank {rank} with solver count {count} (want "
                         "0 <= rank < count: call caffe.set_solver_count/set_solver_rank "
                         "before building the solver)")  # fmt: skip
    try:
        config = poseidon.Config.from_env(
            role="worker", rank=rank, num_workers=count, num_servers=count,
            coordinator=session.address, token=session.token, transport="tcp", listen="",
            colocate=True, sync="wfbp", scheme="ps", layer_schemes={},
        )  # fmt: skip
    except SettingError as e:
        raise CaffeError(f"caffe.NCCL settings: {e}") from None
    who = f"caffe.NCCL rank {rank} of {count}"
    try:
        joined = connect(config, host_coordinator=True)
    except JoinError as e:
        if e.stage == "coordinator":
            raise DistributedError(f"{who}: {e} (the uid's address: make a fresh uid with "
                                   "caffe.NCCL.new_uid())") from None  # fmt: skip
        hint = "" if rank == 0 else " (rank 0 starts it in caffe.NCCL(solver, uid))"
        raise DistributedError(f"{who}: {e}{hint}") from None
    return attach(solver, joined, broadcast_weights=False, hooks=False)
