"""What each scheme's compute costs on this worker's device, timed at the plan's own shapes
(cost_model.h, Note [measured costs]), for the cost model to rank schemes by time.

One GEMM rate cannot price every product: on a CPU, SFB's rebuild (an M×N result from
K·P1 rows) and PowerSGD's thin products (M·N by r columns) run at rates 20× apart
(docs/communication.md §5, "Measured costs"). So before the plan is made, a worker whose
job ranks schemes by time (the link's rate is known) runs each candidate scheme's compute
once on its device with the layer's sizes — the very functions the rounds call
(PowerSGDLayer's encode_p, encode_q and decode; the rebuild's addmm_ from K·P1 rows, and from
K rows the layer's own dW product, which an SFB layer skips; the bf16 conversions) — and
declares the median times with its LayerSpecs. All workers measure at once, so on a shared
machine the times include the sharing (docs/benchmarks.md says how far that goes).

`measure_scheme_costs(specs, workers, compression, rank, device, backward_s)` fills
`spec.measured` of every layer whose scheme the model chooses: SFB's phases for an FC layer,
BF16's and PowerSGD's where `compression` allows them (and PowerSGD pays), and the front
end's backward times.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from poseidon.sync.powersgd import PowerSGDLayer

REPEATS = 3  # timed runs per phase, after one untimed (allocations, kernel choice)
# Layers past this many floats are timed on a slice of this size and scaled by floats:
# the phases are linear in M·N at a fixed rank, and a VGG fc6 (103 M floats) would
# otherwise cost seconds per phase.
MAX_TIMED_FLOATS = 1 << 24


def median_seconds(work: Callable[[], object], device: torch.device,
                   repeats: int = REPEATS) -> float:  # fmt: skip
    """The median time of `repeats` runs of `work` after one untimed run (allocations,
    kernel choice); on CUDA the device is synchronised around each."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    work()
    times = []
    for _ in range(repeats):
        sync()
        started = time.perf_counter()
        work()
        sync()
        times.append(time.perf_counter() - started)
    return max(statistics.median(times), 1e-9)


def _timed_rows(m: int, n: int) -> tuple[int, float]:
    """The rows of the m×n weight to time, and the factor that scales their time to m rows."""
    rows = max(2, min(m, MAX_TIMED_FLOATS // max(n, 1)))
    return rows, m / rows


def time_weight_product(m: int, n: int, rows: int, device: torch.device) -> float:
    """Seconds of grad += dyᵀ·x with dy rows×m and x rows×n: SFB's rebuild (unit_sync.py
    `_rebuild`) from all workers' K·P1 rows, or the layer's own dW from its K rows, which the
    SFB layer skips."""
    timed, scale = _timed_rows(m, n)
    grad = torch.zeros(timed, n, device=device)
    dy = torch.randn(rows, timed, device=device)
    x = torch.randn(rows, n, device=device)
    return scale * median_seconds(lambda: grad.addmm_(dy.t(), x), device)


def time_bf16(floats: int, device: torch.device) -> tuple[float, float]:
    """Seconds of fp32 -> bf16 before the push and bf16 -> fp32 after the pull."""
    timed = max(1, min(floats, MAX_TIMED_FLOATS))
    scale = floats / timed
    wide = torch.randn(timed, device=device)
    narrow = wide.to(torch.bfloat16)
    back = torch.empty(timed, device=device)
    encode = median_seconds(lambda: wide.to(torch.bfloat16), device)
    finish = median_seconds(lambda: back.copy_(narrow), device)
    return scale * encode, scale * finish


def time_powersgd(m: int, n: int, rank: int, workers: int, device: torch.device
                  ) -> tuple[float, float, float]:  # fmt: skip
    """Seconds of a PowerSGD step's three phases (encode_p, encode_q, decode) on an m×n
    weight, past its first step (so with error feedback, as in training)."""
    timed, scale = _timed_rows(m, n)
    layer = PowerSGDLayer(timed, n, rank, seed_draw=0, device=device)
    grad = torch.randn(timed * n, device=device)
    wire = torch.zeros(layer.wire_floats, device=device)
    out = torch.empty(timed * n, device=device)
    phases = (lambda: layer.encode_p(grad, wire), lambda: layer.encode_q(wire),
              lambda: layer.decode(wire, out, workers))  # fmt: skip
    for phase in phases:  # one untimed step: the first has no error to add
        phase()
    times: list[list[float]] = [[], [], []]
    for _ in range(REPEATS):
        for i, phase in enumerate(phases):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            started = time.perf_counter()
            phase()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[i].append(time.perf_counter() - started)
    encode, between, finish = (scale * statistics.median(t) for t in times)
    return encode, between, finish


def measure_scheme_costs(
    specs: Sequence[Any],
    workers: int,
    compression: Any,
    rank: int,
    device: torch.device,
    backward_s: dict[int, float] | None = None,
) -> None:
    """Fill each LayerSpec's `measured` (a `_C.MeasuredCosts`) with this device's times of
    the phases that could change its scheme: SFB's rebuild for an FC layer with other
    workers, BF16's conversions and PowerSGD's phases where `compression` (a
    `_C.Compression`) allows them; `backward_s` (layer id -> seconds) as measured by the
    front end. Forced layers are left alone."""
    from poseidon import _C

    for spec in specs:
        measured = _C.MeasuredCosts()
        measured.backward_s = (backward_s or {}).get(spec.layer_id, 0.0)
        if spec.force == _C.SchemeChoice.AUTO:
            _time_candidates(spec, measured, workers, compression, rank, device)
        spec.measured = measured


def _time_candidates(spec: Any, measured: Any, workers: int, compression: Any, rank: int,
                     device: torch.device) -> None:  # fmt: skip
    from poseidon import _C

    def candidate(scheme: Any) -> bool:
        return _C.scheme_candidate(scheme, spec.kind, spec.m, spec.n, spec.num_floats,
                                   compression, rank)  # fmt: skip

    if workers > 1 and candidate(_C.Scheme.SFB):
        measured.sfb_rebuild_s = time_weight_product(spec.m, spec.n, spec.k * workers, device)
        measured.dw_s = time_weight_product(spec.m, spec.n, spec.k, device)
    if candidate(_C.Scheme.BF16):
        measured.bf16_encode_s, measured.bf16_finish_s = time_bf16(spec.num_floats, device)
    if candidate(_C.Scheme.POWERSGD):
        phases = time_powersgd(spec.m, spec.n, rank, workers, device)
        measured.powersgd_encode_s, measured.powersgd_between_s, measured.powersgd_finish_s = phases
