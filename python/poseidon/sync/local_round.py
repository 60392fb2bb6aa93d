"""A layer's round on a machine of several workers (local.py): the local sum, the leader's
exchange through the comm core, the result spread back — WFBP-ready like round.py's.

Through the shards (PS, BF16, PowerSGD):

    submit   every worker   reduce the layer's gradient to the leader (asynchronous)
             leader         submit thread: wait for the machine's sum; push_pull it (BF16:
                            the core rounds it; PowerSGD: encode it, round 1 of 2)
             every worker   spread thread: one spread (local.py, Note [announced spreads]):
                            the leader takes the lowest layer whose exchange is back
                            (PowerSGD: decodes it, the mean), announces it and spreads its
                            result; the others receive the announced layer's
    finish   every worker   wait for the layer's spread; PS and BF16: divide by P1 (the mean)

SFB: each worker's factors go to the leader in a fixed slot of 1 + capacity·width floats
([rows | dy | x], zero-padded); the leader sends the machine's rows (its workers' row
counts, then their factors, unpadded) to the other leaders, and spreads every worker's slot
of the job, P1 of them, so that every worker rebuilds from all P1 workers' factors as with
one worker per machine.

The round's `handle` is a Future resolved when its spread is done. The timeline's "local"
lane shows the reduce (or gather) and the spread of each round.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING

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
    of its spread."""
    local = layer_round.local
    assert local is not None
    what = f"layer {layer_round.name} iteration {iteration}"
    times = layer_round.local_times
    times.clear()
    times["reduce_from"] = now_us
    layer_round.spread_done = Future()
    layer_round.exchange = None
    local.register(layer_round)
    slots = layer_round.local_factors
    if slots is not None:
        assert layer_round.factors is not None
        slots.fill_own(layer_round.factors.pack())
        into = slots.machine_slots if local.is_leader else []
        layer_round.local_work = local.gather(slots.own, into)
    else:
        layer_round.local_work = local.reduce(layer_round.diff)
    if local.is_leader:
        local.submit_thread.submit(_exchange, layer_round, local, iteration, what)
    local.spread_thread.submit(_spread_next, local, what)
    return layer_round.spread_done


def _exchange(layer_round: LayerRound, local: LocalGroup, iteration: int, what: str) -> None:
    """The leader's submit thread: the machine's sum (or factors) to the comm core."""
    try:
        local.wait(layer_round.local_work, f"local sum of {what}")
        layer_round.local_times["reduced"] = layer_round.clock()
        worker, index = layer_round.worker, layer_round.index
        if layer_round.local_factors is not None:
            message = layer_round.local_factors.machine_message()
            layer_round.exchange = worker.allgather(index, iteration, message)
        elif layer_round.powersgd is not None:
            layer_round.exchange = layer_round.powersgd.submit(iteration)  # round 2's future
        else:
            staging = layer_round.staging
            assert staging is not None
            staging.to_host()
            staging.wait_host()
            layer_round.exchange = worker.push_pull(index, iteration)
    except BaseException as e:  # the failure reaches finish through the spread
        layer_round.exchange = _Failed(e)
    local.exchanging(layer_round)


class _Failed:
    """An exchange that could not start: done at once, raising its error when waited."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def test(self) -> bool:
        raise self.error

    def wait(self) -> None:
        raise self.error


def exchange_done(layer_round: LayerRound) -> bool:
    """Whether the leader's exchange of `layer_round` is back (or failed)."""
    exchange = layer_round.exchange
    if exchange is None:
        return False
    if isinstance(exchange, Future):  # PowerSGD: round 2's handle, once round 1 is back
        if not exchange.done():
            return False
        if exchange.exception() is not None:
            return True
        exchange = exchange.result()
    try:
        return bool(exchange.test())
    except Exception:  # failed: taken now, and its wait raises the error
        return True


def _spread_next(local: LocalGroup, what: str) -> None:
    """One spread on the spread thread (local.py, Note [announced spreads])."""
    layer_round = None
    try:
        if local.is_leader:
            layer_round = local.next_exchanged(f"a spread after {what}")
            _finish_exchange(layer_round, local)
            local.announce(layer_round, what)
        else:
            layer_round = local.announce(None, what)
            local.wait(layer_round.local_work, f"local sum of layer {layer_round.name}")
            layer_round.local_times["reduced"] = layer_round.clock()
        layer_round.local_times["spread_from"] = layer_round.clock()
        slots = layer_round.local_factors
        tensor = slots.all if slots is not None else layer_round.diff
        local.wait(local.spread(tensor), f"local spread of layer {layer_round.name}")
        layer_round.spread_done.set_result(None)
    except BaseException as e:
        if layer_round is not None and not layer_round.spread_done.done():
            layer_round.spread_done.set_exception(e)
        local.fail_rounds(e)


def _finish_exchange(layer_round: LayerRound, local: LocalGroup) -> None:
    """The leader, once `layer_round`'s exchange is back: its result where the spread reads
    it (PowerSGD: decoded to the mean; SFB: every machine's factors in their slots)."""
    exchange = layer_round.exchange
    handle = exchange.result() if isinstance(exchange, Future) else exchange
    handle.wait()
    layer_round.core_handle = handle
    slots = layer_round.local_factors
    if slots is not None:
        for machine in range(local.num_workers // local.size):
            if machine != local.machine:
                factor = layer_round.worker.factor(layer_round.index, layer_round.iteration,
                                                   machine * local.size)  # fmt: skip
                slots.place_machine(machine, np.asarray(factor))
    elif layer_round.powersgd is not None:
        layer_round.powersgd.finish(local.num_workers)  # the mean, before it is spread
    else:
        assert layer_round.staging is not None
        layer_round.staging.to_device()


def finish(layer_round: LayerRound, num_workers: int, timeline: Timeline | None) -> None:
    """Wait for the spread and leave the mean (module docstring)."""
    local = layer_round.local
    assert local is not None and layer_round.handle is not None
    waited_us = layer_round.clock()
    what = f"the local spread of layer {layer_round.name} iteration {layer_round.iteration}"
    future = layer_round.handle
    local.poll(future.done, what)  # never past the job's end, nor the timeout
    future.result()  # raises the spread's error
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
    if layer_round.scheme == "PowerSGD":
        return  # the leader spread the mean
    layer_round.diff.mul_(1.0 / num_workers)


def _record(layer_round: LayerRound, timeline: Timeline, waited_us: float,
            done_us: float) -> None:  # fmt: skip
    times = layer_round.local_times
    name, iteration = layer_round.name, layer_round.iteration
    start = times.get("reduce_from", layer_round.submitted_us)
    summed = "local factors" if layer_round.factors is not None else "local sum"
    timeline.span(f"{name} ({summed})", "local", start, times.get("reduced", start),
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
