"""Chrome-trace timeline of one worker (open in chrome://tracing or Perfetto).

Spans are complete events ("ph": "X") in microseconds since the recorder started; each
category gets its own row (tid) so forward/backward, per-layer sync phases and the
communication threads read as separate lanes. Recording is a list append under a lock:
cheap enough to leave on for a whole run. Written once, at close().
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

# One row per kind of activity, in the order they are listed in the viewer: compute
# (forward/backward per layer), sync (a layer's whole round: handed to the comm core until
# done), queued (waiting in the comm core's priority queue), sending (first byte out until
# the last reply in), wait (the training thread blocked on it), apply (deferred update), local
# (with several workers per machine: the layer's sum inside the machine, and its result
# spread back; poseidon/sync/local_round.py).
LANES = {"compute": 1, "sync": 2, "queued": 3, "sending": 4, "wait": 5, "apply": 6, "data": 7,
         "local": 8}  # fmt: skip


def per_worker_path(path: str) -> str:
    """`path` with a `{rank}` field: trace.json -> trace.{rank}.json. Workers that share a
    file system (one host, or NFS) must never write one file; a path that names the rank
    already is kept."""
    if "{rank}" in path:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.{{rank}}{ext or '.json'}"


class Timeline:
    """Collects spans for process `rank` of `workers`; `path` may contain `{rank}`, and
    gets one (per_worker_path) when the job has several workers."""

    def __init__(self, path: str, rank: int, workers: int = 1) -> None:
        if workers > 1:
            path = per_worker_path(path)
        self.path = path.format(rank=rank)
        self.rank = rank
        self._origin_ns = time.perf_counter_ns()
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def now_us(self) -> float:
        return (time.perf_counter_ns() - self._origin_ns) / 1000.0

    def from_clock_ns(self, ns: int) -> float:
        """A time.perf_counter_ns() reading (the comm core's clock too) on this timeline."""
        return (ns - self._origin_ns) / 1000.0

    def span(self, name: str, lane: str, start_us: float, end_us: float, **args: Any) -> None:
        """Record `name` from start_us to end_us (both from now_us()) on a lane of LANES."""
        event = {
            "name": name,
            "cat": lane,
            "ph": "X",
            "ts": start_us,
            "dur": max(0.0, end_us - start_us),
            "pid": self.rank,
            "tid": LANES[lane],
        }
        if args:
            event["args"] = args
        with self._lock:
            self._events.append(event)

    def record_round(self, name: str, timing: Any, submitted_us: float, waited_us: float,
                     done_us: float, iteration: int, scheme: str,
                     traffic: tuple[int, int]) -> None:  # fmt: skip
        """One layer's round: `sync` from its hand-over (submitted_us) until the comm core
        had it done, `queued` and `sending` from the core's own timestamps (`timing`, a
        _C.HandleTiming), and `wait`, the training thread blocked on it from waited_us to
        done_us; `traffic` is the round's (bytes sent, bytes received)."""
        queued, first_send, last_receive, done = (self.from_clock_ns(t) for t in timing)
        if timing.first_send_ns:
            self.span(name, "queued", queued, first_send, iteration=iteration)
            if timing.last_receive_ns:
                self.span(name, "sending", first_send, last_receive, iteration=iteration)
        self.span(name, "sync", submitted_us, done if timing.done_ns else done_us,
                  iteration=iteration, scheme=scheme, bytes_sent=traffic[0],
                  bytes_received=traffic[1])  # fmt: skip
        self.span(name, "wait", waited_us, done_us, iteration=iteration)

    def events(self, lane: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e) for e in self._events if lane is None or e["cat"] == lane]

    def close(self) -> None:
        """Write the trace (atomically) with lane names as metadata."""
        meta = [
            {
                "name": "process_name",
                "ph": "M",
                "pid": self.rank,
                "args": {"name": f"worker {self.rank}"},
            }
        ] + [
            {"name": "thread_name", "ph": "M", "pid": self.rank, "tid": tid, "args": {"name": lane}}
            for lane, tid in LANES.items()
        ]
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"traceEvents": meta + self.events(), "displayTimeUnit": "ms"}, f)
        os.replace(tmp, self.path)
