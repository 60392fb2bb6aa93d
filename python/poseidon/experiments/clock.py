"""The replayed device: a clock that spends profiled compute time, dilated.

Note [device clock]. A GPU runs the kernels the training thread queues back to back; the
thread's own Python work between kernels overlaps with them and costs nothing unless the
thread falls behind. The replay keeps `free_at`, the moment the emulated device finishes
what it was given, and each `spend(t)` sleeps until `free_at + t·dilation`. When the
thread comes back later than `free_at` by at most `slack_s` (its own bookkeeping, a
sleep that woke late), the device is taken to have run back to back and the next target
is counted from `free_at`, not from now, so those delays do not add up. A longer gap means
the device really idled (the thread waited for a gradient): counting starts again from
now. A CPU profile replays with `host_is_device`: there the device is the host, whose
profiled layer times already include its own work, and the syncer's host work (copies, sums)
delays the next layer instead of hiding behind it, so every gap between steps counts, except
what a sleep overslept (the clock's own error, which a real CPU does not have) and what ran
`untimed`: host work the profile already charged (the update's data -= diff, inside the
profiled update_s, which the replay's solver spends and then does for real). Dilation
stretches every compute time by one factor (the emulated links are slowed by the same
factor), so that a 2-core machine can play 16 nodes: reported times are divided by it again.
"""

from __future__ import annotations

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

    @contextmanager
    def untimed(self) -> Iterator[None]:
        """Host work inside does not count as the host's own between steps: the profile
        already charged it (Note [device clock])."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._untimed += time.perf_counter() - start

    def spend(self, seconds: float) -> None:
        """Block for `seconds` of device time (× dilation), counted as described above."""
        if seconds <= 0:
            return
        now = time.perf_counter() - self._untimed
        self._untimed = 0.0
        if self.host_is_device:
            # All the time since the last step ended was the host's own work (a CPU does it
            # in line), except the last sleep's lateness: that is the clock's, not the host's.
            start = max(self._free_at, now - self._overslept)
        elif now > self._free_at + self.slack_s:
            start = now
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
