"""One PyTorch DDP (gloo) rank of bench/scaling.py, training the same architecture in
torch.nn with the same batch and solver (SGD, momentum 0.9, weight decay 5e-4).

    scaling_ddp.py BATCH WARMUP ITERS      (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set)
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scaling_net import CLASSES, INPUT, torch_model


def main() -> int:
    batch, warmup, iters = (int(x) for x in sys.argv[1:4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(7)
    model = DistributedDataParallel(torch_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.full((batch, *INPUT), 0.5)
    y = torch.full((batch,), 3, dtype=torch.long) % CLASSES

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    dist.barrier()
    elapsed = time.perf_counter() - start
    print(f"RESULT rank={dist.get_rank()} iters_per_s={iters / elapsed:.4f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
