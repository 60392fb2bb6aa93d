"""One node's uplink as the predictor sees it: frames from two send queues sharing a link.

Note [two queues, whole frames]. A node sends from two queues: its worker's (PS pushes and
SFB factors) and its shard's (the sums it returns). Each is the comm core's SendQueue: a
priority queue of frames (older iteration, lower layer, earlier chunk first) served by
`threads` sender threads, a frame going out whole once a thread has taken it
(TCP_NOTSENT_LOWAT keeps the socket from holding more than the frame being written, so
priorities act at frame boundaries: internal/send_queue.h, Note [send priority]), and a thread
takes the first frame whose peer no other thread of its queue is writing to — so when the
most urgent frames all go to a busy peer, a less urgent one to another peer goes first. The
frames in flight share the link as TCP connections do: the two queues evenly while both send, the
frames of one queue evenly among themselves; a frame may also be capped (it reaches a
shard whose own link is shared by many senders). Rates are recomputed whenever a frame
starts or ends; between those events every frame moves at a constant rate.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

WORKER, SHARD = 0, 1  # the two send queues of a node


@dataclass
class Frame:
    queue: int  # WORKER or SHARD
    priority: tuple
    volume: float  # bytes on this node's uplink
    cap: float  # bytes/s at most
    ready: float  # when it is queued
    peer: int = 0  # whom it goes to: one frame per peer and queue at a time
    on_done: Callable[[float], None] | None = None
    remaining: float = field(init=False)
    done: float = math.nan

    def __post_init__(self) -> None:
        self.remaining = self.volume


def water_fill(demands: Sequence[float], capacity: float) -> list[float]:
    """Max-min fair shares of `capacity` among claimants that want at most `demands`."""
    shares = [0.0] * len(demands)
    left, order = capacity, sorted(range(len(demands)), key=lambda i: demands[i])
    for position, i in enumerate(order):
        equal = left / (len(order) - position)
        shares[i] = min(demands[i], equal)
        left -= shares[i]
    return shares


class Uplink:
    def __init__(self, bytes_per_s: float, threads: int = 2) -> None:
        self.capacity = bytes_per_s
        self.threads = threads
        self._future: list[tuple[float, int, Frame]] = []  # by ready time
        self._count = 0

    def add(self, frame: Frame) -> None:
        heapq.heappush(self._future, (frame.ready, self._count, frame))
        self._count += 1

    def run(self) -> None:
        """Send every frame (and those their on_done adds); fills in each frame's `done`."""
        queued: dict[int, list[tuple[tuple, int, Frame]]] = {WORKER: [], SHARD: []}
        sending: dict[int, list[Frame]] = {WORKER: [], SHARD: []}
        now = 0.0
        while self._future or any(queued.values()) or any(sending.values()):
            while self._future and self._future[0][0] <= now + 1e-15:
                _, count, frame = heapq.heappop(self._future)
                heapq.heappush(queued[frame.queue], (frame.priority, count, frame))
            for q in (WORKER, SHARD):
                self._take(queued[q], sending[q])
            active = sending[WORKER] + sending[SHARD]
            if not active:
                now = self._future[0][0]
                continue
            rates = self._rates(sending)
            horizon = self._future[0][0] - now if self._future else math.inf
            for frame in active:
                if rates[id(frame)] > 0:
                    horizon = min(horizon, frame.remaining / rates[id(frame)])
            now += horizon
            for q in (WORKER, SHARD):
                for frame in list(sending[q]):
                    frame.remaining -= rates[id(frame)] * horizon
                    if frame.remaining <= 1e-9 * max(1.0, frame.volume):
                        sending[q].remove(frame)
                        frame.done = now
                        if frame.on_done is not None:
                            frame.on_done(now)

    def _take(self, queued: list, sending: list[Frame]) -> None:
        """Free threads take the most urgent frames to peers nobody is writing to."""
        skipped = []
        busy = {f.peer for f in sending}
        while queued and len(sending) < self.threads:
            entry = heapq.heappop(queued)
            if entry[2].peer in busy:
                skipped.append(entry)
                continue
            sending.append(entry[2])
            busy.add(entry[2].peer)
        for entry in skipped:
            heapq.heappush(queued, entry)

    def _rates(self, sending: dict[int, list[Frame]]) -> dict[int, float]:
        queues = [q for q in (WORKER, SHARD) if sending[q]]
        demand = [sum(f.cap for f in sending[q]) for q in queues]
        rates = {}
        for q, share in zip(queues, water_fill(demand, self.capacity)):
            frames = sending[q]
            for frame, rate in zip(frames, water_fill([f.cap for f in frames], share)):
                rates[id(frame)] = rate
        return rates
