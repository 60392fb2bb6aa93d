"""Measure with several processes at once (`poseidon profile --copies C`).

C emulated nodes on one machine share its cores and memory bandwidth, so one node's
compute is not what one process alone measures: C processes (each with `threads` threads)
build the net, warm up, wait for each other at a barrier, and then time the same loop at
the same time; their samples are pooled and the profile takes medians over all of them.

Note: processes are started with "spawn" (a fresh interpreter each, no forked torch
state); a copy that fails aborts the barrier so the others stop waiting, and a copy that
dies without a word (the kernel's OOM killer) makes the parent stop the rest.
"""

from __future__ import annotations

import multiprocessing
import queue
from typing import Any

from poseidon.experiments.profile import Profile
from poseidon.experiments.profile_host import host_samples
from poseidon.experiments.profile_measure import (
    Samples,
    build_net,
    choose_device,
    collect_samples,
    skeleton,
)

POLL_S = 1.0  # how often the parent checks that every copy is alive
BROKEN = "BrokenBarrierError"
INPUT_ERROR = "input: "  # prefix of a copy's error that the input caused


def measure_copies(
    path: str,
    batch: int | None,
    device: str,
    iterations: int,
    warmup: int,
    threads: int | None,
    copies: int,
) -> tuple[Profile, Samples]:
    """The skeleton profile (from copy 0) and the pooled samples of `copies` processes."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(copies)
    results = context.Queue()
    processes = [
        context.Process(
            target=_copy_main,
            args=(rank, path, batch, device, iterations, warmup, threads, barrier, results),
            name=f"poseidon-profile-{rank}",
            daemon=True,
        )
        for rank in range(copies)
    ]
    for process in processes:
        process.start()
    received: dict[int, tuple[str | None, Profile | None, Samples | None]] = {}
    try:
        # Every copy reports once, a result or an error; only a killed one stays silent.
        while len(received) < copies:
            try:
                rank, error, profile, samples = results.get(timeout=POLL_S)
                received[rank] = (error, profile, samples)
            except queue.Empty:
                for rank, process in enumerate(processes):
                    if rank not in received and process.exitcode is not None:
                        raise RuntimeError(
                            f"measuring copy {rank} of {copies} died (exit code "
                            f"{process.exitcode}; out of memory?)"
                        ) from None
    finally:
        for process in processes:
            if process.is_alive() and len(received) < copies:
                process.terminate()
            process.join()
    errors = [(rank, e) for rank, (e, _, _) in sorted(received.items()) if e is not None]
    # A copy that failed breaks the barrier for the others: report its error, not theirs.
    errors.sort(key=lambda item: BROKEN in item[1])
    if errors:
        rank, error = errors[0]
        # The net or the arguments at fault (every copy would fail alike): bad input.
        kind = ValueError if error.startswith(INPUT_ERROR) else RuntimeError
        error = error.removeprefix(INPUT_ERROR)
        raise kind(f"measuring copy {rank} of {copies} failed: {error}")
    profile = received[0][1]
    pooled = received[0][2]
    assert profile is not None and pooled is not None
    for rank in range(1, copies):
        other = received[rank][2]
        assert other is not None
        pooled.merge(other)
    return profile, pooled


def _copy_main(
    rank: int,
    path: str,
    batch: int | None,
    device: str,
    iterations: int,
    warmup: int,
    threads: int | None,
    barrier: Any,
    results: Any,
) -> None:
    try:
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        choose_device(device)
        net = build_net(path, batch)
        profile = skeleton(net, path, device) if rank == 0 else None
        samples = collect_samples(net, iterations, warmup, ready=barrier.wait)
        if device == "cpu":  # Note [host work]
            samples.host = host_samples(path, batch, iterations, warmup)
        results.put((rank, None, profile, samples))
    except BaseException as e:  # reported to the parent, which names the copy
        from caffe.errors import CaffeError

        barrier.abort()
        bad_input = isinstance(e, CaffeError | ValueError | OSError)
        message = f"{INPUT_ERROR if bad_input else ''}{type(e).__name__}: {e}"
        results.put((rank, message, None, None))
