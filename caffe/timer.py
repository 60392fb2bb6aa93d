"""pycaffe's Timer: start(), stop(), ms; Caffe's Timer also offers seconds and microseconds.

In GPU mode the device is synchronised at start and stop, so the time covers the
kernels queued in between (Caffe's Timer uses CUDA events for the same effect).
"""

from __future__ import annotations

import logging
import time

import torch

from caffe.common import compute_device

_log = logging.getLogger("caffe")


def _synchronize() -> None:
    device = compute_device()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """Wall-clock timer. Reading elapsed time while running stops the timer first (as Caffe)."""

    def __init__(self) -> None:
        self._running = False
        self._has_run = False
        self._start = 0.0
        self._elapsed_s = 0.0

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        if not self._running:
            _synchronize()
            self._start = time.perf_counter()
            self._running = True
            self._has_run = True

    def stop(self) -> None:
        if self._running:
            _synchronize()
            self._elapsed_s = time.perf_counter() - self._start
            self._running = False

    @property
    def seconds(self) -> float:
        """Seconds between the last start() and stop()."""
        if not self._has_run:
            _log.warning("Timer has never been run before reading time.")
            return 0.0
        self.stop()
        return self._elapsed_s

    @property
    def ms(self) -> float:
        return self.seconds * 1e3

    @property
    def microseconds(self) -> float:
        return self.seconds * 1e6
