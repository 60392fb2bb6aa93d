"""The replayed device: a clock that spends profiled compute time, dilated.

Note [device clock]. A GPU runs the kernels the training thread queues back to back; the
thread's own Python work between kernels overlaps with them and costs nothing unless the
thread falls behind. The replay keeps `free_at`, the moment the emulated device finishes
what it was given, and each `spend(t)` sleeps until `free_at + t·dilation`. When the
thread comes back later than `free_at` by at most `slack_s` (its own bookkeeping, a
sleep that woke late), the device is taken to have run back to back and the next target
is counted from `free_at`, not from now, so those delays do not add up. A longer gap means
the device really idled (the thread waited for a gradient): counting starts again from
now. A CPU profile replays with `host_is_device`: there the device is the host, which
does everything in line. Its profile holds its layers, its updates and, as `host_s`, the
engine's own work between them (profile_host.py, Note [host work]), which the replayed
layers spend with their forward. The replay's own host work between steps (its Python, the
syncer's copies) is not the emulated node's and counts as nothing (the predictor charges
none either); what counts of a gap is the part the training thread spent off the CPU —
waiting for a gradient, or for a core of this machine — minus what a sleep overslept (the
clock's own error) and what ran `untimed` (the update's data -= diff, inside the profiled
update_s). So a CPU replay and the predictor charge the same compute, whatever the
dilation. (Until 2026-12-05 every gap
counted in full, in real time: the replay's own host work, 1–3 ms an iteration on the
unseen nets of docs/experiments.md §6.5, then weighed 1/d of what it would on the node,
and the one-node cells read 2–4% above the prediction, by an amount that fell with d.)
Dilation stretches every compute time by one factor (the emulated links are slowed by the
same factor), so that a 2-core machine can play 16 nodes: reported times are divided by it
again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class ClockStats:
    spends: int = 0
    charged_s: float = 0.0  # undilated compute time spent
    late_s: float = 0.0  # wall time woken past the targets (slept too long), summed
    restarts: int = 0  # gaps longer than the slack (the device idled)
    idle_s: float = 0.0  # wall time the device idled in those gaps (after its first step)


DEFAULT_SLACK_S = 0.002


class ReplayClock:
    def __init__(
        self, dilation: float = 1.0, slack_s: float = DEFAULT_SLACK_S, host_is_device: bool = False
    ) -> None:
        if dilation <= 0:
            raise ValueError(f"dilation {dilation} (want > 0)")
        self.dilation = dilation
        self.slack_s = slack_s
        self.host_is_device = host_is_device
        self.stats = ClockStats()
        self._free_at = 0.0
        self._overslept = 0.0  # how far past its target the last sleep woke
        self._untimed = 0.0  # host seconds since the last step that count as nothing
        # The training thread (the one that made the clock) and its CPU clock: inside
        # `untimed`, and when its last step ended (None before its first). A step spent
        # from another thread (a PowerSGD continuation) cannot tell the training thread's
        # work from its waits: its gap counts in full. A GPU's clock keeps none of it.
        self._owner = threading.get_ident() if host_is_device else None
        self._untimed_cpu = 0.0
        self._cpu_mark: float | None = None

    @contextmanager
    def untimed(self) -> Iterator[None]:
        """Host work inside does not count as the host's own between steps: the profile
        already charged it (Note [device clock])."""
        owner = self._owner == threading.get_ident()
        start, cpu = time.perf_counter(), time.thread_time() if owner else 0.0
        try:
            yield
        finally:
            self._untimed += time.perf_counter() - start
            if owner:
                self._untimed_cpu += time.thread_time() - cpu

    def spend(self, seconds: float) -> None:
        """Block for `seconds` of device time (× dilation), counted as described above."""
        if seconds <= 0:
            return
        now = time.perf_counter() - self._untimed
        owner = self._owner == threading.get_ident()
        host_cpu = 0.0  # the training thread's own work since its last step
        if owner and self._cpu_mark is not None:
            host_cpu = max(0.0, time.thread_time() - self._cpu_mark - self._untimed_cpu)
        self._untimed = 0.0
        if owner:
            self._untimed_cpu = 0.0
        if self.host_is_device:
            # Of the time since the last step ended, only the waits count (see above).
            start = max(self._free_at, now - self._overslept - host_cpu)
        elif now > self._free_at + self.slack_s:
            start = now
            if self.stats.spends:  # before the first step there was no device to idle
                self.stats.idle_s += now - self._free_at
            self.stats.restarts += 1
        else:
            start = self._free_at
        target = start + seconds * self.dilation
        self._free_at = target
        self.stats.spends += 1
        self.stats.charged_s += seconds
        remaining = target - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        woke = time.perf_counter()
        if owner:
            self._cpu_mark = time.thread_time()
        self._overslept = max(0.0, woke - target)
        self.stats.late_s += self._overslept


# The clock of this process's replayed device; configure() sets it before the net is built.
_clock = ReplayClock()


def configure(
    dilation: float, slack_s: float = DEFAULT_SLACK_S, host_is_device: bool = False
) -> ReplayClock:
    global _clock
    _clock = ReplayClock(dilation, slack_s, host_is_device)
    return _clock


def device_clock() -> ReplayClock:
    return _clock
