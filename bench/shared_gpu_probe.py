"""Which collectives work between two processes that share one CUDA device (the local
stage of docs/communication.md §5 when a machine's workers outnumber its GPUs): NCCL and
gloo, each with reduce, gather and broadcast of CUDA tensors. Prints one line per case.

    python3 bench/shared_gpu_probe.py          (needs a CUDA device; run by gpu_session.sh)
"""

from __future__ import annotations

import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _case(rank: int, backend: str, store_path: str, results: dict) -> None:
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    store = dist.FileStore(store_path, 2)
    timeout = datetime.timedelta(seconds=20)
    try:
        if backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            group = dist.ProcessGroupNCCL(store, rank, 2, options)
        else:
            options = dist.ProcessGroupGloo._Options()
            options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
            options._timeout = timeout
            group = dist.ProcessGroupGloo(store, rank, 2, options)
        x = torch.full((1000,), float(rank + 1), device=device)
        reduce = dist.ReduceOptions()
        reduce.rootRank = 0
        reduce.reduceOp = dist.ReduceOp.SUM
        group.reduce([x], reduce).wait()
        ok = [f"reduce={'ok' if rank or float(x[0]) == 3.0 else x[0].item()}"]
        gather = dist.GatherOptions()
        gather.rootRank = 0
        into = [torch.zeros(1000, device=device) for _ in range(2)] if rank == 0 else []
        try:
            group.gather([into] if rank == 0 else [], [x], gather).wait()
            ok.append("gather=ok")
        except Exception as e:  # the probe reports every failure
            ok.append(f"gather=FAILED({str(e).splitlines()[0][:120]})")
        b = torch.full((1000,), float(rank), device=device)
        cast = dist.BroadcastOptions()
        cast.rootRank = 0
        group.broadcast([b], cast).wait()
        torch.cuda.synchronize()
        ok.append(f"broadcast={'ok' if float(b[0]) == 0.0 else 'WRONG'}")
        results[rank] = " ".join(ok)
    except Exception as e:  # the probe reports every failure
        results[rank] = f"FAILED: {str(e).splitlines()[0][:200]}"


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 1
    for backend in ("nccl", "gloo"):
        with mp.Manager() as manager:
            results = manager.dict()
            path = os.path.join(tempfile.mkdtemp(), "store")
            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=_case, args=(r, backend, path, results)) for r in (0, 1)]
            for p in procs:
                p.start()
            for p in procs:
                p.join(60)
                if p.is_alive():
                    p.kill()
            print(f"{backend}, two ranks on cuda:0: " +
                  " | ".join(f"rank {r}: {results.get(r, 'no answer (hung or died)')}"
                             for r in (0, 1)))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
