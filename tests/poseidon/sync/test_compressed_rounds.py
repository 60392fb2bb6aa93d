"""The lossy rounds (poseidon/sync/round.py with powersgd_round.py) for several workers on
threads, against a stand-in of the comm core that sums each part of a layer's buffer: a
PowerSGD round equals the codec driven by hand with the same sums, over several steps (error
feedback and warm start carry); a weight stored transposed gives the transposed result; the
state survives a save and load; a failed P sum reaches `finish`."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from poseidon.sync.layout import CommShape, SyncLayer
from poseidon.sync.powersgd import PowerSGDLayer
from poseidon.sync.powersgd_round import PowerSGDExchange
from poseidon.sync.round import LayerRound

M, N, REST, RANK, WORKERS = 6, 5, 4, 2, 3


class Handle:
    def __init__(self, job: Job, key: tuple, finish, error: str = "") -> None:  # type: ignore[no-untyped-def]
        self.job, self.key, self.finish, self.error = job, key, finish, error

    def wait(self) -> None:
        if self.error:
            raise RuntimeError(self.error)
        with self.job.changed:
            ready = lambda: len(self.job.pushed[self.key]) == self.job.size  # noqa: E731
            assert self.job.changed.wait_for(ready, timeout=10), "a part never completed"
        self.finish()

    def timing(self) -> None:
        return None


class Job:
    """The comm core for `size` workers: push_pull(layer, t, part) sums that part of every
    worker's registered buffer."""

    def __init__(self, size: int, parts: list[slice], fail_part: int = -1) -> None:
        self.size, self.parts, self.fail_part = size, parts, fail_part
        self.changed = threading.Condition()
        self.pushed: dict[tuple, dict[int, np.ndarray]] = {}
        self.order: list[tuple] = []
        self.workers = [FakeWorker(self, r) for r in range(size)]


class FakeWorker:
    def __init__(self, job: Job, rank: int) -> None:
        self.job, self.rank, self.arrays = job, rank, {}

    def register_layer(self, index: int, array: np.ndarray) -> None:
        self.arrays[index] = array

    def push_pull(self, index: int, iteration: int, part: int = 0) -> Handle:
        piece = self.job.parts[part]
        key = (index, iteration, part)
        with self.job.changed:
            self.job.order.append((self.rank, iteration, part))
            pushes = self.job.pushed.setdefault(key, {})
            pushes[self.rank] = self.arrays[index][piece].copy()
            self.job.changed.notify_all()

        def reply() -> None:
            self.arrays[index][piece] = sum(pushes.values())

        error = "peer 1 lost" if part == self.job.fail_part else ""
        return Handle(self.job, key, reply, error)

    def traffic(self) -> dict:
        return {}


def planned(m: int = M, n: int = N, rest: int = REST, rank: int = RANK) -> SimpleNamespace:
    r = min(rank, m, n)
    first = r * m + rest
    parts = [SimpleNamespace(offset=0, num_floats=first),
             SimpleNamespace(offset=first, num_floats=r * n)]  # fmt: skip
    no_time = SimpleNamespace(encode_s=0.0, between_s=0.0, finish_s=0.0)
    return SimpleNamespace(rank=r, wire_floats=first + r * n, parts=parts, matrix_m=m,
                           matrix_n=n, estimate=no_time)  # fmt: skip


def sync_layer(transposed: bool = False) -> SyncLayer:
    return SyncLayer(3, "fc", 0, M * N + REST, (0, 1), False, CommShape("FC", M, N, 8),
                     transposed)  # fmt: skip


def make_rounds(job: Job, transposed: bool = False) -> tuple[list[LayerRound], ThreadPoolExecutor]:
    continuation = ThreadPoolExecutor(1)
    rounds = []
    for worker in job.workers:
        diff = torch.zeros(M * N + REST)
        exchange = PowerSGDExchange(worker, sync_layer(transposed), planned(), diff,
                                    seed_draw=1234, continuation=continuation)  # fmt: skip
        rounds.append(LayerRound(worker, sync_layer(transposed), "PowerSGD", powersgd=exchange))
    return rounds, continuation


def gradients(step: int) -> list[torch.Tensor]:
    return [torch.randn(M * N + REST, generator=torch.Generator().manual_seed(10 * step + r))
            for r in range(WORKERS)]  # fmt: skip


def by_hand(steps: int) -> list[list[torch.Tensor]]:
    """The codec with the sums made here: every worker's mean gradient per step."""
    codecs = [PowerSGDLayer(M, N, RANK, rest=REST, seed_draw=1234) for _ in range(WORKERS)]
    results = []
    for step in range(steps):
        wires = [torch.zeros(c.wire_floats) for c in codecs]
        for codec, grad, wire in zip(codecs, gradients(step), wires):
            codec.encode_p(grad, wire)
        p_sum = sum(c.parts(w)[0].clone() for c, w in zip(codecs, wires))
        for codec, wire in zip(codecs, wires):
            codec.parts(wire)[0].copy_(p_sum)
            codec.encode_q(wire)
        q_sum = sum(c.parts(w)[1].clone() for c, w in zip(codecs, wires))
        outs = []
        for codec, wire in zip(codecs, wires):
            codec.parts(wire)[1].copy_(q_sum)
            out = torch.zeros(codec.grad_floats)
            codec.decode(wire, out, WORKERS)
            outs.append(out)
        results.append(outs)
    return results


def run_steps(
    rounds: list[LayerRound], steps: int, transposed: bool = False
) -> list[list[torch.Tensor]]:
    results = []
    for step in range(steps):
        for r, grad in zip(rounds, gradients(step)):
            if transposed:  # the worker's weight is stored N x M
                grad = torch.cat([grad[: M * N].view(M, N).t().reshape(-1), grad[M * N :]])
            r.diff.copy_(grad)
            r.submit(step)
        for r in rounds:
            r.finish(WORKERS)
        out = []
        for r in rounds:
            d = r.diff.clone()
            if transposed:
                d = torch.cat([d[: M * N].view(N, M).t().reshape(-1), d[M * N :]])
            out.append(d)
        results.append(out)
    return results


def two_parts() -> list[slice]:
    p = planned()
    return [slice(q.offset, q.offset + q.num_floats) for q in p.parts]


@pytest.mark.parametrize("transposed", [False, True], ids=["MxN", "stored-NxM"])
def test_a_powersgd_round_is_the_codec_with_every_workers_sums(transposed):
    job = Job(WORKERS, two_parts())
    rounds, continuation = make_rounds(job, transposed)
    try:
        got = run_steps(rounds, 3, transposed)
    finally:
        continuation.shutdown()
    want = by_hand(3)
    for step in range(3):
        for rank in range(WORKERS):
            torch.testing.assert_close(got[step][rank], want[step][rank], rtol=1e-5, atol=1e-6)
        # Every worker ends with the same mean; the rest (a bias) is exact.
        exact_rest = sum(g[M * N :] for g in gradients(step)) / WORKERS
        torch.testing.assert_close(got[step][0][M * N :], exact_rest)
    # Part 1 of a step never goes before that worker's part 0.
    for rank in range(WORKERS):
        mine = [(t, part) for who, t, part in job.order if who == rank]
        assert mine == sorted(mine)


def test_powersgd_state_saved_and_loaded_resumes_the_same_steps():
    job = Job(WORKERS, two_parts())
    rounds, continuation = make_rounds(job)
    try:
        run_steps(rounds, 2)
        states = [r.powersgd.state_dict() for r in rounds]
        job.pushed.clear()  # the stand-in's rounds are keyed by iteration: start afresh
        third = run_steps(rounds, 3)[2]  # steps 0..2 again: step 2's gradients at step count 4
        for r, state in zip(rounds, states):
            r.powersgd.load_state_dict(state)
        job.pushed.clear()
        again = run_steps(rounds, 3)[2]
    finally:
        continuation.shutdown()
    for a, b in zip(third, again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_failed_p_sum_is_raised_by_finish():
    job = Job(1, two_parts(), fail_part=0)
    rounds, continuation = make_rounds(job)
    try:
        rounds[0].diff.copy_(gradients(0)[0])
        rounds[0].submit(0)
        with pytest.raises(RuntimeError, match="peer 1 lost"):
            rounds[0].finish(1)
    finally:
        continuation.shutdown()


def test_a_wire_the_plan_does_not_share_is_refused():
    job = Job(1, two_parts())
    refused = r"layer 'fc': PowerSGD's wire is \d+ floats, the plan's 7"
    with pytest.raises(ValueError, match=refused):
        wrong = planned()
        wrong.wire_floats = 7
        PowerSGDExchange(job.workers[0], sync_layer(), wrong, torch.zeros(M * N + REST),
                         seed_draw=1, continuation=ThreadPoolExecutor(1))  # fmt: skip


def test_the_replays_byte_scaled_stand_in_compresses_a_scaled_matrix_and_spends_the_plan():
    # plan.h, Note [byte-scaled layers]: a 64 x 40 FC layer with a 64-float bias, replayed at
    # byte scale 4: blobs of 640 and 16 floats; PowerSGD on a 16 x 10 matrix at the
    # weight's start, the bias exact, the weight's other floats untouched; each step spends
    # the plan's estimate on the replayed device.
    from poseidon import _C
    from poseidon.plan import layer_spec

    m, n, s, workers = 64, 40, 4, 3
    floats = m * n // s + m // s
    spec = layer_spec(3, "fc", "FC", m, n, 8, floats, "powersgd", byte_scale=s)
    rates = _C.Rates(1e6, 1e9, 0.0)
    plan = _C.make_plan([spec], workers, workers, 1 << 20, rates=rates).layers[0]
    assert (plan.matrix_m, plan.matrix_n, plan.rank) == (16, 10, 4)
    assert [p.num_floats for p in plan.parts] == [4 * 16 + 16, 4 * 10]
    e = plan.estimate
    assert min(e.encode_s, e.between_s, e.finish_s) > 0
    layer = SyncLayer(3, "fc", 0, floats, (0, 1), False, CommShape("FC", m, n, 8), False, s)
    job = Job(workers, [slice(p.offset, p.offset + p.num_floats) for p in plan.parts])
    continuation = ThreadPoolExecutor(1)
    spent: list[list[float]] = [[] for _ in range(workers)]
    rounds = []
    for worker in job.workers:
        exchange = PowerSGDExchange(worker, layer, plan, torch.zeros(floats), seed_draw=7,
                                    continuation=continuation,
                                    replay_compute=spent[worker.rank].append)  # fmt: skip
        rounds.append(LayerRound(worker, layer, "PowerSGD", powersgd=exchange))
    grads = [torch.randn(floats, generator=torch.Generator().manual_seed(r))
             for r in range(workers)]  # fmt: skip
    try:
        for r, grad in zip(rounds, grads):
            r.diff.copy_(grad)
            r.submit(0)
        for r in rounds:
            r.finish(workers)
    finally:
        continuation.shutdown()
    weight = m * n // s
    codecs = [PowerSGDLayer(16, 10, 4, rest=16, seed_draw=7) for _ in range(workers)]
    wires = [torch.zeros(c.wire_floats) for c in codecs]
    for codec, grad, wire in zip(codecs, grads, wires):
        codec.encode_p(torch.cat([grad[:160], grad[weight:]]), wire)
    p_sum = sum(c.parts(w)[0].clone() for c, w in zip(codecs, wires))
    for codec, wire in zip(codecs, wires):
        codec.parts(wire)[0].copy_(p_sum)
        codec.encode_q(wire)
    q_sum = sum(c.parts(w)[1].clone() for c, w in zip(codecs, wires))
    want = torch.zeros(160 + 16)
    codecs[0].parts(wires[0])[1].copy_(q_sum)
    codecs[0].decode(wires[0], want, workers)
    for rank, r in enumerate(rounds):
        torch.testing.assert_close(r.diff[:160], want[:160], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(r.diff[weight:], want[160:])  # the bias: the exact mean
        assert torch.equal(r.diff[160:weight], grads[rank][160:weight])  # left as it was
        assert spent[rank] == [e.encode_s, e.between_s, e.finish_s]
