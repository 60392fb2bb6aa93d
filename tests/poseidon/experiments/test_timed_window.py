"""An experiment worker's timed window (worker.py, Note [timed window]): steady iterations,
from the start of one to the start of another, not step() calls, which end with a drain."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from poseidon.experiments import worker

COMPUTE_S, WAIT_S, DRAIN_S = 0.5, 0.25, 3.0
BYTES_PER_ITERATION = 1000


@dataclass
class FakeClock:
    now: float = 0.0


@dataclass
class Stats:
    charged_s: float = 0.0
    late_s: float = 0.0
    idle_s: float = 0.0
    restarts: int = 0


@dataclass
class FakeDevice:
    stats: Stats = field(default_factory=Stats)


class FakeSync:
    def __init__(self) -> None:
        self.sent = 0
        self.reads = 0

    def traffic(self) -> dict[int, tuple[int, int]]:
        self.reads += 1
        return {0: (self.sent, self.sent)}


class Handle:
    def __init__(self, callbacks: list, pair: tuple) -> None:
        self.callbacks, self.pair = callbacks, pair

    def remove(self) -> None:
        self.callbacks.remove(self.pair)


class WfbpLikeSolver:
    """Each iteration after the first waits WAIT_S for the previous one's gradients, then
    computes; step() ends by waiting DRAIN_S for the last iteration's (the solver's flush)."""

    def __init__(self, clock: FakeClock, sync: FakeSync, device: FakeDevice,
                 stop_after: int | None = None) -> None:  # fmt: skip
        self.clock, self.sync, self.device = clock, sync, device
        self.callbacks: list[tuple] = []
        self.stop_after = stop_after

    def add_callback(self, on_start, on_gradients_ready) -> Handle:  # type: ignore[no-untyped-def]
        pair = (on_start, on_gradients_ready)
        self.callbacks.append(pair)
        return Handle(self.callbacks, pair)

    def step(self, iterations: int) -> None:
        for i in range(iterations):
            if self.stop_after is not None and i == self.stop_after:
                break
            for on_start, _ in self.callbacks:
                on_start()
            if i:
                self.clock.now += WAIT_S
            self.clock.now += COMPUTE_S
            self.device.stats.charged_s += COMPUTE_S
            self.sync.sent += BYTES_PER_ITERATION
            for _, on_gradients_ready in self.callbacks:
                on_gradients_ready()
        self.clock.now += DRAIN_S


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(worker.time, "perf_counter", lambda: c.now)
    return c


def test_the_window_holds_steady_iterations_only(clock):
    sync, device = FakeSync(), FakeDevice()
    solver = WfbpLikeSolver(clock, sync, device)
    first, last = worker.timed_window(solver, sync, device, warmup=2, n=5)
    # Timing the step() call instead would read (5 x 0.5 + 4 x 0.25 + 3.0) / 5 = 1.3 s.
    assert (last.clock_s - first.clock_s) / 5 == pytest.approx(COMPUTE_S + WAIT_S)
    assert (last.sent - first.sent) / 5 == BYTES_PER_ITERATION
    assert (last.charged_s - first.charged_s) / 5 == pytest.approx(COMPUTE_S)
    assert solver.callbacks == []  # the marks' callback is gone again
    assert sync.reads == 2  # the counters are read at the window's two ends only


def test_a_job_that_stops_early_is_named(clock):
    sync, device = FakeSync(), FakeDevice()
    solver = WfbpLikeSolver(clock, sync, device, stop_after=4)
    with pytest.raises(RuntimeError, match=r"stopped after 4 iterations.*2 warm-up and 5 timed"):
        worker.timed_window(solver, sync, device, warmup=2, n=5)
    assert solver.callbacks == []


def test_an_empty_window_is_refused_before_any_iteration(clock):
    # n = 0 would ask for one mark at iteration W twice: say what is wrong, run nothing.
    sync, device = FakeSync(), FakeDevice()
    solver = WfbpLikeSolver(clock, sync, device)
    with pytest.raises(ValueError, match=r"0 iterations after 2 warm-up.*n >= 1"):
        worker.timed_window(solver, sync, device, warmup=2, n=0)
    assert solver.callbacks == [] and sync.reads == 0
