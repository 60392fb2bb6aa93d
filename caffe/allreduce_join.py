"""Joining the all-reduce baseline's process group from torchrun-style variables (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), with every wait limited: a peer that
never arrives fails the join with a message naming the address, never a hang."""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from caffe.allreduce_sync import DEFAULT_TIMEOUT_S, AllreduceSync, TimelineLike, first_line
from caffe.common import set_multiprocess, set_solver_count, set_solver_rank
from caffe.errors import DistributedError

DEFAULT_MASTER_PORT = 29500  # torchrun's


@dataclass(frozen=True)
class Rendezvous:
    """Where and as whom to join: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT, plus the limit of every wait."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_MASTER_PORT
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Rendezvous:
        """Values from `env` (default os.environ), then `overrides` that are not None."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, key, parse in (("RANK", "rank", int), ("WORLD_SIZE", "world_size", int),
                                 ("LOCAL_RANK", "local_rank", int),
                                 ("MASTER_ADDR", "master_addr", str),
                                 ("MASTER_PORT", "master_port", int)):  # fmt: skip
            if env.get(name, "").strip():
                try:
                    values[key] = parse(env[name].strip())
                except ValueError:
                    raise DistributedError(f"{name}={env[name]!r} is not an integer") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        rendezvous = cls(**values)
        if not 0 <= rendezvous.rank < rendezvous.world_size:
            raise DistributedError(
                f"RANK={rendezvous.rank} with WORLD_SIZE={rendezvous.world_size} "
                "(want 0 <= RANK < WORLD_SIZE)"
            )
        return rendezvous


def prepare_worker(rendezvous: Rendezvous | None = None) -> int:
    """Before nets are built: solver rank and count (data layers shard offset % P == rank;
    the seed is random_seed + rank). Returns the local rank (which GPU the worker uses)."""
    rendezvous = rendezvous or Rendezvous.from_env()
    set_solver_count(rendezvous.world_size)
    set_solver_rank(rendezvous.rank)
    set_multiprocess(True)
    return rendezvous.local_rank


def backend_for(device: torch.device) -> str:
    """NCCL for a net on CUDA when this torch has it, else gloo (CPU, or CUDA through host)."""
    if device.type == "cuda" and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def attach_from_environment(
    solver: Any,
    rendezvous: Rendezvous | None = None,
    timeline: TimelineLike | None = None,
    **options: Any,
) -> AllreduceSync:
    """Join the process group (env:// semantics: a TCP store at MASTER_ADDR:MASTER_PORT,
    served by rank 0) and attach to `solver`. A peer that never arrives fails the join
    after the timeout with a message, never a hang. `options` go to AllreduceSync."""
    rendezvous = rendezvous or Rendezvous.from_env()
    backend = backend_for(solver.net.device)
    where = f"{rendezvous.master_addr}:{rendezvous.master_port}"
    try:
        dist.init_process_group(
            backend, init_method=f"tcp://{where}", rank=rendezvous.rank,
            world_size=rendezvous.world_size,
            timeout=datetime.timedelta(seconds=rendezvous.timeout_s),
        )  # fmt: skip
    except (RuntimeError, ValueError) as e:  # DistStoreError, DistNetworkError: RuntimeErrors
        raise DistributedError(
            f"worker {rendezvous.rank} of {rendezvous.world_size} could not join the "
            f"all-reduce group at {where} within {rendezvous.timeout_s:g}s: {first_line(e)} "
            "(every worker must start, and MASTER_ADDR:MASTER_PORT must reach worker 0)"
        ) from None
    try:
        sync = AllreduceSync(solver, timeout_s=rendezvous.timeout_s, timeline=timeline, **options)
    except BaseException:
        dist.destroy_process_group()
        raise
    sync.owns_group = True
    return sync
