"""What else this machine ran while a cell did.

Note [other load]. A replayed cell's time is only as good as its workers' wake-ups: a
worker sleeps out each layer's dilated compute and must get a core the moment it wakes.
Other processes on the machine delay those wake-ups, even at nice 19, and a net of many
short layers pays for that per layer: Inception-V3's 4-node cells on 10 GbE without GSO
read 0.5-4.6% slower beside one process spinning at nice 19 than alone, by amounts that
vary from run to run (docs/experiments.md §6.5, "Other work beside an emulation").
OtherLoad measures, over a cell's job, the machine's busy CPU time (/proc/stat: user, nice
and system, so not the interrupts that carry the emulated links' packets) less what the
job's processes (this process's reaped children and grandchildren) and this process took,
plus the time a hypervisor gave this machine's virtual CPUs to others (steal), as a share
of the machine's cores.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

# /proc/stat's first line: cpu user nice system idle iowait irq softirq steal ...
_STAT = "/proc/stat"
_BUSY_FIELDS = (0, 1, 2)  # user, nice, system (user includes guest time)
_STEAL_FIELD = 7  # time the hypervisor gave this machine's virtual CPUs to others


def machine_cpu_s(stat_path: str = _STAT) -> tuple[float, float] | None:
    """CPU seconds all cores have spent busy (user, nice and system time) and stolen (by
    the hypervisor) since boot; None where /proc/stat cannot be read (not Linux)."""
    try:
        with open(stat_path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:]]
    busy = sum(ticks[i] for i in _BUSY_FIELDS)
    steal = ticks[_STEAL_FIELD] if len(ticks) > _STEAL_FIELD else 0
    tick = os.sysconf("SC_CLK_TCK")
    return busy / tick, steal / tick


def own_cpu_s() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class OtherLoad:
    """A span of wall time: other_share() is the share of `cores` that processes outside
    this one and its children, or the hypervisor, took in it (Note [other load])."""

    cores: int
    stat_path: str = _STAT
    _busy: tuple[float, float] | None = None
    _own: float = 0.0
    _wall: float = 0.0

    def start(self) -> OtherLoad:
        self._busy = machine_cpu_s(self.stat_path)
        self._own = own_cpu_s()
        self._wall = time.monotonic()
        return self

    def other_share(self) -> float | None:
        """Since start(): None where the machine's busy time cannot be read."""
        busy = machine_cpu_s(self.stat_path)
        wall = time.monotonic() - self._wall
        if busy is None or self._busy is None or wall <= 0:
            return None
        others = (busy[0] - self._busy[0]) - (own_cpu_s() - self._own)
        stolen = busy[1] - self._busy[1]
        return (max(0.0, others) + stolen) / (wall * self.cores)


# Above this share of the cores taken by other processes, a cell's time is suspect. What the
# kernel's own threads do for an emulation counts as other work too, but stays far below it
# on a machine left to the emulation: 0 to 0.013 of the cores in the cells of
# docs/experiments.md §6.5 ("Other work beside an emulation") and §6.2's rerun at byte scale 8.
OTHER_LOAD_NOTE_SHARE = 0.05


def other_load_note(share: float | None, cores: int) -> str | None:
    """What to tell the user when other processes took more than OTHER_LOAD_NOTE_SHARE of
    the machine's cores while a cell ran (Note [other load])."""
    if share is None or share <= OTHER_LOAD_NOTE_SHARE:
        return None
    return (f"note: other processes (or the hypervisor) took {share:.2f} of this machine's "
            f"{cores} cores while it ran; a replayed cell reads slow beside other work, even "
            "at nice 19 (run the experiment alone: docs/experiments.md §6.5)")  # fmt: skip
