"""Run tests/poseidon/torch/ddp_worker.py as a job of P processes (torchrun's variables,
the job hosting itself) or as the one-process reference, and read what each saved."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

WORKER = [sys.executable, "-m", "tests.poseidon.torch.ddp_worker"]
REPO = Path(__file__).resolve().parents[3]
Params = dict[str, np.ndarray]


def free_port_block(count: int = 3) -> int:
    """A port p with p .. p + count - 1 all free now (MASTER_PORT, the coordinator at +1,
    the token store at +2)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return base
    raise RuntimeError("no block of free ports")


def env_for(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSEIDON_")}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT"):  # fmt: skip
        env.pop(name, None)
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(extra or {})})
    return env


def load(out_dir: Path, case: str, rank: int) -> Params:
    with np.load(out_dir / f"{case}.{rank}.npz") as data:
        return dict(data)


def run_reference(out_dir: Path, cases: list[str], steps: int,
                  emulated_workers: int = 1) -> dict[str, Params]:  # fmt: skip
    """One process on the global batch (cases with batch statistics emulate the workers)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = env_for({"REFERENCE_WORKERS": str(emulated_workers)})
    subprocess.run([*WORKER, str(out_dir), str(steps), *cases], cwd=REPO, env=env,
                   check=True, timeout=120)  # fmt: skip
    return {case: load(out_dir, case, 0) for case in cases}


def torchrun_env(rank: int, workers: int, port: int, **extra: str) -> dict[str, str]:
    return env_for({"RANK": str(rank), "WORLD_SIZE": str(workers), "LOCAL_RANK": str(rank),
                    "LOCAL_WORLD_SIZE": str(workers), "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port), "POSEIDON_TIMEOUT_MS": "30000", **extra})  # fmt: skip


def run_torchrun_job(
    out_dir: Path,
    cases: list[str],
    workers: int,
    steps: int,
    timeout_s: float = 240,
    **extra_env: str,
) -> tuple[dict[str, list[Params]], list[str]]:
    """Every case as a job of `workers` processes started as torchrun would: each rank's
    saved parameters per case, and each rank's output."""
    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port_block()
    procs = [subprocess.Popen([*WORKER, str(out_dir), str(steps), *cases], cwd=REPO,
                              env=torchrun_env(rank, workers, port, **extra_env),
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for rank in range(workers)]  # fmt: skip
    outputs = []
    for proc in procs:
        try:
            text, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise AssertionError(f"{cases} with {workers} workers: still running after "
                                 f"{timeout_s}s") from None  # fmt: skip
        outputs.append(text)
        if proc.returncode != 0:
            raise AssertionError(f"{cases}, a worker of {workers}, exit {proc.returncode}:\n"
                                 + "\n---\n".join(outputs)[-6000:])  # fmt: skip
    return {case: [load(out_dir, case, r) for r in range(workers)] for case in cases}, outputs
