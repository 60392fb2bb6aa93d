"""A worker of the lossy-scheme tests (test_compressed.py), run as P processes with torchrun's
variables:

    compressed_worker.py OUT_DIR COMPRESSION STEPS [START [fresh]]

It trains a small conv + MLP net under poseidon.torch.DistributedDataParallel(compression=
COMPRESSION) for STEPS steps of momentum SGD, rank r taking its share of each global batch,
and saves per step both its own gradients (the same forward and backward, outside the
wrapper) and the synchronised ones, plus the plan's scheme and rank per module, to
OUT_DIR/RANK.npz; then its checkpoint — parameters, optimizer and PowerSGD state
(compression_state) — to OUT_DIR/ckpt.RANK.pt. With START > 0 it resumes from that
checkpoint at step START (its PowerSGD state too, unless "fresh")."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

import poseidon.torch
from poseidon import _C

GLOBAL_BATCH, CLASSES = 12, 5


def build() -> nn.Module:
    return nn.Sequential(nn.Conv2d(2, 6, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(6 * 4 * 4, 24), nn.Tanh(), nn.Linear(24, CLASSES))  # fmt: skip


def main(out_dir: Path, compression: str, steps: int, start: int, fresh: bool) -> None:
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    checkpoint = out_dir / f"ckpt.{rank}.pt"
    if start:
        saved_state = torch.load(checkpoint)
        model.load_state_dict(saved_state["model"])
        optimizer.load_state_dict(saved_state["optimizer"])
    ddp = poseidon.torch.DistributedDataParallel(model, compression=compression)
    if start and not fresh:
        ddp.load_compression_state(saved_state["compression"])  # applied when planned
    generator = torch.Generator().manual_seed(7)
    names = [name for name, _ in model.named_parameters()]
    saved: dict[str, np.ndarray] = {}
    per_rank = GLOBAL_BATCH // size
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    for step in range(steps):
        x = torch.randn(GLOBAL_BATCH, 2, 4, 4, generator=generator)[rows]
        y = torch.randint(0, CLASSES, (GLOBAL_BATCH,), generator=generator)[rows]
        if step < start:
            continue  # the checkpoint's steps: their batches drawn, not trained on
        # This worker's own gradient, from a plain copy (the wrapped model's SFB layers
        # compute no weight gradient of their own).
        plain = build()
        plain.load_state_dict(model.state_dict())
        nn.functional.cross_entropy(plain(x), y).backward()
        local = [p.grad for p in plain.parameters()]
        optimizer.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        for name, g, p in zip(names, local, model.parameters()):
            saved[f"{step}.local.{name}"] = g.numpy()
            saved[f"{step}.synced.{name}"] = p.grad.numpy().copy()
        optimizer.step()
    assert ddp.plan is not None
    plan = {lp.name: [_C.scheme_name(lp.scheme), lp.rank] for lp in ddp.plan.layers}
    saved["plan"] = np.array(json.dumps(plan))
    np.savez(out_dir / f"{rank}.npz", **saved)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "compression": ddp.compression_state()}, checkpoint)  # fmt: skip
    ddp.close()


if __name__ == "__main__":
    start = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), start, sys.argv[5:] == ["fresh"])
