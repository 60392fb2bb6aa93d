"""A training script for the poseidon.torch tests, run as P processes (torchrun's variables,
or POSEIDON_* from poseidon launch) or as one process on the global batch:

    ddp_worker.py OUT_DIR STEPS CASE [CASE ...]

For each CASE (models.py), one after another in this process, it trains the case's model for
STEPS steps (SGD + momentum, or the case's optimizers) on a fixed synthetic data set: rank r
of P takes rows r·B/P … (r+1)·B/P − 1 of each global batch of B. Without WORLD_SIZE or
POSEIDON_ROLE in the environment it is the reference: one process, the whole batch, plain
torch (for a case with batch statistics of each worker's own, REFERENCE_WORKERS workers
emulated). Each case's parameters and buffers go to OUT_DIR/CASE.RANK.npz; each case is a
job of its own (a new DistributedDataParallel after the previous one closed)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

from poseidon.config import LAUNCHER_RANK, LAUNCHER_SIZE
from tests.poseidon.torch.models import CASES, batches


def train_case(case: str, steps: int, out_dir: Path, rank: int, size: int,
               distributed: bool) -> None:  # fmt: skip
    spec = CASES[case]
    device = torch.device(os.environ.get("DEVICE", "cpu"))  # the CUDA tests: DEVICE=cuda
    torch.manual_seed(0)
    model = spec.build().to(device)
    if distributed:
        import poseidon.torch

        if "TIMELINE_DIR" in os.environ:  # a trace per case: trace.<case>.<rank>.json
            os.environ["POSEIDON_TIMELINE"] = f"{os.environ['TIMELINE_DIR']}/trace.{case}.json"
        if rank:
            torch.manual_seed(100 + rank)  # another init than rank 0's: the broadcast fixes it
            model = spec.build().to(device)
        net = poseidon.torch.DistributedDataParallel(model, **spec.ddp_kwargs)
    else:
        net = model
    optimizers = spec.optimizers(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10) if spec.scaler else None
    emulated = int(os.environ.get("REFERENCE_WORKERS", "1"))
    for step, (x, y) in enumerate(batches(steps, spec)):
        x, y = x.to(device), y.to(device)
        if distributed:
            print(f"{case} step {step}", flush=True)  # the fault tests wait for these
        per_rank = x.shape[0] // size
        rows = slice(rank * per_rank, (rank + 1) * per_rank)
        if not distributed and spec.batch_stats and emulated > 1:
            spec.train_step_as_workers(model, optimizers, x, y, emulated)
        else:
            spec.train_step(net, optimizers, x[rows], y[rows], scaler)
    arrays = {name: t.detach().cpu().numpy() for name, t in model.state_dict().items()}
    np.savez(out_dir / f"{case}.{rank}.npz", **arrays)
    if distributed:
        net.close()


def main() -> int:
    out_dir, steps, cases = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    # Rank and size as poseidon.torch reads them: POSEIDON_*, or a launcher's / manager's.
    ranks = ("POSEIDON_RANK", *LAUNCHER_RANK)
    sizes = ("POSEIDON_NUM_WORKERS", *LAUNCHER_SIZE)
    distributed = "POSEIDON_ROLE" in os.environ or any(n in os.environ for n in sizes)
    rank = int(next((os.environ[n] for n in ranks if n in os.environ), "0"))
    size = int(next((os.environ[n] for n in sizes if n in os.environ), "1"))
    if os.environ.get("INIT_PROCESS_GROUP"):  # the token then comes through torch.distributed
        import torch.distributed as dist

        dist.init_process_group("gloo")
    for case in cases:
        train_case(case, steps, out_dir, rank, size, distributed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
