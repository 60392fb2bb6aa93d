"""Process-wide engine state: compute mode and device, random seed, solver rank/count.

Caffe keeps these in a per-thread singleton (`Caffe::Get()`); one process here runs
one solver, so module-level state is enough. Everything that allocates tensors asks
`compute_device()`, so `set_mode_gpu()` before building a net puts the net on CUDA.
"""

from __future__ import annotations

import logging
import os
import random
import threading

import numpy as np
import torch

_log = logging.getLogger("caffe")


class _EngineState:
    def __init__(self) -> None:
        self.mode = "CPU"
        self.mode_chosen = False  # set_mode_cpu/gpu called: a solver's solver_mode yields to it
        self.device_id = 0
        self.random_seed: int | None = None
        self.solver_count = 1
        self.solver_rank = 0
        self.multiprocess = False
        self.warned_no_gpu = False
        self.lock = threading.Lock()


_state = _EngineState()


def set_mode_cpu() -> None:
    _state.mode = "CPU"
    _state.mode_chosen = True


def set_mode_gpu() -> None:
    _state.mode = "GPU"
    _state.mode_chosen = True
    _choose_gpu_precision()


def _choose_gpu_precision() -> None:
    """float32 on CUDA means float32, as in Caffe: PyTorch lets cuDNN convolutions use
    TF32 (10-bit mantissa) by default on Ampere and later, which moves results by ~1e-3
    and breaks equality with CPU runs and Caffe. CAFFE_ALLOW_TF32=1 trades that for speed.
    """
    allow = os.environ.get("CAFFE_ALLOW_TF32", "0").strip().lower() in ("1", "true", "yes")
    torch.backends.cudnn.allow_tf32 = allow
    torch.backends.cuda.matmul.allow_tf32 = allow


def mode_chosen() -> bool:
    """Whether set_mode_cpu()/set_mode_gpu() was called (the CLI or the user chose a mode)."""
    return _state.mode_chosen


def mode() -> str:
    """'CPU' or 'GPU' as requested (see compute_device() for what is actually used)."""
    return _state.mode


def set_device(device_id: int) -> None:
    _state.device_id = int(device_id)
    if torch.cuda.is_available():
        torch.cuda.set_device(_state.device_id)


def gpu_available() -> bool:
    return torch.cuda.is_available()


def compute_device() -> torch.device:
    """Device new blobs live on. GPU mode without a CUDA device falls back to CPU, warning once."""
    if _state.mode == "GPU":
        if torch.cuda.is_available():
            return torch.device("cuda", _state.device_id)
        with _state.lock:
            if not _state.warned_no_gpu:
                _state.warned_no_gpu = True
                _log.warning("GPU mode requested but no CUDA device is available; using CPU.")
    return torch.device("cpu")


# Note [shapes only]. What describes a net without running it (`poseidon plan`: the HybComm
# plan needs every blob's shape, never a value) builds it on torch's "meta" device
# (`caffe.Net(..., shapes_only=True)`): tensors there have shapes and no memory, so every
# layer's own setup and reshape run unchanged and give exactly the shapes of a real net (one
# source of truth, no shape rules written twice), while fillers draw nothing
# (caffe/fillers.py) and data layers read at most their first record (caffe/data/prefetch.py).
# VGG19-22K's 229 M weights then cost neither their gigabytes nor the seconds of filling.
SHAPES_ONLY_DEVICE = torch.device("meta")


def shapes_only(device: torch.device) -> bool:
    """Whether `device` is a shapes-only net's (Note [shapes only]): no values to compute."""
    return device.type == SHAPES_ONLY_DEVICE.type


def set_random_seed(seed: int) -> None:
    """Seed every generator the engine draws from (fillers, dropout, data shuffling)."""
    _state.random_seed = int(seed)
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    random.seed(seed)


def solver_count() -> int:
    return _state.solver_count


def set_solver_count(count: int) -> None:
    _state.solver_count = int(count)


def solver_rank() -> int:
    return _state.solver_rank


def set_solver_rank(rank: int) -> None:
    _state.solver_rank = int(rank)


def root_solver() -> bool:
    """Rank 0 alone tests, displays and snapshots (Caffe's multi-GPU contract)."""
    return _state.solver_rank == 0


def set_multiprocess(multiprocess: bool) -> None:
    _state.multiprocess = bool(multiprocess)


def multiprocess() -> bool:
    return _state.multiprocess


def has_nccl() -> bool:
    """Whether caffe.NCCL (pycaffe's multi-process flow) works: it runs over Poseidon's
    communication core, not NVIDIA's NCCL, so this asks whether that core is built."""
    try:
        import poseidon._C  # noqa: F401
    except ImportError:
        return False
    return True
