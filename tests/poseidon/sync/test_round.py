"""A layer's round and the start-up broadcast (poseidon/sync/round.py, broadcast.py) for
several workers against a stand-in of the comm core in one process: the PS round leaves the
mean in every worker's range, the SFB round rebuilds the mean gradient from every worker's
factors, and rank 0's weights reach everyone bit for bit, an SFB layer's in pieces."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from poseidon.sync.broadcast import broadcast_through_rounds
from poseidon.sync.factors import FactorLog
from poseidon.sync.layout import CommShape, SyncLayer
from poseidon.sync.round import FactorOverflowError, LayerRound

OUT, IN = 4, 6


class Done:
    """A handle whose wait() blocks until `ready()` (at most 10 s), then runs `finish`."""

    def __init__(self, job: Job, ready, finish=lambda: None) -> None:  # type: ignore[no-untyped-def]
        self.job, self.ready, self.finish = job, ready, finish

    def wait(self) -> None:
        with self.job.changed:
            assert self.job.changed.wait_for(self.ready, timeout=10), "a round never completed"
        self.finish()


class Job:
    """What the comm core does for P workers, in closed form: a push-pull's reply is the
    sum of every worker's push; an all-gather's factor r is what rank r sent. Workers may
    run on threads of their own."""

    def __init__(self, workers: int) -> None:
        self.changed = threading.Condition()
        self.pushed: dict[tuple[int, int], dict[int, np.ndarray]] = {}
        self.gathered: dict[tuple[int, int], dict[int, np.ndarray]] = {}
        self.workers = [Worker(self, rank, workers) for rank in range(workers)]


class Worker:
    def __init__(self, job: Job, rank: int, num_workers: int) -> None:
        self.job, self.rank, self.num_workers = job, rank, num_workers
        self.arrays: dict[int, np.ndarray] = {}
        self.capacity: dict[int, int] = {}

    def register_layer(self, index: int, array: np.ndarray) -> None:
        self.arrays[index] = array

    def register_sfb_layer(self, index: int, reserved: int, max_floats: int = 0) -> None:
        self.capacity[index] = max(reserved, max_floats)  # the comm core grows up to this

    def push_pull(self, index: int, iteration: int) -> Done:
        with self.job.changed:
            pushes = self.job.pushed.setdefault((index, iteration), {})
            pushes[self.rank] = self.arrays[index].copy()
            self.job.changed.notify_all()

        def reply() -> None:
            self.arrays[index][:] = sum(pushes.values())

        return Done(self.job, lambda: len(pushes) == self.num_workers, reply)

    def allgather(self, index: int, iteration: int, payload: np.ndarray) -> Done:
        assert payload.size <= self.capacity[index], "more than the registered maximum"
        with self.job.changed:
            gathered = self.job.gathered.setdefault((index, iteration), {})
            gathered[self.rank] = np.array(payload)
            self.job.changed.notify_all()
        return Done(self.job, lambda: len(gathered) == self.num_workers)

    def factor(self, index: int, iteration: int, rank: int) -> np.ndarray:
        return self.job.gathered[(index, iteration)][rank]


def layer(index: int, floats: int, kind: str = "other") -> SyncLayer:
    return SyncLayer(index, f"layer{index}", 0, floats, (), False, CommShape(kind, 1, 1, 1))


def test_a_ps_round_leaves_the_mean_in_every_workers_range():
    job = Job(3)
    grads = [torch.randn(10, generator=torch.Generator().manual_seed(r)) for r in range(3)]
    rounds = [LayerRound(w, layer(0, 10), "PS", diff=g.clone()) for w, g in zip(job.workers, grads)]
    for r in rounds:
        r.submit(iteration=5)
        assert r.submitted
    for r in rounds:
        r.finish(num_workers=3)
        assert not r.submitted
    mean = sum(grads) / 3
    for r in rounds:
        torch.testing.assert_close(r.diff, mean)


def test_a_lone_workers_ps_round_leaves_its_gradient_untouched():
    # Alone, the sum is the mean: finishing must not spend a pass over the gradient (an
    # in-place multiply by one would bump the tensor's version counter).
    job = Job(1)
    grad = torch.randn(10, generator=torch.Generator().manual_seed(7))
    r = LayerRound(job.workers[0], layer(0, 10), "PS", diff=grad.clone())
    r.submit(iteration=0)
    version = r.diff._version
    r.finish(num_workers=1)
    assert r.diff._version == version
    torch.testing.assert_close(r.diff, grad)


@pytest.mark.parametrize("planned,rows", [(2, (2, 2, 2)), (1, (1, 2, 0))],
                         ids=["as-planned", "uneven-and-more"])  # fmt: skip
def test_an_sfb_round_rebuilds_the_mean_gradient_from_every_workers_factors(planned, rows):
    # Planned for 1 row: a worker that brings 2 (an accumulated step, say) grows the comm
    # core's buffers on every side (Note [factor slots]), one with none sends nothing.
    job = Job(3)
    weight_grads = [torch.zeros(OUT, IN) for _ in range(3)]
    expected = torch.zeros(OUT, IN, dtype=torch.float64)
    rounds = []
    for rank, worker in enumerate(job.workers):
        factors = FactorLog(OUT, IN)
        g = torch.Generator().manual_seed(rank)
        k = rows[rank]
        dy, x = torch.randn(k, OUT, generator=g), torch.randn(k, IN, generator=g)
        factors.add(dy, x)
        expected += dy.double().t() @ x.double() / 3

        def rebuild(dy, x, scale, target=weight_grads[rank]):  # type: ignore[no-untyped-def]
            target.addmm_(dy.t(), x, alpha=scale)

        rounds.append(LayerRound(worker, layer(1, OUT * IN, "FC"), "SFB", factors=factors,
                                 capacity_rows=planned, rebuild=rebuild))  # fmt: skip
    for r in rounds:
        r.submit(iteration=0)
    for r in rounds:
        r.finish(num_workers=3)
    for grad in weight_grads:
        torch.testing.assert_close(grad.double(), expected, rtol=1e-5, atol=1e-6)


def test_factors_beyond_the_growth_bound_are_an_error_naming_the_layer():
    worker = Job(1).workers[0]
    factors = FactorLog(OUT, IN)
    rows = 16 * 2 + 1  # planned for 2: beyond 16 times that (and twice dW, 24 floats)
    factors.add(torch.zeros(rows, OUT), torch.zeros(rows, IN))
    r = LayerRound(worker, layer(2, OUT * IN, "FC"), "SFB", factors=factors, capacity_rows=2,
                   rebuild=lambda *_: None)  # fmt: skip
    expected = rf"layer2: {rows} rows .* than the 2 it was planned with \(.* more than 16 times"
    with pytest.raises(FactorOverflowError, match=expected):
        r.submit(iteration=0)


def test_rank_0s_weights_reach_every_worker_through_the_rounds():
    job = Job(3)
    per_worker = []
    for rank, worker in enumerate(job.workers):
        ps_weights = torch.full((7,), float(rank + 1))
        ps_weights[0] = -0.0 if rank == 0 else 5.0
        sfb_weights = torch.arange(40, dtype=torch.float32) * (rank + 1)  # 40 > 16: pieces
        ps = LayerRound(worker, layer(0, 7), "PS", diff=torch.zeros(7))
        sfb = LayerRound(worker, layer(1, 40, "FC"), "SFB", factors=FactorLog(1, 1),
                         capacity_rows=8, rebuild=lambda *_: None)  # fmt: skip
        assert sfb.factor_floats == 16
        per_worker.append(([ps, sfb], [ps_weights, sfb_weights]))
    with ThreadPoolExecutor(3) as pool:  # each worker blocks until the others' part comes
        done = [pool.submit(broadcast_through_rounds, rounds, weights, rank, 9)
                for rank, (rounds, weights) in enumerate(per_worker)]  # fmt: skip
        for future in done:
            future.result(timeout=30)
    for rounds, (ps_weights, sfb_weights) in per_worker:
        assert torch.equal(ps_weights, per_worker[0][1][0])
        assert torch.equal(sfb_weights, torch.arange(40, dtype=torch.float32))
        assert not bool(rounds[0].diff.any())  # the range is zeroed for training
    # Three pieces of 16, 16 and 8 floats at iterations 7, 8, 9.
    assert sorted(it for (index, it) in job.gathered if index == 1) == [7, 8, 9]
