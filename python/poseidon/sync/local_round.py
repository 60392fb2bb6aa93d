"""A layer's round on a machine of several workers (local.py): the local sum, the leader's
exchange through the comm core, the result spread back — WFBP-ready like round.py's.

Through the shards (PS, BF16, PowerSGD):

    submit   every worker   reduce the layer's gradient to the leader (asynchronous)
             leader         submit thread: wait for the machine's sum; push_pull it (BF16:
                            the core rounds it; PowerSGD: encode it, round 1 of 2)
             leader         spread thread: wait for the exchange; (PowerSGD: decode, the
                            mean) spread the result
             the others     spread thread: wait for their part of the reduce; receive the
                            spread
    finish   every worker   wait for the spread; PS and BF16: divide by P1 (the mean)

SFB: each worker's factors go to the leader in a fixed slot of 1 + capacity·width floats
([rows | dy | x], zero-padded); the leader sends the machine's rows (its workers' row
counts, then their factors, unpadded) to the other leaders, and spreads every worker's slot
of the job, P1 of them, so that every worker rebuilds from all P1 workers' factors as with
one worker per machine.

The round's `handle` is a Future of the spread's Work. The timeline's "local" lane shows the
reduce (or gather) and the spread of each round.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from poseidon.sync.factors import stack_factors
from poseidon.sync.local import LocalGroup

if TYPE_CHECKING:
    from poseidon.sync.round import LayerRound
    from poseidon.timeline import Timeline


class LocalFactors:
    """An SFB layer's slots on a machine of `local.size` workers: one of
    1 + `capacity_rows`·`width` floats per worker of the job."""

    def __init__(self, local: LocalGroup, capacity_rows: int, width: int,
                 device: torch.device) -> None:  # fmt: skip
        self.local = local
        self.width = width
        self.slot_floats = 1 + capacity_rows * width
        # Where the collectives run: the GPU for NCCL, host memory for gloo.
        where = device if local.backend == "nccl" else torch.device("cpu")
        self.own = torch.zeros(self.slot_floats, device=where)
        # Every worker's slot, rank order: the leader gathers its machine's into its part.
        self.all = torch.zeros(local.num_workers * self.slot_floats, device=where)
        first = local.leader * self.slot_floats
        self.machine_slots = [self.all[first + j * self.slot_floats :
                                       first + (j + 1) * self.slot_floats]
                              for j in range(local.size)]  # fmt: skip

    @property
    def machine_max_floats(self) -> int:
        """The most floats a leader sends: its workers' row counts, then their factors."""
        return self.local.size * self.slot_floats

    def fill_own(self, packed: torch.Tensor) -> None:
        """This worker's packed factors ([dy | x], factors.py) into its slot."""
        self.own[0] = packed.numel() // self.width
        self.own[1 : 1 + packed.numel()].copy_(packed)

    def machine_message(self) -> np.ndarray:
        """The gathered slots, compacted: [rows of each worker | their factors]."""
        slots = [s.cpu().numpy() for s in self.machine_slots]
        rows = [int(s[0]) for s in slots]
        body = [s[1 : 1 + r * self.width] for s, r in zip(slots, rows)]
        return np.concatenate([np.asarray(rows, dtype=np.float32), *body])

    def place_machine(self, machine: int, message: np.ndarray) -> None:
        """Another machine's message (machine_message's layout) into its workers' slots."""
        g = self.local.size
        rows = [int(r) for r in message[:g]]
        at = g
        for j, r in enumerate(rows):
            slot = (machine * g + j) * self.slot_floats
            n = r * self.width
            self.all[slot] = r
            self.all[slot + 1 : slot + 1 + n].copy_(torch.from_numpy(message[at : at + n]))
            at += n

    def every_worker(self) -> list[np.ndarray]:
        """Each worker's factors (rank order), unpadded, from the spread slots."""
        every = self.all.cpu().numpy()
        out = []
        for r in range(self.local.num_workers):
            slot = every[r * self.slot_floats : (r + 1) * self.slot_floats]
            out.append(slot[1 : 1 + int(slot[0]) * self.width])
        return out


def submit(layer_round: LayerRound, iteration: int, now_us: float) -> Future:
    """Start `layer_round`'s local stage and exchange (module docstring); returns the future
    of the spread's Work."""
    local = layer_round.local
    assert local is not None
    what = f"layer {layer_round.name} iteration {iteration}"
    if layer_round.factors is not None:
        return _submit_factors(layer_round, local, iteration, what)
    tensor = layer_round.diff
    reduced = local.reduce(tensor)
    timeline_of = layer_round.local_times
    timeline_of.clear()
    timeline_of["reduce_from"] = now_us
    if not local.is_leader:

        def receive() -> Any:
            local.wait(reduced, f"local sum of {what}")
            timeline_of["reduced"] = timeline_of["spread_from"] = layer_round.clock()
            return local.spread(tensor)

        return local.spread_thread.submit(receive)

    def push() -> Any:
        local.wait(reduced, f"local sum of {what}")
        timeline_of["reduced"] = layer_round.clock()
        if layer_round.powersgd is not None:
            return layer_round.powersgd.submit(iteration)  # a Future of round 2's handle
        staging = layer_round.staging
        assert staging is not None
        staging.to_host()
        staging.wait_host()
        return layer_round.worker.push_pull(layer_round.index, iteration)

    pushed = local.submit_thread.submit(push)

    def spread() -> Any:
        handle = pushed.result()
        if isinstance(handle, Future):
            handle = handle.result()
        handle.wait()
        layer_round.core_handle = handle
        if layer_round.powersgd is not None:
            layer_round.powersgd.finish(local.num_workers)  # the mean, before it is spread
        else:
            assert layer_round.staging is not None
            layer_round.staging.to_device()
        timeline_of["spread_from"] = layer_round.clock()
        return local.spread(tensor)

    return local.spread_thread.submit(spread)


def _submit_factors(layer_round: LayerRound, local: LocalGroup, iteration: int,
                    what: str) -> Future:  # fmt: skip
    slots = layer_round.local_factors
    assert slots is not None and layer_round.factors is not None
    times = layer_round.local_times
    times.clear()
    times["reduce_from"] = layer_round.clock()
    slots.fill_own(layer_round.factors.pack())
    gathered = local.gather(slots.own, slots.machine_slots if local.is_leader else [])
    if not local.is_leader:

        def receive() -> Any:
            local.wait(gathered, f"local factors of {what}")
            times["reduced"] = times["spread_from"] = layer_round.clock()
            return local.spread(slots.all)

        return local.spread_thread.submit(receive)

    def exchange() -> Any:
        local.wait(gathered, f"local factors of {what}")
        times["reduced"] = layer_round.clock()
        message = slots.machine_message()
        handle = layer_round.worker.allgather(layer_round.index, iteration, message)
        handle.wait()
        layer_round.core_handle = handle
        worker = layer_round.worker
        for machine in range(local.num_workers // local.size):
            if machine != local.machine:
                factor = worker.factor(layer_round.index, iteration, machine * local.size)
                slots.place_machine(machine, np.asarray(factor))
        times["spread_from"] = layer_round.clock()
        return local.spread(slots.all)

    return local.spread_thread.submit(exchange)


def finish(layer_round: LayerRound, num_workers: int, timeline: Timeline | None) -> None:
    """Wait for the spread and leave the mean (module docstring)."""
    local = layer_round.local
    assert local is not None and layer_round.handle is not None
    waited_us = layer_round.clock()
    what = f"layer {layer_round.name} iteration {layer_round.iteration}"
    work = layer_round.handle.result()
    local.wait(work, f"local spread of {what}")
    done_us = layer_round.clock()
    if timeline is not None:
        _record(layer_round, timeline, waited_us, done_us)
    layer_round.handle, layer_round.submitted = None, False
    if layer_round.factors is not None:
        slots = layer_round.local_factors
        assert slots is not None and layer_round.rebuild is not None
        gathered = slots.every_worker()
        if not any(f.size for f in gathered):
            return
        dy, x = stack_factors(gathered, layer_round.factors.out_features,
                              layer_round.factors.in_features, layer_round.device)  # fmt: skip
        layer_round.rebuild(dy, x, 1.0 / num_workers)
        return
    if layer_round.powersgd is not None or layer_round.scheme == "PowerSGD":
        return  # the leader spread the mean
    layer_round.diff.mul_(1.0 / num_workers)


def _record(layer_round: LayerRound, timeline: Timeline, waited_us: float,
            done_us: float) -> None:  # fmt: skip
    times = layer_round.local_times
    name, iteration = layer_round.name, layer_round.iteration
    start = times.get("reduce_from", layer_round.submitted_us)
    name_of_sum = "local factors" if layer_round.factors is not None else "local sum"
    timeline.span(f"{name} ({name_of_sum})", "local", start, times.get("reduced", start),
                  iteration=iteration)  # fmt: skip
    spread_from = times.get("spread_from")
    if spread_from is not None:
        timeline.span(f"{name} (local spread)", "local", spread_from, done_us,
                      iteration=iteration)  # fmt: skip
    handle = layer_round.core_handle
    if handle is not None:
        layer_round.record_core(handle, waited_us, timeline)
    else:
        timeline.span(name, "sync", layer_round.submitted_us, done_us, iteration=iteration,
                      scheme=layer_round.scheme)  # fmt: skip
        timeline.span(name, "wait", waited_us, done_us, iteration=iteration)
