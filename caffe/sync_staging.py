"""Where a layer's gradient range meets the communication core: host memory.

On CPU the comm core reads and writes the layer's slice of the net's flat diff buffer
directly (registered once; no copy). On CUDA each layer gets a pinned host buffer,
allocated once; gradients move device→host and host→device on a side stream ordered
by CUDA events, so the compute stream never waits for a copy it does not need and
nothing calls a device-wide synchronize on the hot path.
"""

from __future__ import annotations

import numpy as np
import torch


class GradientStaging:
    """One layer's diff range `diff` (a flat view of Net.param_diff) and its host side."""

    def __init__(self, diff: torch.Tensor, side_stream: torch.cuda.Stream | None = None) -> None:
        self.diff = diff
        self.on_cuda = diff.device.type == "cuda"
        if self.on_cuda:
            self.host = torch.empty(diff.numel(), dtype=torch.float32).pin_memory()
            self.stream = side_stream
            self._copied = torch.cuda.Event()
        else:
            self.host = diff  # the comm core works in the diff buffer itself
            self.stream = None

    def host_array(self) -> np.ndarray:
        """The float32 array to register with the comm core (shares memory)."""
        return self.host.numpy()

    def to_host(self) -> None:
        """Start copying the device gradient to host; `wait_host()` blocks until done."""
        if not self.on_cuda:
            return
        ready = torch.cuda.Event()
        ready.record()  # after the backward kernels queued so far on the compute stream
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(ready)
            self.host.copy_(self.diff, non_blocking=True)
            self._copied.record(self.stream)

    def wait_host(self) -> None:
        """Block this (comm) thread until the host copy is complete."""
        if self.on_cuda:
            self._copied.synchronize()

    def to_device(self) -> None:
        """Copy the host result into the diff range; the compute stream waits for it."""
        if not self.on_cuda:
            return
        with torch.cuda.stream(self.stream):
            self.diff.copy_(self.host, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        torch.cuda.current_stream().wait_event(done)
