"""Keep the multi-MB buffers a training step frees for the next step (glibc's malloc).

Why: every step allocates and frees the same activation-sized buffers, in the engine as in
torch.nn. glibc hands a freed multi-MB buffer back to the kernel (munmap, or trimming the
heap's top) by thresholds it adjusts as the process runs, and the next step faults the
memory in again, a page at a time. bench/page_faults.py counted 0 to ~700 faults per LeNet
step from one process to the next, and up to ~12,800 per CIFAR-10 quick step (~20 ms of a
~60 ms step on the 2-core development VM), for the engine and torch.nn alike: that, not the
kernels, was most of the ±10% wall-time spread between processes (docs/benchmarks.md).
Fixed thresholds stop it: buffers up to 32 MiB (glibc's ceiling for M_MMAP_THRESHOLD on
64-bit) come from the heap, and the heap keeps up to 256 MiB of free memory at its top.
Steady-state RSS is then the peak of a step, which it was already while the step ran.

The process's first caffe.Net applies it (not `import caffe`: poseidon.torch imports engine
modules, and a plain PyTorch program that uses it keeps its malloc as it was).
`CAFFE_MALLOC=system` leaves glibc as it is; glibc's own MALLOC_MMAP_THRESHOLD_ and
MALLOC_TRIM_THRESHOLD_, when set, win (they also turn its adjusting off).
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import torch

from caffe.errors import CaffeError

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_GLIBC_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_outcome: bool | None = None  # keep_step_buffers_once's answer, once it has run


def keep_step_buffers_once() -> bool:
    """keep_step_buffers, the first time it succeeds in deciding; its answer after that."""
    global _outcome
    if _outcome is None:
        _outcome = keep_step_buffers()
    return _outcome


def keep_step_buffers() -> bool:
    """Apply CAFFE_MALLOC (default `keep`); True when glibc now keeps freed buffers."""
    setting = os.environ.get("CAFFE_MALLOC", "keep").strip().lower() or "keep"
    if setting not in ("keep", "system"):
        raise CaffeError(f"CAFFE_MALLOC={setting!r}: want 'keep' or 'system'")
    if setting == "system" or any(name in os.environ for name in _GLIBC_SETTINGS):
        return False
    if not _glibc():
        return False  # musl, macOS: other allocators, other rules
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


# Note [zeros untouched until written]
# torch.zeros writes every zero, so every page of it is resident from the start; calloc (what
# numpy.zeros calls) hands out pages the kernel zeroes when first written, and reading them
# maps the one shared zero page. A net allocates its activations' diffs, its parameters'
# diffs and the solver's history at build; made this way, none of them costs resident memory
# until training writes it (a VGG19 build held 1.1 GB of zeros: issue 24). The training peak
# is unchanged: a step writes all of them. Kept 64-byte aligned, as torch's own allocations.
_ALIGN_FLOATS = 16


def lazy_zeros(count: int, device: torch.device) -> torch.Tensor:
    """A flat float32 tensor of `count` zeros on `device`; on CPU its pages become resident
    only when written (Note [zeros untouched until written])."""
    if device.type != "cpu":
        return torch.zeros(count, dtype=torch.float32, device=device)
    raw = np.zeros(count + _ALIGN_FLOATS, dtype=np.float32)
    skip = (-raw.ctypes.data % (4 * _ALIGN_FLOATS)) // 4
    return torch.from_numpy(raw[skip : skip + count])


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False
