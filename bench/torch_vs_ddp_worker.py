"""One rank of bench/torch_vs_ddp.py: a model trained by Poseidon's DistributedDataParallel
or by PyTorch's (gloo), with or without the PowerSGD hook, on the same batches.

    torch_vs_ddp_worker.py SYSTEM MODEL BATCH WARMUP ITERS [LOSS_FILE [TARGET_ACCURACY]]
        SYSTEM: poseidon | poseidon-step (wait="step") | poseidon-bf16 | poseidon-powersgd-R
                | poseidon-auto (compression="auto:4") | poseidon-auto-timed (and the link's rate)
                | ddp
                | ddp-fp16 (fp16_compress_hook; the bf16 one needs NCCL) | powersgd-1
                | powersgd-4 | single (one process, plain torch)
        MODEL:  fc | transformer | vgg           (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set)

It prints `RESULT rank=R samples_per_s=S` (images, or tokens for the transformer) over ITERS
steps after WARMUP; with LOSS_FILE it trains on real digits instead (model fc, global batch
BATCH × P split over the ranks, the same batches for every system) and writes each step's
loss on its rows, so that the driver can compare loss curves. With TARGET_ACCURACY too it
trains (at most ITERS steps) until the model's accuracy on the digits' held-out split,
checked every EVAL_EVERY steps, reaches the target, and writes a JSON line to LOSS_FILE:
{"steps", "seconds", "accuracy", "reached"} (seconds of training, evaluations excluded).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "pytorch"))  # fmt: skip
import mlp_digits
import transformer_lm

POWERSGD_START_ITER = 2  # PowerSGD's vanilla all-reduce steps before it compresses
EVAL_EVERY = 10  # steps between held-out evaluations when training to a target accuracy
# Poseidon's systems and the compression each runs with.
POSEIDON_COMPRESSION = {"poseidon": "none", "poseidon-step": "none", "poseidon-bf16": "bf16",
                        "poseidon-powersgd-1": "powersgd:1", "poseidon-powersgd-4": "powersgd:4",
                        "poseidon-auto": "auto:4", "poseidon-auto-timed": "auto:4"}  # fmt: skip


def vgg_style(batch: int) -> tuple[nn.Module, torch.Tensor]:
    """A VGG-style net for 32×32 colour images, no torchvision: three conv blocks and two
    2048-wide fully-connected layers (97% of its 13 M weights)."""

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2)]

    model = nn.Sequential(
        *block(3, 64), *block(64, 128), *block(128, 256), nn.Flatten(),
        nn.Linear(256 * 4 * 4, 2048), nn.ReLU(inplace=True),
        nn.Linear(2048, 2048), nn.ReLU(inplace=True),
        nn.Linear(2048, 10),
    )  # fmt: skip
    return model, torch.zeros(batch, 3, 32, 32)


def build(name: str, batch: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor, int]:
    """Model, a synthetic input batch and its targets, and the samples a batch counts."""
    generator = torch.Generator().manual_seed(5)
    if name == "transformer":
        model, x = transformer_lm.build_model(batch)
        tokens = torch.randint(0, transformer_lm.VOCAB, (batch, transformer_lm.CONTEXT + 1),
                               generator=generator)  # fmt: skip
        return model, tokens[:, :-1], tokens[:, 1:], batch * transformer_lm.CONTEXT
    model, x = mlp_digits.build_model(batch) if name == "fc" else vgg_style(batch)
    return model, torch.rand(x.shape, generator=generator), torch.randint(0, 10, (batch,)), batch


def wrap(system: str, model: nn.Module) -> nn.Module:
    if system == "single":
        return model
    if system.startswith("poseidon"):
        import poseidon.torch

        wait = "step" if system == "poseidon-step" else "backward"
        if system == "poseidon-auto-timed" and "BENCH_LINK_BPS" in os.environ:
            # The cost model ranks by time on the emulated link; the workers measure their
            # compute themselves (poseidon/sync/measure.py). On loopback: by bytes.
            os.environ["POSEIDON_LINK_RATE"] = os.environ["BENCH_LINK_BPS"] + "bps"
        return poseidon.torch.DistributedDataParallel(
            model, wait=wait, compression=POSEIDON_COMPRESSION[system]
        )
    dist.init_process_group("gloo")
    if system == "ddp-fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp = nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return ddp
    if not system.startswith("powersgd-"):
        return nn.parallel.DistributedDataParallel(model)
    # One bucket: with several, PowerSGD's chained all-reduces start from gloo's completion
    # callbacks in a different order on each rank, and gloo, which matches collectives by
    # order, fails ("Received data size doesn't match expected size", seen here with 2).
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1024)
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    state = powerSGD_hook.PowerSGDState(
        process_group=None, matrix_approximation_rank=int(system.split("-")[1]),
        start_powerSGD_iter=POWERSGD_START_ITER,
    )  # fmt: skip
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return ddp


def main() -> int:
    system, name = sys.argv[1], sys.argv[2]
    batch, warmup, iters = (int(a) for a in sys.argv[3:6])
    loss_file = sys.argv[6] if len(sys.argv) > 6 else None
    target = float(sys.argv[7]) if len(sys.argv) > 7 else None
    torch.set_num_threads(1)  # one core's worth per emulated host (they share this machine's)
    rank, size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    torch.manual_seed(0)
    model, x, y, samples = build(name, batch)
    net = wrap(system, model)
    make_optimizer = torch.optim.AdamW if name == "transformer" else torch.optim.SGD
    options = {"lr": 1e-3} if name == "transformer" else {"lr": 0.05, "momentum": 0.9}
    optimizer = make_optimizer(model.parameters(), **options)

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> float:
        optimizer.zero_grad()
        out = net(inputs)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    if loss_file and target is not None:
        train_x, train_y, test_x, test_y = mlp_digits.digits()
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(1))
        global_batch, spent, accuracy, steps = batch * size, 0.0, 0.0, 0
        while steps < iters and accuracy < target:
            started = time.perf_counter()
            for _ in range(EVAL_EVERY):
                i = steps
                rows = order[(i * global_batch) % (len(order) - global_batch + 1) :][:global_batch]
                mine = rows[rank * batch : (rank + 1) * batch] if system != "single" else rows
                step(train_x[mine], train_y[mine])
                steps += 1
            spent += time.perf_counter() - started
            # Every rank holds the same weights: each evaluates, and all stop together.
            with torch.no_grad():
                model.eval()
                accuracy = float((model(test_x).argmax(1) == test_y).float().mean())
                model.train()
        import json

        with open(loss_file, "w") as f:
            json.dump({"steps": steps, "seconds": spent, "accuracy": accuracy,
                       "reached": accuracy >= target}, f)  # fmt: skip
    elif loss_file:
        train_x, train_y, _, _ = mlp_digits.digits()
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(1))
        global_batch, losses = batch * size, []
        for i in range(iters):
            rows = order[(i * global_batch) % (len(order) - global_batch + 1) :][:global_batch]
            mine = rows[rank * batch : (rank + 1) * batch] if system != "single" else rows
            losses.append(step(train_x[mine], train_y[mine]))
        np.save(loss_file, np.array(losses))
    else:
        for _ in range(warmup):
            step(x, y)
        started = time.perf_counter()
        for _ in range(iters):
            step(x, y)
        elapsed = time.perf_counter() - started
        print(f"RESULT rank={rank} samples_per_s={samples * iters / elapsed:.3f}", flush=True)
    if system.startswith("poseidon"):
        net.close()
    elif system != "single":
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
