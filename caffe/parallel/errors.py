"""The client core's failures as the engine's: DistributedError, one clear line from the
`caffe` command, naming what failed and where."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import poseidon
from caffe.errors import DistributedError
from poseidon.failures import explain
from poseidon.sync.job import JobError

F = TypeVar("F", bound=Callable)


def distributed_errors(function: F) -> F:
    """Raise the comm core's CommError and the client core's JobError (joining, the
    all-reduce group, leaving) as DistributedError. Called as a method of an object with a
    SyncClient (`self.client`), a lost shard that ran inside a worker's process is named as
    that worker too."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except poseidon.CommError as e:
            client = getattr(args[0], "client", None) if args else None
            config = client.session.config if client is not None else None
            colocated = config.colocated_shards if config is not None else 0
            per_host = config.workers_per_host if config is not None else 1
            raise DistributedError(explain(e, colocated, per_host)) from None
        except JobError as e:
            raise DistributedError(str(e)) from None

    return wrapper  # type: ignore[return-value]
