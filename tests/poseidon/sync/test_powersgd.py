"""PowerSGD for one layer (poseidon/sync/powersgd.py): against PyTorch's DDP powerSGD_hook on
gloo with 2 and 4 processes (the weight gradients bit for bit when the sums are made over the
hook's buffers, to float rounding when each wire part is summed whole as Poseidon's KV store
does), error feedback across steps, resuming from a state_dict, and bad input named."""

from __future__ import annotations

import json
import math
import os
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from poseidon.rendezvous import free_port
from poseidon.sync.powersgd import PowerSGDLayer, seed_draws, should_compress

# --- In one process: W workers' layers, the sums made here ----------------------------------


def sync_step(
    layers: list[PowerSGDLayer], grads: list[torch.Tensor], draws: list[int] | None = None
) -> list[torch.Tensor]:
    """One step of every worker's layer with the two sums done in closed form; each worker's
    synchronised gradient (they are all the same)."""
    wires = [torch.empty(layer.wire_floats) for layer in layers]
    for i, (layer, grad, wire) in enumerate(zip(layers, grads, wires)):
        layer.encode_p(grad, wire, seed_draw=None if draws is None else draws[i])
    for part in (0, 1):
        total = torch.stack([layer.parts(w)[part] for layer, w in zip(layers, wires)]).sum(0)
        for layer, wire in zip(layers, wires):
            layer.parts(wire)[part].copy_(total)
            if part == 0:
                layer.encode_q(wire)
    outs = [torch.empty(layer.grad_floats) for layer in layers]
    for layer, wire, out in zip(layers, wires, outs):
        layer.decode(wire, out, len(layers))
    return outs


def workers(count: int, m: int, n: int, rank: int, **kwargs) -> list[PowerSGDLayer]:  # type: ignore[no-untyped-def]
    return [PowerSGDLayer(m, n, rank, seed_draw=7, **kwargs) for _ in range(count)]


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --- Error feedback ----------------------------------------------------------------------------


def test_full_rank_is_exact_and_leaves_each_worker_its_deviation_from_the_mean():
    # r = min(m, n) = 2: the summed P spans all of R², so P·Pᵀ = I and the approximation is the
    # mean gradient itself; the error is what the hook keeps too: local input − mean.
    g0 = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    g1 = torch.tensor([[3.0, 0.0, -1.0], [2.0, 1.0, 0.0]])
    layers = workers(2, 2, 3, rank=5)
    assert layers[0].rank == 2 and layers[0].wire_floats == 2 * (2 + 3)
    out = sync_step(layers, [g0.reshape(-1), g1.reshape(-1)])
    mean = torch.tensor([[2.0, 1.0, 1.0], [3.0, 3.0, 3.0]])
    torch.testing.assert_close(out[0].view(2, 3), mean, atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1], out[0], atol=0, rtol=0)
    errors = [layer.state_dict()["error"] for layer in layers]
    torch.testing.assert_close(errors[0].view(2, 3), g0 - mean, atol=1e-5, rtol=0)
    torch.testing.assert_close(errors[1].view(2, 3), g1 - mean, atol=1e-5, rtol=0)


def test_rank_one_gradient_comes_back_from_rank_one():
    u, v = torch.tensor([1.0, -2.0, 0.5, 3.0]), torch.tensor([2.0, 0.0, -1.0])
    (layer,) = workers(1, 4, 3, rank=1)
    (out,) = sync_step([layer], [torch.outer(u, v).reshape(-1)])
    torch.testing.assert_close(out.view(4, 3), torch.outer(u, v), atol=1e-5, rtol=0)
    assert float(layer.state_dict()["error"].abs().max()) < 1e-5


def gap_after(steps: int, error_feedback: bool) -> tuple[float, list[PowerSGDLayer], list]:  # type: ignore[type-arg]
    """Rank 1 on a full-rank 6 × 5 gradient that is the same every step, two workers: the
    relative distance between the sum of the approximations and the sum of the mean
    gradients, and what it took."""
    grads = [randn(30, seed=1), randn(30, seed=2)]
    layers = workers(2, 6, 5, rank=1, error_feedback=error_feedback)
    sent = torch.zeros(30, dtype=torch.float64)
    for _ in range(steps):
        sent += sync_step(layers, grads)[0].double()
    truth = steps * (grads[0].double() + grads[1].double()) / 2
    return float((sent - truth).norm() / truth.norm()), layers, grads


def test_error_feedback_sends_in_the_end_what_one_rank_cannot_send_at_once():
    with_ef = [gap_after(steps, True)[0] for steps in (5, 20, 80)]
    without, *_ = gap_after(80, False)
    # What is not sent stays in the error and goes out later: the gap shrinks like 1/steps.
    assert with_ef[2] < with_ef[1] < with_ef[0] and with_ef[2] < 0.05
    # Without it the rest of the spectrum is never sent.
    assert without > 0.3


def test_error_is_exactly_what_is_still_to_be_sent():
    # Per worker: Σ approximations + this worker's error = Σ its own gradients (the identity
    # error feedback keeps; the approximation is the same on every worker).
    steps = 7
    layers = workers(3, 8, 6, rank=2, rest=2)
    sent = torch.zeros(50, dtype=torch.float64)
    own = [torch.zeros(50, dtype=torch.float64) for _ in layers]
    for t in range(steps):
        grads = [randn(50, seed=100 * t + i) for i in range(3)]
        sent += sync_step(layers, grads)[0].double()
        for total, grad in zip(own, grads):
            total += grad.double()
    for layer, total in zip(layers, own):
        error = layer.state_dict()["error"].double()
        torch.testing.assert_close(sent[:48] + error, total[:48], atol=1e-5, rtol=0)
    # The rest is exact, with no error of its own.
    torch.testing.assert_close(sent[48:], sum(own)[48:] / 3, atol=1e-5, rtol=0)


def test_a_zero_gradient_gives_zeros_not_nan():
    layers = workers(2, 5, 4, rank=1)
    out = sync_step(layers, [torch.zeros(20), torch.zeros(20)])
    assert torch.equal(out[0], torch.zeros(20))


def test_the_program_random_stream_is_left_alone():
    torch.manual_seed(3)
    expected = torch.randn(4)
    torch.manual_seed(3)
    workers(1, 5, 4, rank=2)
    assert torch.equal(torch.randn(4), expected)


# --- Resume ----------------------------------------------------------------------------------


@pytest.mark.parametrize("warm_start", [True, False])
def test_state_dict_resumes_bit_for_bit(warm_start: bool):
    def grads(t: int) -> list[torch.Tensor]:
        return [randn(9 * 7 + 3, seed=10 * t + i) for i in range(2)]

    def draws(t: int) -> list[int] | None:
        return None if warm_start else seed_draws(t, 1) * 2

    kwargs = {"rest": 3, "warm_start": warm_start}
    layers = workers(2, 9, 7, rank=3, **kwargs)
    for t in range(3):
        sync_step(layers, grads(t), draws(t))
    saved = [layer.state_dict() for layer in layers]
    # Another seed: whatever resumes must come from the state.
    resumed = [PowerSGDLayer(9, 7, 3, seed_draw=99, **kwargs) for _ in range(2)]
    for layer, state in zip(resumed, saved):
        layer.load_state_dict(state)
    for t in range(3, 6):
        expected, got = (
            sync_step(layers, grads(t), draws(t)),
            sync_step(resumed, grads(t), draws(t)),
        )
        assert all(torch.equal(a, b) for a, b in zip(expected, got)), f"step {t} differs"
    assert [layer.state_dict()["steps"] for layer in resumed] == [6, 6]


def test_load_state_dict_names_what_does_not_fit():
    state = workers(1, 6, 5, rank=2, rest=1)[0].state_dict()
    with pytest.raises(ValueError, match=r"state's m = 6, this layer's is 7"):
        PowerSGDLayer(7, 5, 2, rest=1, seed_draw=0).load_state_dict(state)
    with pytest.raises(ValueError, match=r"state's rank = 2, this layer's is 3"):
        PowerSGDLayer(6, 5, 3, rest=1, seed_draw=0).load_state_dict(state)
    bad = dict(state, error=torch.zeros(29))
    with pytest.raises(ValueError, match=r"state's error is torch.float32 of shape \(29,\), "
                       r"expected torch.float32 of shape \(30,\)"):  # fmt: skip
        PowerSGDLayer(6, 5, 2, rest=1, seed_draw=0).load_state_dict(bad)
    with pytest.raises(ValueError, match=r"state has no 'q'"):
        PowerSGDLayer(6, 5, 2, rest=1, seed_draw=0).load_state_dict(
            {k: v for k, v in state.items() if k != "q"}
        )
    with pytest.raises(ValueError, match=r"state has an error but this layer's error_feedback"):
        PowerSGDLayer(6, 5, 2, rest=1, seed_draw=0, error_feedback=False).load_state_dict(state)


# --- Bad input -------------------------------------------------------------------------------


def test_bad_shapes_and_sizes_are_named():
    with pytest.raises(ValueError, match=r"rank = 0: the approximation rank must be at least 1"):
        PowerSGDLayer(4, 4, 0, seed_draw=0)
    with pytest.raises(ValueError, match=r"the weight is 1 × 8: PowerSGD needs a matrix"):
        PowerSGDLayer(1, 8, 1, seed_draw=0)
    with pytest.raises(ValueError, match=r"the weight is 8 × 1"):
        PowerSGDLayer(8, 1, 1, seed_draw=0)
    layer = PowerSGDLayer(4, 3, 2, rest=4, seed_draw=0)
    assert (layer.grad_floats, layer.wire_floats) == (16, 18)
    with pytest.raises(
        ValueError, match=r"grad must be a flat tensor of 16 floats .* got shape \(15,\)"
    ):
        layer.encode_p(torch.zeros(15), torch.zeros(18))
    with pytest.raises(
        ValueError, match=r"wire must be a flat tensor of 18 floats .* got shape \(3, 6\)"
    ):
        layer.encode_p(torch.zeros(16), torch.zeros(3, 6))
    with pytest.raises(
        ValueError, match=r"grad is torch.float64 on cpu, the layer works in torch.float32"
    ):
        layer.encode_p(torch.zeros(16, dtype=torch.float64), torch.zeros(18))
    with pytest.raises(RuntimeError, match=r"decode called out of order: it comes after encode_q"):
        layer.decode(torch.zeros(18), torch.zeros(16), 2)
    layer.encode_p(torch.ones(16), torch.zeros(18))
    with pytest.raises(ValueError, match=r"wire must be a flat tensor of 18 floats"):
        layer.encode_q(torch.zeros(17))
    layer.encode_q(torch.zeros(18))
    with pytest.raises(ValueError, match=r"grad must be a flat tensor of 16 floats"):
        layer.decode(torch.zeros(18), torch.zeros(17), 2)
    with pytest.raises(ValueError, match=r"num_workers = 0: must be at least 1"):
        layer.decode(torch.zeros(18), torch.zeros(16), 0)
    with pytest.raises(RuntimeError, match=r"state_dict called out of order"):
        layer.state_dict()  # mid-step: the error of this step is not made yet


def test_without_warm_start_every_later_step_needs_a_draw():
    layers = workers(1, 4, 3, rank=1, warm_start=False)
    sync_step(layers, [torch.ones(12)])
    with pytest.raises(ValueError, match=r"warm_start=False .* pass seed_draw"):
        sync_step(layers, [torch.ones(12)])


def test_seed_draws_and_should_compress_follow_the_hook():
    rng = np.random.RandomState(5)
    assert seed_draws(5, 3) == [rng.randint(1_000_000_000) for _ in range(3)]
    rng = np.random.RandomState(5)
    assert seed_draws(rng, 2) + seed_draws(rng, 1) == seed_draws(5, 3)
    # (m + n)·r·2 < m·n: a 16 × 36 conv at rank 3 is worth it, a 4 × 4 matrix is not.
    assert should_compress(16, 36, 3) and not should_compress(4, 4, 1)


# --- Against the DDP hook on gloo ------------------------------------------------------------

# (weight shape, bias length): a conv kernel (out × in·kh·kw), a linear layer, one without bias.
MODEL = [((16, 4, 3, 3), 16), ((32, 24), 32), ((20, 48), 0)]
START = 2  # the hook's minimum start_powerSGD_iter with error feedback or warm start
STEPS = 5  # PowerSGD steps after START vanilla ones: warm start and error feedback matter
SEED = 1234
CONFIGS = {  # name: (rank, error feedback, warm start)
    "rank 2, Gram-Schmidt": (2, True, True),
    "rank 3, QR": (3, True, True),
    "rank 1, no error feedback, no warm start": (1, False, False),
}


class Injected(torch.nn.Module):
    """loss = Σ parameter·given: each parameter's gradient is exactly what forward is given."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(s)) for s, _ in MODEL)
        # A layer with no bias has no bias parameter (the hook fails on an empty one).
        self.biases = torch.nn.ParameterList(
            torch.nn.Parameter(torch.zeros(b)) for _, b in MODEL if b
        )

    def forward(self, given: list[torch.Tensor]) -> torch.Tensor:
        return sum((p * g).sum() for p, g in zip([*self.weights, *self.biases], given))


def local_gradients(rank: int, step: int) -> list[torch.Tensor]:
    """This rank's gradients at a step, weights then biases (the model's parameter order; a
    layer without bias has an empty one here, not passed to the model): a rank-3 part all share
    and noise of each rank's own, so the mean has a spectrum worth approximating."""
    shared = torch.Generator().manual_seed(step)
    own = torch.Generator().manual_seed(1000 * (rank + 1) + step)
    grads = []
    for shape, _ in MODEL:
        m, n = shape[0], math.prod(shape[1:])
        low = torch.randn(m, 3, generator=shared) @ torch.randn(3, n, generator=shared)
        grads.append((low + 0.5 * torch.randn(m, n, generator=own)).reshape(shape))
    grads += [torch.randn(b, generator=own) + 1.0 for _, b in MODEL]
    return grads


def compare_with_hook(rank: int, world: int, config: tuple[int, bool, bool]) -> dict[str, float]:
    approx_rank, error_feedback, warm_start = config
    model = DistributedDataParallel(Injected(), bucket_cap_mb=1e-6)  # a bucket per parameter
    state = PowerSGDState(
        None, matrix_approximation_rank=approx_rank, start_powerSGD_iter=START,
        use_error_feedback=error_feedback, warm_start=warm_start, random_seed=SEED,
    )  # fmt: skip
    launches: list[list[int]] = []  # per hook call this step: ids of the bucket's parameters

    # No annotations: DDP checks them against dist.GradBucket and these would be strings.
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        launches.append([id(p) for p in bucket.parameters()])
        # One bucket at a time: the hook's callbacks block a gloo worker thread on the next
        # all-reduce, so several buckets in flight can take every thread (a deadlock) or
        # issue their all-reduces in a different order on different ranks. Waiting here
        # changes no arithmetic.
        future = powerSGD_hook(state, bucket)
        future.wait()
        return future

    model.register_comm_hook(state, hook)
    weights = list(model.module.weights)
    biases = iter(model.module.biases)
    bias_of = [next(biases) if rest else None for _, rest in MODEL]
    num_params = len(list(model.parameters()))
    rng = np.random.RandomState(SEED)  # the hook's draws, continued step after step
    ours: dict[str, list[PowerSGDLayer]] = {"hook buffers": [], "whole parts": []}
    stats = dict.fromkeys(
        ["weight_hook_buffers_abs", "weight_whole_parts_abs", "weight_whole_parts_rel",
         "bias_abs", "bias_rel", "weight_exact", "lossy"], 0.0)  # fmt: skip
    stats["weight_exact"] = 1.0
    for step in range(START + STEPS):
        given = local_gradients(rank, step)
        launches.clear()
        model.zero_grad()
        model([g for g in given if g.numel()]).backward()
        if step < START:
            continue
        # One draw per bucket in launch order, biases' buckets too, at the first PowerSGD step
        # (every step without warm start); ours needs a bucket per compressed matrix for this.
        assert len(launches) == num_params and all(len(ids) == 1 for ids in launches)
        if step == START or not warm_start:
            draws = seed_draws(rng, len(launches))
            draw_of = {ids[0]: draw for ids, draw in zip(launches, draws)}
        for i, ((shape, rest), weight, bias) in enumerate(zip(MODEL, weights, bias_of)):
            m, n = shape[0], math.prod(shape[1:])
            assert should_compress(m, n, approx_rank)
            grad = torch.cat([given[i].reshape(-1), given[len(MODEL) + i]])
            # How far the hook is from the exact mean: the comparison is not a vacuous one.
            mean = given[i].reshape(-1).clone()
            dist.all_reduce(mean)
            lossy = float((weight.grad.reshape(-1) - mean / world).abs().max() / mean.abs().max())
            stats["lossy"] = max(stats["lossy"], lossy)
            seed_draw = draw_of[id(weight)]
            for sums, layers in ours.items():
                if step == START:
                    layers.append(
                        PowerSGDLayer(m, n, approx_rank, rest=rest, seed_draw=seed_draw,
                                      error_feedback=error_feedback, warm_start=warm_start)
                    )  # fmt: skip
                layer, out = layers[i], torch.empty_like(grad)
                wire = torch.empty(layer.wire_floats)
                layer.encode_p(grad, wire, seed_draw=None if warm_start else seed_draw)
                part0, part1 = layer.parts(wire)
                if sums == "hook buffers":  # P alone, the bias alone: the hook's buffers
                    p_floats = layer.rank * m
                    dist.all_reduce(part0[:p_floats])
                    if rest:
                        dist.all_reduce(part0[p_floats:])
                else:  # [P | rest] as one, as the KV store sums it
                    dist.all_reduce(part0)
                layer.encode_q(wire)
                dist.all_reduce(part1)
                layer.decode(wire, out, world)
                expected = weight.grad.reshape(-1)
                diff = float((out[: m * n] - expected).abs().max())
                scale = float(expected.abs().max())
                if sums == "hook buffers":
                    stats["weight_hook_buffers_abs"] = max(stats["weight_hook_buffers_abs"], diff)
                    stats["weight_exact"] *= float(torch.equal(out[: m * n], expected))
                else:
                    stats["weight_whole_parts_abs"] = max(stats["weight_whole_parts_abs"], diff)
                    stats["weight_whole_parts_rel"] = max(
                        stats["weight_whole_parts_rel"], diff / scale
                    )
                if bias is not None:
                    # The hook's bias carries its "error" (local − mean), which cancels over the
                    # workers up to rounding; ours is sent exact.
                    diff = float((out[m * n :] - bias.grad).abs().max())
                    stats["bias_abs"] = max(stats["bias_abs"], diff)
                    stats["bias_rel"] = max(stats["bias_rel"], diff / float(bias.grad.abs().max()))
    return stats


def equivalence_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=timedelta(seconds=30),
    )  # fmt: skip
    try:
        stats = {name: compare_with_hook(rank, world, config) for name, config in CONFIGS.items()}
        (Path(out_dir) / f"{rank}.json").write_text(json.dumps(stats))
        dist.barrier()  # every rank's results are written
    finally:
        dist.destroy_process_group()
    # Out without the interpreter's teardown: torch 2.13's gloo threads of the DDP hooks'
    # futures sometimes abort it ("terminate called without an active exception", about one
    # run in four here), after every result is written.
    os._exit(0)


@pytest.mark.parametrize("world", [2, 4])
def test_matches_the_ddp_hook_on_gloo(world: int, tmp_path: Path):
    context = mp.get_context("spawn")
    port = free_port()
    procs = [
        context.Process(target=equivalence_worker, args=(rank, world, port, str(tmp_path)))
        for rank in range(world)
    ]
    for proc in procs:
        proc.start()
    # Until all are done, one has failed (the others would wait for it in vain) or 120 s.
    deadline = time.monotonic() + 120
    while any(proc.is_alive() for proc in procs) and time.monotonic() < deadline:
        if any(proc.exitcode not in (None, 0) for proc in procs):
            break
        time.sleep(0.05)
    stuck = [proc for proc in procs if proc.is_alive()]
    for proc in stuck:
        proc.kill()
        proc.join(5)
    assert [proc.exitcode for proc in procs if proc not in stuck] == [0] * (world - len(stuck))
    assert not stuck, f"{len(stuck)} of {world} processes did not finish in 120 s"
    for rank in range(world):
        for name, stats in json.loads((tmp_path / f"{rank}.json").read_text()).items():
            print(f"P={world} rank {rank} {name}: {stats}")
            # Summed over the hook's own buffers, the weight gradient is the hook's bit for bit.
            assert stats["weight_exact"] == 1.0, (name, stats)
            # Summed as Poseidon sums the wire (part 0 whole), the order of additions may
            # change with more than 2 workers: float rounding only.
            assert stats["weight_whole_parts_rel"] < 1e-5, (name, stats)
            if world == 2:  # a + b = b + a: no order to change
                assert stats["weight_whole_parts_abs"] == 0.0, (name, stats)
            assert stats["bias_rel"] < 1e-5, (name, stats)
            assert stats["lossy"] > 1e-2, (name, stats)  # PowerSGD did approximate
