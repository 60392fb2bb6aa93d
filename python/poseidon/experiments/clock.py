"""The replayed device: a clock that spends profiled compute time, dilated.

Note [device clock]. A GPU runs the kernels the training thread queues back to back; the
thread's own Python work between kernels overlaps with them and costs nothing unless the
thread falls behind. The replay keeps `free_at`, the moment the emulated device finishes
what it was given, and each `spend(t)` sleeps until `free_at + t·dilation`. When the
thread comes back later than `free_at` by at most `slack_s` (its own bookkeeping, a
sleep that woke late), the device is taken to have run back to back and the next target
is counted from `free_at`, not from now, so those delays do not add up. A longer gap means
the device really idled (the thread waited for a gradient): counting starts again from
now. Dilation stretches every compute time by one factor (the emulated links are slowed
by the same factor), so that a 2-core machine can play 16 nodes: reported times are
divided by it again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class ClockStats:
    spends: int = 0
    charged_s: float = 0.0  # undilated compute time spent
    late_s: float = 0.0  # wall time woken past the targets (slept too long), summed
    restarts: int = 0  # gaps longer than the slack (the device idled)


class ReplayClock:
    def __init__(self, dilation: float = 1.0, slack_s: float = 0.002) -> None:
        if dilation <= 0:
            raise ValueError(f"dilation {dilation} (want > 0)")
        self.dilation = dilation
        self.slack_s = slack_s
        self.stats = ClockStats()
        self._free_at = 0.0

    def spend(self, seconds: float) -> None:
        """Block for `seconds` of device time (× dilation), counted as described above."""
        if seconds <= 0:
            return
        now = time.perf_counter()
        if now > self._free_at + self.slack_s:
            self._free_at = now
            self.stats.restarts += 1
        target = self._free_at + seconds * self.dilation
        self._free_at = target
        self.stats.spends += 1
        self.stats.charged_s += seconds
        remaining = target - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        woke = time.perf_counter()
        if woke > target:
            self.stats.late_s += woke - target


# The clock of this process's replayed device; configure() sets it before the net is built.
_clock = ReplayClock()


def configure(dilation: float, slack_s: float = 0.002) -> ReplayClock:
    global _clock
    _clock = ReplayClock(dilation, slack_s)
    return _clock


def device_clock() -> ReplayClock:
    return _clock
