"""Where a layer's gradient range meets the communication core: host memory.

On CPU the comm core reads and writes the layer's slice of the net's flat diff buffer
directly (registered once; no copy).

Note [GPU path]. On CUDA each layer gets a pinned host buffer, allocated once. After a
layer's backward, an event recorded on the compute stream orders a device→host copy on
a side stream; a comm thread (not the training thread) waits for that copy's own event
and then hands the host buffer to the comm core, so the training thread keeps queuing
the next layers' backward kernels. The result goes back host→device on the side stream
and the compute stream waits on that copy's event before the layer's next forward.
Nothing calls a device-wide synchronize on the hot path.
"""

from __future__ import annotations

import numpy as np
import torch


def to_host_async(
    tensor: torch.Tensor, side_stream: torch.cuda.Stream | None
) -> tuple[np.ndarray, torch.cuda.Event | None]:
    """`tensor` as a host float32 array. CPU: the tensor's own memory, no event. CUDA: a
    pinned copy made on the side stream after the compute stream's queued work; the returned
    event marks its completion (call .synchronize() before reading the array)."""
    if tensor.device.type != "cuda":
        return tensor.contiguous().numpy(), None
    host = torch.empty(tensor.shape, dtype=torch.float32).pin_memory()
    ready = torch.cuda.Event()
    ready.record()
    done = torch.cuda.Event()
    with torch.cuda.stream(side_stream):
        side_stream.wait_event(ready)
        host.copy_(tensor, non_blocking=True)
        tensor.record_stream(side_stream)  # keep it alive until the copy has run
        done.record(side_stream)
    return host.numpy(), done


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
