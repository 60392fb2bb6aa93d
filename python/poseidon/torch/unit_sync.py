"""One sync unit's round: its gradient (or its sufficient factors) out to the comm core the
moment its backward is done, and the mean of every worker's back into the parameters' .grad.

PS: the unit's .grad tensors are copied into one flat float32 range (registered with the comm
core once; pinned host memory with a device twin on CUDA, see caffe/sync_staging.py), pushed
to the shards and pulled back summed. Parameters with no gradient this step (unused) count
as zeros, so the job never waits for them; one left unused on every worker keeps grad None.

SFB (an nn.Linear): the layer's input x (K × in) and output gradient dy (K × out) are kept
(factor_capture.py) — every call of the layer in the step, and every micro-batch of a
gradient accumulation (`no_sync`), stacked; the layer computes no weight gradient of its own.
The unit sends [dy | x] (caffe/sufficient_factors.py's layout) and rebuilds the exact mean
gradient (1/P1) Σ_r dy_rᵀ x_r with one GEMM on the layer's device, and the bias's from Σ dy,
adding them to what .grad held before the backward (as DDP's mean of accumulated grads).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from caffe.sufficient_factors import rebuild_gradients
from caffe.sync_staging import GradientStaging, to_host_async
from poseidon.timeline import Timeline
from poseidon.torch.units import SyncUnit


@dataclass
class FactorLog:
    """An SFB unit's factors: inputs seen in forward, waiting for their dy, and the pairs.
    Not thread-safe: forward and backward of one model do not run at once."""

    out_features: int
    in_features: int
    waiting: dict[int, torch.Tensor] = field(default_factory=dict)  # call key -> x
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    next_key: int = 0

    def remember(self, x: torch.Tensor) -> int:
        """Keep a forward call's input (K × in) until its dy comes; returns the call's key."""
        key, self.next_key = self.next_key, self.next_key + 1
        self.waiting[key] = x.reshape(-1, self.in_features)
        return key

    def received(self, key: int, dy: torch.Tensor) -> bool:
        """The call's dy has come; whether no call of the step waits for its dy any more."""
        x = self.waiting.pop(key, None)
        if x is not None:
            self.pairs.append((dy.detach().reshape(-1, self.out_features), x))
        return not self.waiting

    @property
    def rows(self) -> int:
        return sum(dy.shape[0] for dy, _ in self.pairs)

    def pack(self) -> torch.Tensor:
        """[dy | x] of every pair, float32, on their device; empties the log."""
        if not self.pairs:
            return torch.zeros(0, dtype=torch.float32)
        dy = torch.cat([d for d, _ in self.pairs]).to(torch.float32).reshape(-1)
        x = torch.cat([v for _, v in self.pairs]).to(torch.float32).reshape(-1)
        self.pairs.clear()
        return torch.cat([dy, x])


class UnitSync:
    """The round of one unit for the current step. Not thread-safe: the autograd engine
    calls it from the thread that runs backward."""

    def __init__(self, unit: SyncUnit, scheme: str, worker, device: torch.device,  # type: ignore[no-untyped-def]
                 side_stream: torch.cuda.Stream | None, comm_thread: ThreadPoolExecutor | None,
                 capacity_rows: int = 0) -> None:  # fmt: skip
        self.unit = unit
        self.scheme = scheme
        self.worker = worker
        self.device = device
        self.side_stream = side_stream
        self.comm_thread = comm_thread
        self.handle: object | None = None
        self.submitted_us = 0.0
        self.traffic_seen = (0, 0)  # the comm core's byte counters at the last round's end
        self.iteration = -1
        self.submitted = False
        self.ready = 0  # parameters whose .grad is final for this backward
        self.factors: FactorLog | None = None
        self.capacity_rows = capacity_rows
        if scheme == "PS":
            self.flat = torch.zeros(unit.num_floats, dtype=torch.float32, device=device)
            self.staging = GradientStaging(self.flat, side_stream)
            worker.register_layer(unit.index, self.staging.host_array())
        else:
            linear = unit.module
            assert isinstance(linear, nn.Linear)
            self.factors = FactorLog(linear.out_features, linear.in_features)
            width = linear.out_features + linear.in_features
            worker.register_sfb_layer(unit.index, max(1, capacity_rows * width))

    # ----- sending --------------------------------------------------------------------------
    def submit(self, iteration: int, now_us: float = 0.0) -> None:
        """Hand this step's gradient (or factors) to the comm core (asynchronous); `now_us`
        is the time on the job's timeline, if it keeps one."""
        self.iteration, self.submitted, self.submitted_us = iteration, True, now_us
        if self.scheme == "PS":
            offset = 0
            for p, name in zip(self.unit.params, self.unit.param_names):
                n = p.numel()
                target = self.flat[offset : offset + n]
                if p.grad is None:
                    target.zero_()
                elif p.grad.is_sparse:
                    raise RuntimeError(f"{name}: a sparse gradient (nn.Embedding(sparse=True) "
                                       "or similar), which poseidon.torch does not move; use "
                                       "dense gradients (sparse=False)")  # fmt: skip
                else:
                    target.copy_(p.grad.reshape(-1))
                offset += n
            self.staging.to_host()
            copied = self.staging.wait_host

            def send():  # type: ignore[no-untyped-def]
                return self.worker.push_pull(self.unit.index, iteration)
        else:
            assert self.factors is not None
            rows = self.factors.rows
            if rows > self.capacity_rows:
                raise RuntimeError(
                    f"nn.Linear {self.unit.name}: {rows} rows of sufficient factors this step, "
                    f"more than the {self.capacity_rows} it was planned with (its K at the "
                    "first step); pass accumulation_steps= (gradient accumulation) or "
                    "sfb_rows= to DistributedDataParallel, or drop uneven batches"
                )
            factors, event = to_host_async(self.factors.pack(), self.side_stream)
            copied = event.synchronize if event is not None else None

            def send():  # type: ignore[no-untyped-def]
                return self.worker.allgather(self.unit.index, iteration, factors)

        if self.comm_thread is None:
            self.handle = send()
        else:  # CUDA: a comm thread waits for the copy to host, not the training thread
            self.handle = self.comm_thread.submit(lambda: (copied and copied(), send())[1])

    # ----- receiving --------------------------------------------------------------------
    def finish(self, num_workers: int, timeline: Timeline | None = None) -> None:
        """Wait for the round and leave the mean of every worker's gradient in .grad; the
        round goes on `timeline` if there is one."""
        waited_us = timeline.now_us() if timeline is not None else 0.0
        handle = self.handle.result() if isinstance(self.handle, Future) else self.handle
        handle.wait()  # type: ignore[union-attr]
        if timeline is not None:
            sent, received = self.worker.traffic().get(self.unit.index, (0, 0))
            traffic = (sent - self.traffic_seen[0], received - self.traffic_seen[1])
            self.traffic_seen = (sent, received)
            timeline.record_round(self.unit.name, handle.timing(), self.submitted_us,  # type: ignore[union-attr]
                                  waited_us, timeline.now_us(), self.iteration, self.scheme,
                                  traffic)  # fmt: skip
        self.handle, self.submitted, self.ready = None, False, 0
        scale = 1.0 / num_workers
        if self.scheme == "PS":
            self.staging.to_device()
            offset = 0
            for p in self.unit.params:
                n = p.numel()
                mean = self.flat[offset : offset + n].view(p.shape).mul_(scale)
                offset += n
                _set_grad(p, mean)
            return
        linear = self.unit.module
        factors = [np.asarray(self.worker.factor(self.unit.index, self.iteration, r))
                   for r in range(num_workers)]  # fmt: skip
        if not any(f.size for f in factors):
            return  # no worker used the layer: .grad stays as it was (None if it was)
        params = [p for p in (linear.weight, linear.bias) if p is not None]
        grads = [_grad_for_adding(p) for p in params]
        rebuild_gradients(factors, linear.out_features, linear.in_features, grads[0],
                          grads[1] if len(grads) > 1 else None, False, scale)  # fmt: skip
        for p, g in zip(params, grads):
            if p.grad is None or p.grad is not g:
                p.grad = g.to(p.dtype)


def _grad_for_adding(param: nn.Parameter) -> torch.Tensor:
    """A float32 tensor holding param.grad (zeros if None) to add the rebuilt mean into: the
    grad itself when it is float32 already."""
    if param.grad is None:
        return torch.zeros(param.shape, dtype=torch.float32, device=param.device)
    if param.grad.dtype == torch.float32:
        return param.grad
    return param.grad.to(torch.float32)


def _set_grad(param: nn.Parameter, mean: torch.Tensor) -> None:
    """.grad := the mean; a parameter no worker used (no local grad, a zero mean) keeps None,
    as it would in one process."""
    if param.grad is None:
        if not bool(mean.any()):
            return
        param.grad = mean.to(param.dtype).clone()
        return
    param.grad.copy_(mean)
