"""`caffe device_query --gpu ids|all`: log the properties of CUDA devices (Caffe's
Caffe::DeviceQuery, from what torch.cuda reports)."""

from __future__ import annotations

import logging

import torch

from caffe.errors import CaffeError
from caffe.tools.devices import parse_gpu_flag
from caffe.tools.flags import Flags

_log = logging.getLogger("caffe")

# (label, torch property, formatter); properties an older torch lacks are skipped.
_PROPERTIES = [
    ("Major revision number", "major", str),
    ("Minor revision number", "minor", str),
    ("Name", "name", str),
    ("Total global memory", "total_memory", str),
    ("Shared memory per block", "shared_memory_per_block", str),
    ("Registers per multiprocessor", "regs_per_multiprocessor", str),
    ("Warp size", "warp_size", str),
    ("Maximum threads per multiprocessor", "max_threads_per_multi_processor", str),
    ("L2 cache size", "L2_cache_size", str),
    ("Number of multiprocessors", "multi_processor_count", str),
    ("Integrated", "is_integrated", lambda v: "Yes" if v else "No"),
    ("Multi-GPU board", "is_multi_gpu_board", lambda v: "Yes" if v else "No"),
    ("UUID", "uuid", str),
]


def device_query(flags: Flags) -> int:
    if not flags.gpu:
        raise CaffeError("Need a device ID to query (--gpu ids, or --gpu all).")
    if not torch.cuda.is_available():
        raise CaffeError(
            f"No CUDA device is available to query (--gpu {flags.gpu}): this machine has no "
            "usable GPU, or torch was built without CUDA."
        )
    _log.info("Querying GPUs %s", flags.gpu)
    count = torch.cuda.device_count()
    for device in parse_gpu_flag(flags.gpu):
        if device >= count:
            raise CaffeError(f"--gpu: no CUDA device {device} ({count} visible: 0..{count - 1})")
        properties = torch.cuda.get_device_properties(device)
        _log.info("%-31s%d", "Device id:", device)
        for label, attribute, fmt in _PROPERTIES:
            if hasattr(properties, attribute):
                _log.info("%-31s%s", label + ":", fmt(getattr(properties, attribute)))
    return 0
