"""The models and training steps of the poseidon.torch equivalence tests: each feature of
the wrapper (SFB and PS layers, gradient accumulation, unused, frozen and tied parameters,
bfloat16 and float16 autocast, GradScaler, BatchNorm buffers, evaluation forwards, several
optimizers) on a net small enough to train in seconds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

GLOBAL_BATCH = 24  # divisible by 1, 2, 3, 4, and each worker's share by 2 (accumulate)
IN, HIDDEN, CLASSES = 20, 48, 5


@dataclass
class Case:
    build: Callable[[], nn.Module]
    ddp_kwargs: dict[str, Any] = field(default_factory=dict)
    accumulate: int = 1
    autocast: bool = False
    sequence: int = 0  # > 0: inputs are (batch, sequence, IN): K = batch × sequence
    # Batch statistics (BatchNorm) are each worker's own, as in torch's DDP: the one-process
    # reference then emulates the workers (train_step_as_workers), not the global batch.
    batch_stats: bool = False
    scaler: bool = False  # float16 autocast with a GradScaler
    evaluate: bool = False  # an eval() forward, with and without autograd, after each step
    split_optimizer: bool = False  # one optimizer per half of the parameters
    # Each step's global batch in turn (divisible by 1 to 4 workers); default GLOBAL_BATCH.
    batch_sizes: tuple[int, ...] = ()

    def batch_size(self, step: int) -> int:
        return self.batch_sizes[step % len(self.batch_sizes)] if self.batch_sizes else GLOBAL_BATCH

    def optimizers(self, model: nn.Module) -> list[torch.optim.Optimizer]:
        params = list(model.parameters())
        groups = [params[: len(params) // 2], params[len(params) // 2 :]]
        if not self.split_optimizer:
            return [torch.optim.SGD(params, lr=0.05, momentum=0.9)]
        return [torch.optim.SGD(groups[0], lr=0.05, momentum=0.9),
                torch.optim.Adam(groups[1], lr=0.01)]  # fmt: skip

    def train_step(self, net, optimizers, x, y, scaler=None) -> None:  # type: ignore[no-untyped-def]
        for optimizer in optimizers:
            optimizer.zero_grad()
        chunks = zip(x.chunk(self.accumulate), y.chunk(self.accumulate))
        for i, (xc, yc) in enumerate(chunks):
            last = i == self.accumulate - 1
            context = net.no_sync() if hasattr(net, "no_sync") and not last else _nothing()
            with context:
                loss = self.loss(net, xc, yc) / self.accumulate
                (scaler.scale(loss) if scaler else loss).backward()
        for optimizer in optimizers:
            if scaler:
                scaler.step(optimizer)
            else:
                optimizer.step()
        if scaler:
            scaler.update()
        if self.evaluate:
            net.eval()
            self.loss(net, x, y)  # a forward that no backward follows
            with torch.no_grad():
                net(x)
            net.train()

    def loss(self, net, x, y) -> torch.Tensor:  # type: ignore[no-untyped-def]
        dtype = torch.float16 if self.scaler else torch.bfloat16
        with torch.autocast("cpu", dtype=dtype, enabled=self.autocast or self.scaler):
            out = net(x)
            if self.sequence:
                out = out.mean(dim=1)
            return nn.functional.cross_entropy(out.float(), y)

    def train_step_as_workers(self, model, optimizers, x, y, workers) -> None:  # type: ignore[no-untyped-def]
        """One step of `workers` DDP workers with batch statistics of their own, in one
        process: each worker's forward starts from rank 0's buffers (broadcast_buffers), the
        gradient is the mean of theirs, and rank 0's updated buffers go on."""
        for optimizer in optimizers:
            optimizer.zero_grad()
        start = [b.detach().clone() for b in model.buffers()]
        after_rank0 = start
        for xr, yr in zip(x.chunk(workers), y.chunk(workers)):
            with torch.no_grad():
                for b, s in zip(model.buffers(), start):
                    b.copy_(s)
            (self.loss(model, xr, yr) / workers).backward()
            if after_rank0 is start:
                after_rank0 = [b.detach().clone() for b in model.buffers()]
        with torch.no_grad():
            for b, s in zip(model.buffers(), after_rank0):
                b.copy_(s)
        for optimizer in optimizers:
            optimizer.step()


class _nothing:
    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc):  # type: ignore[no-untyped-def]
        return False


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                         nn.Linear(HIDDEN, CLASSES))  # fmt: skip


class Unused(nn.Module):
    """A branch that only even steps use, and one no step uses."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(IN, HIDDEN), nn.Linear(HIDDEN, CLASSES)
        self.sometimes = nn.Linear(HIDDEN, HIDDEN)
        self.never = nn.Linear(HIDDEN, HIDDEN)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if self.calls % 2 == 0:
            h = h + self.sometimes(h)
        self.calls += 1
        return self.b(h)


def frozen() -> nn.Module:
    model = mlp()
    for p in model[0].parameters():
        p.requires_grad_(False)
    return model


class Tied(nn.Module):
    """An embedding-like input projection whose weight the output layer reuses."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(IN, HIDDEN, bias=False)
        self.mid = nn.Linear(HIDDEN, IN)
        self.out = nn.Linear(IN, HIDDEN, bias=False)
        self.out.weight = self.inp.weight  # tied
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.out(self.mid(torch.relu(self.inp(x))))))


def conv_bn() -> nn.Module:
    return nn.Sequential(
        nn.Unflatten(1, (1, 4, 5)), nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
        nn.Flatten(), nn.Linear(120, CLASSES),
    )  # fmt: skip


class Attention(nn.Module):
    """Self-attention over a sequence: its out_proj is a Linear that MultiheadAttention never
    calls as a module (the plan must send it through the PS)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(IN, HIDDEN)
        self.attention = nn.MultiheadAttention(HIDDEN, 4, batch_first=True)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        return self.head(self.attention(h, h, h, need_weights=False)[0] + h)


def sequence_model() -> nn.Module:
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.GELU(), nn.LayerNorm(HIDDEN),
                         nn.Linear(HIDDEN, CLASSES))  # fmt: skip


CASES = {
    "sfb": Case(mlp, {"scheme": "sfb"}),
    "ps": Case(mlp, {"scheme": "ps"}),
    "auto": Case(mlp),
    "accumulate": Case(mlp, {"scheme": "sfb", "accumulation_steps": 2}, accumulate=2),
    # A DDP script as written: no_sync() accumulation and no hint (twice the rows planned).
    "accumulate-unhinted": Case(mlp, {"scheme": "sfb"}, accumulate=2),
    # A batch that grows after the first step (twice the rows planned) and a short last one.
    "changing-batch": Case(mlp, {"scheme": "sfb"}, batch_sizes=(12, 24, 24, 12)),
    "accumulate-ps": Case(mlp, {"scheme": "ps"}, accumulate=2),
    "unused": Case(Unused, {"scheme": "sfb"}),
    "frozen": Case(frozen, {"scheme": "sfb"}),
    "tied": Case(Tied, {"scheme": "sfb"}),
    "batchnorm": Case(conv_bn, batch_stats=True),
    "bf16": Case(mlp, {"scheme": "sfb"}, autocast=True),
    "grad-scaler": Case(mlp, {"scheme": "ps"}, scaler=True),
    "sequence": Case(sequence_model, {"scheme": "sfb"}, sequence=3),
    "attention": Case(Attention, sequence=3),
    "wfbp": Case(mlp, {"sync": "wfbp"}),
    "nooverlap": Case(mlp, {"sync": "ps-nooverlap"}),
    "wait-step": Case(mlp, {"scheme": "sfb", "wait": "step"}),
    "evaluate": Case(conv_bn, {"scheme": "sfb"}, batch_stats=True, evaluate=True),
    "two-optimizers": Case(mlp, split_optimizer=True),
}


def batches(steps: int, case: Case) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(42)
    for step in range(steps):
        size = case.batch_size(step)
        shape = (size, case.sequence, IN) if case.sequence else (size, IN)
        x = torch.randn(shape, generator=generator)
        y = torch.randint(0, CLASSES, (size,), generator=generator)
        yield x, y
