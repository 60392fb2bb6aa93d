"""The device rates the time-based cost model needs (docs/communication.md §5): how fast this
device runs PowerSGD's products and how fast it streams memory, as the settings
POSEIDON_GEMM_RATE and POSEIDON_MEMORY_RATE take them (`poseidon profile --rates`).

GEMM: the three products of a PowerSGD step at rank r — M·Q, Pᵀ·M and P·Qᵀ for an s × s
matrix M and s × r factors, 2·s²·r FLOPs each — timed at a few sizes s; the rate is the
median over the sizes of their FLOPs over their time. Memory: a copy of a 64 MiB tensor,
counted as read + write. Each timing is the median of `repeats` after one untimed run; on
CUDA the device is synchronised around each.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from poseidon.sync.measure import median_seconds

COPY_BYTES = 64 << 20


@dataclass(frozen=True)
class DeviceRates:
    device: str
    gemm_flops_per_s: float
    memory_bytes_per_s: float

    def settings(self) -> list[str]:
        """The lines to put in a job's environment."""
        return [f"POSEIDON_GEMM_RATE={self.gemm_flops_per_s:.4g}",
                f"POSEIDON_MEMORY_RATE={self.memory_bytes_per_s:.4g}"]  # fmt: skip


def measure_rates(device: str = "cpu", rank: int = 4, sizes: Sequence[int] = (1024, 2048, 4096),
                  repeats: int = 5) -> DeviceRates:  # fmt: skip
    """This device's PowerSGD GEMM rate at `rank` and its memory bandwidth (the module's
    docstring says how). Raises ValueError for a rank or size < 1, or no such device."""
    if rank < 1 or not sizes or min(sizes) < 1 or repeats < 1:
        raise ValueError(f"rank {rank}, sizes {list(sizes)}, repeats {repeats}: want >= 1")
    where = torch.device(device)
    if where.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device here")
    gemm = []
    for s in sizes:
        m = torch.randn(s, s, device=where)
        q = torch.randn(s, rank, device=where)
        p = torch.randn(s, rank, device=where)

        def step(m: torch.Tensor = m, p: torch.Tensor = p, q: torch.Tensor = q) -> None:
            torch.mm(m, q)
            torch.mm(p.t(), m)
            torch.mm(p, q.t())

        gemm.append(3 * 2.0 * s * s * rank / median_seconds(step, where, repeats))
    source = torch.empty(COPY_BYTES // 4, device=where)
    target = torch.empty_like(source)
    copy_s = median_seconds(lambda: target.copy_(source), where, repeats)
    return DeviceRates(str(where), statistics.median(gemm), 2.0 * COPY_BYTES / copy_s)
