"""The other load beside a cell (machine_load.py, Note [other load]): the machine's busy
time less this process's and its reaped children's, as a share of the cores."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from poseidon.experiments import machine_load
from poseidon.experiments.machine_load import (
    OTHER_LOAD_NOTE_SHARE,
    OtherLoad,
    machine_cpu_s,
    other_load_note,
)

TICK = os.sysconf("SC_CLK_TCK")
SPIN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


def write_stat(path, user: int, nice: int, system: int, softirq: int = 0, steal: int = 0) -> None:
    # cpu user nice system idle iowait irq softirq steal guest guest_nice
    path.write_text(f"cpu  {user} {nice} {system} 9999 0 0 {softirq} {steal} 0 0\ncpu0 0 0\n")


def test_busy_time_counts_user_nice_and_system_not_interrupts(tmp_path):
    stat = tmp_path / "stat"
    write_stat(stat, user=3 * TICK, nice=2 * TICK, system=TICK, softirq=50 * TICK, steal=TICK)
    assert machine_cpu_s(str(stat)) == pytest.approx((6.0, 1.0))
    (tmp_path / "old").write_text(f"cpu  {TICK} 0 0 9999\n")  # a kernel before steal time
    assert machine_cpu_s(str(tmp_path / "old")) == pytest.approx((1.0, 0.0))
    assert machine_cpu_s(str(tmp_path / "absent")) is None
    (tmp_path / "odd").write_text("intr 1 2 3\n")
    assert machine_cpu_s(str(tmp_path / "odd")) is None


def test_other_share_is_the_busy_time_less_the_jobs_over_the_cores(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    write_stat(stat, user=0, nice=0, system=0)
    clock = iter([100.0, 110.0])  # ten seconds of wall time
    own = iter([5.0, 9.0])  # of which this process and its children took four CPU seconds
    monkeypatch.setattr(machine_load.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(machine_load, "own_cpu_s", lambda: next(own))
    span = OtherLoad(cores=2, stat_path=str(stat)).start()
    # Eleven busy seconds in all: four ours, seven another's (the nice column counts too);
    # and two seconds the hypervisor gave away.
    write_stat(stat, user=4 * TICK, nice=6 * TICK, system=TICK, softirq=30 * TICK, steal=2 * TICK)
    assert span.other_share() == pytest.approx((7.0 + 2.0) / (10 * 2))


def test_unreadable_stat_gives_no_share(tmp_path):
    span = OtherLoad(cores=2, stat_path=str(tmp_path / "absent")).start()
    assert span.other_share() is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc/stat")
def test_a_process_outside_the_job_is_other_load_and_a_reaped_child_is_not():
    cores = os.cpu_count() or 1
    # A child that spins for a second and is waited for: the job's own work.
    span = OtherLoad(cores).start()
    subprocess.run([sys.executable, "-c", SPIN.format(s=1.0)], check=True)
    mine = span.other_share()
    # The same child, measured before it is waited for: not (yet) counted as ours.
    hog = subprocess.Popen([sys.executable, "-c", SPIN.format(s=1.5)])
    try:
        span = OtherLoad(cores).start()
        time.sleep(1.0)
        other = span.other_share()
    finally:
        hog.wait()
    assert mine is not None and other is not None
    # One core spun for the whole span: 1/cores, less what a busy machine denied it.
    assert other > 0.4 / cores
    assert other > mine + 0.3 / cores


def test_the_note_names_the_share_and_says_what_to_do():
    note = other_load_note(0.38, 2)
    assert note is not None and "took 0.38 of this machine's 2 cores" in note
    assert "nice 19" in note and "alone" in note
    assert other_load_note(OTHER_LOAD_NOTE_SHARE, 2) is None
    assert other_load_note(None, 2) is None  # not Linux: nothing measured, nothing said
