"""A job that Python processes start among themselves, without `poseidon launch`: the
rendezvous behind pycaffe's `caffe.NCCL` (BVLC's python/train.py).

    uid = new_uid()              # in the parent: b"poseidon-uid/1 127.0.0.1:PORT TOKEN"
    # ... every process of the job receives uid (multiprocessing pickles it) ...
    session = Uid.parse(uid)     # address of the coordinator, and the job's token
    NodeThread.coordinator(config)   # rank 0 only: the coordinator on a thread of its own

A uid names where the coordinator will listen (a port free when new_uid() ran, on
127.0.0.1: the processes of a uid job share one machine, as Caffe's multi-GPU flow does)
and a fresh token that every connection of the job presents. Nothing listens until rank 0
starts the coordinator, so the parent process that made the uid holds no thread and no
socket when it forks the workers; the other ranks retry reaching the coordinator until
their timeout (POSEIDON_TIMEOUT_MS), then fail naming its address.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
from dataclasses import dataclass

from poseidon import _C
from poseidon.config import Config

UID_PREFIX = b"poseidon-uid/1 "
LOCAL_HOST = "127.0.0.1"


def free_port(host: str = LOCAL_HOST) -> int:
    """A TCP port nothing listens on now (the kernel's pick; another process may take it
    before the coordinator binds it, which the coordinator then reports)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Uid:
    """A uid's contents: the coordinator's host:port and the job's token."""

    address: str
    token: str

    def encode(self) -> bytes:
        return UID_PREFIX + f"{self.address} {self.token}".encode()

    @classmethod
    def parse(cls, uid: bytes | str) -> Uid:
        """Raises ValueError saying what a uid should be when `uid` is not one of ours."""
        raw = uid.encode() if isinstance(uid, str) else bytes(uid)
        fields = raw[len(UID_PREFIX) :].decode(errors="replace").split()
        if not raw.startswith(UID_PREFIX) or len(fields) != 2 or ":" not in fields[0]:
            shown = raw[:40] + (b"..." if len(raw) > 40 else b"")
            raise ValueError(
                f"not a uid of caffe.NCCL.new_uid() ({len(raw)} bytes: {shown!r}); pass every "
                "process of the job the bytes that new_uid() returned in the parent"
            )
        return cls(fields[0], fields[1])


def new_uid(host: str = LOCAL_HOST) -> bytes:
    """A fresh job identity: a free port on `host` for rank 0's coordinator and a token."""
    return Uid(f"{host}:{free_port(host)}", secrets.token_hex(16)).encode()


class NodeThread:
    """A coordinator or KV-store shard run on a daemon thread of this process: its `run()`
    releases the GIL and returns once every worker has shut down, or raises when the job
    aborts (the workers report that failure themselves, so it is only kept in `error`).
    Rank 0 of a uid job runs the coordinator this way; every worker with a colocated shard
    (caffe/parallel/, poseidon.torch: poseidon/sync/job.py) runs its shard this way."""

    def __init__(self, node: _C.Coordinator | _C.KVServer, name: str) -> None:
        self.node = node
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    @classmethod
    def coordinator(cls, config: Config) -> NodeThread:
        """Binds config.coordinator now (raises CommError when it cannot), then runs."""
        node = cls(
            _C.Coordinator(config.replace(role="coordinator").to_native()), "poseidon-coordinator"
        )
        node.thread.start()
        return node

    @classmethod
    def shard(cls, config: Config) -> NodeThread:
        """Shard `config.rank`, reached by its worker through the in-process transport."""
        node = cls(_C.KVServer(config.replace(role="server").to_native()), "poseidon-shard")
        node.thread.start()
        return node

    @property
    def address(self) -> str:
        return str(self.node.address)

    def _run(self) -> None:
        try:
            self.node.run()
        except _C.CommError as e:
            self.error = e

    def join(self, timeout_s: float) -> bool:
        """After this process's worker shut down: whether the node ended in time."""
        self.thread.join(timeout_s)
        return not self.thread.is_alive()

    def abort(self, reason: str, wait_s: float = 5.0) -> None:
        """Abort the job; wait up to `wait_s` for the node to tell its peers and to see them
        close (a node of this very process that is still open holds that up)."""
        with contextlib.suppress(_C.CommError):  # already ended
            self.node.abort(reason)
        self.thread.join(wait_s)
