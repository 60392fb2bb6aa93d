"""The `--gpu` flag: which CUDA devices a command uses, and the engine's compute mode.

`--gpu ""` means CPU; `--gpu 0,2` those devices; `--gpu all` every visible device. Without a
CUDA device, asking for one falls back to CPU with one warning (Caffe's CPU-only build
would die instead; a CPU engine should still run the example solvers, which all say
`solver_mode: GPU`).
"""

from __future__ import annotations

import logging

import torch

from caffe.common import set_device, set_mode_cpu, set_mode_gpu
from caffe.tools.flags import FlagError

_log = logging.getLogger("caffe")


def parse_gpu_flag(value: str) -> list[int]:
    """Device ids named by a --gpu value ("" -> [], "all" -> every visible device)."""
    value = value.strip()
    if not value:
        return []
    if value == "all":
        return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    ids = []
    for part in value.split(","):
        try:
            device = int(part.strip(), 10)
        except ValueError:
            device = -1
        if device < 0:
            raise FlagError(
                f"illegal value '{value}' for flag 'gpu': give device ids separated by ',' "
                "(e.g. 0,1) or 'all'"
            )
        ids.append(device)
    return ids


def choose_devices(gpu_flag: str, requested_by: str = "--gpu") -> list[int]:
    """Set CPU or GPU mode from a --gpu value; returns the GPUs used ([] for CPU).

    `requested_by` names where the request came from, for the fallback warning.
    """
    gpus = parse_gpu_flag(gpu_flag)
    if gpus and not torch.cuda.is_available():
        _log.warning(
            "%s asks for GPU %s but no CUDA device is available; running on CPU.",
            requested_by,
            ", ".join(map(str, gpus)),
        )
        gpus = []
    if not gpus:
        if gpu_flag.strip() == "all":
            _log.warning("--gpu all: no CUDA device is available; running on CPU.")
        set_mode_cpu()
        return []
    count = torch.cuda.device_count()
    missing = [g for g in gpus if g >= count]
    if missing:
        raise FlagError(
            f"{requested_by}: no CUDA device {', '.join(map(str, missing))} "
            f"({count} visible: 0..{count - 1})"
        )
    set_device(gpus[0])
    set_mode_gpu()
    return gpus


def log_gpu_names(gpus: list[int]) -> None:
    for device in gpus:
        _log.info("GPU %d: %s", device, torch.cuda.get_device_name(device))
