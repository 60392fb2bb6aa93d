"""The data layers' decode threads: one pool per process, shared by every data layer, that
decodes and transforms the items of a batch in parallel (caffe/data/batch_assembly.py).

Note [decode threads]. Threads, not processes: Pillow releases the GIL while it decodes a
JPEG, and numpy while it crops, mirrors and subtracts the mean of an item into the batch,
so the Python left between them is a few per cent of an item's time; a thread writes its
item straight into the batch (in pinned memory on CUDA), with no pickling and no copy out
of a worker process. Order and randomness never depend on the threads: a batch's records
are read and its random draws made on the layer's prefetch thread, in Caffe's order; the
threads only fill rows of a batch whose every row is fixed before they start.

How many: `caffe.set_data_threads(n)`, else CAFFE_DATA_THREADS, else the cores this process
may run on divided by the training processes of this host (LOCAL_WORLD_SIZE from torchrun,
POSEIDON_LOCAL_WORKERS from `poseidon launch`), at least 1. With 1 the items are done on
the prefetch thread itself, as BVLC's single prefetch thread did.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import torch

from caffe.errors import CaffeError

T = TypeVar("T")
_lock = threading.Lock()
_chosen: int | None = None  # set_data_threads
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _local_processes() -> int:
    for name in ("LOCAL_WORLD_SIZE", "POSEIDON_LOCAL_WORKERS"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def data_threads() -> int:
    """The number of decode threads (Note [decode threads])."""
    if _chosen is not None:
        return _chosen
    text = os.environ.get("CAFFE_DATA_THREADS", "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise CaffeError(f"CAFFE_DATA_THREADS={text!r}: want a whole number >= 1")
        return int(text)
    return max(1, available_cores() // _local_processes())


def set_data_threads(count: int) -> None:
    """caffe.set_data_threads(n): decode threads for the data layers built from now on
    (and the batches of running ones from their next batch)."""
    global _chosen
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise CaffeError(f"set_data_threads({count!r}): want a whole number >= 1")
    _chosen = count


def _executor(threads: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != threads:
            old = _pool
            _pool = ThreadPoolExecutor(
                threads, thread_name_prefix="caffe-data", initializer=single_threaded_kernels
            )
            _pool_size = threads
            if old is not None:
                old.shutdown(wait=False)  # running items finish; the old pool then ends
        return _pool


def single_threaded_kernels() -> None:
    """Run this thread's torch kernels on this thread alone (the setting is per thread: the
    net's own thread keeps all its cores). A data thread's kernels are small, and a team of
    OpenMP threads for each, from every data thread at once, is several times slower than
    none (measured: raw Datums 3,400 -> 7,400 images/s on two cores)."""
    torch.set_num_threads(1)


def _forget_pool_after_fork() -> None:
    # A forked child has none of the parent's threads: a pool it inherited would wait forever.
    global _pool, _pool_size, _lock
    _pool, _pool_size, _lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def parallel_map(function: Callable[[int], T], count: int) -> list[T]:
    """[function(0), ..., function(count - 1)] on the decode threads, in order. When several
    calls fail, the error of the lowest index is raised (the same for any thread count)."""
    threads = min(data_threads(), count)
    if threads <= 1:
        return [function(i) for i in range(count)]
    # A few contiguous chunks per thread: fewer futures than items, and no straggler item
    # left to one thread at the end of a batch.
    chunks = min(count, threads * 4)
    bounds = [count * k // chunks for k in range(chunks + 1)]

    def run(first: int, last: int) -> list[T]:
        return [function(i) for i in range(first, last)]

    pool = _executor(data_threads())
    futures: Sequence[Future[list[T]]] = [
        pool.submit(run, bounds[k], bounds[k + 1]) for k in range(chunks)
    ]
    out: list[T] = []
    for future in futures:
        out.extend(future.result())  # in order: the first failing chunk raises first
    return out
