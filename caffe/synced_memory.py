"""A device tensor with a lazily synced host mirror (Caffe's SyncedMemory idea).

On CPU the host view *is* the tensor, so numpy views share memory with it directly.
On CUDA, `host()` copies device -> host only when the device copy may be newer, and
`device()` copies host -> device only when the host copy may be newer. Both accessors
are "mutable": whoever asks for one is assumed to write it, exactly like pycaffe's
`blob.data`, which calls mutable_cpu_data.
"""

from __future__ import annotations

import numpy as np
import torch

_AT_DEVICE, _AT_HOST, _SYNCED = 0, 1, 2


class SyncedTensor:
    __slots__ = ("_device", "_head", "_host", "on_cpu")

    def __init__(self, tensor: torch.Tensor) -> None:
        self._device = tensor
        self._host: torch.Tensor | None = None
        self._head = _AT_DEVICE
        self.on_cpu = tensor.device.type == "cpu"

    def device(self) -> torch.Tensor:
        """The compute tensor; marks the device copy as the newest."""
        if not self.on_cpu:
            if self._head == _AT_HOST:
                self._device.copy_(self._host, non_blocking=False)
            self._head = _AT_DEVICE
        return self._device

    def peek(self) -> torch.Tensor:
        """The compute tensor without claiming a write (for readers inside the engine)."""
        if not self.on_cpu and self._head == _AT_HOST:
            self._device.copy_(self._host)
            self._head = _SYNCED
        return self._device

    def host(self) -> np.ndarray:
        """A float32 numpy view of host memory that shares storage with the blob."""
        if self.on_cpu:
            return self._device.numpy()
        if self._host is None or self._host.shape != self._device.shape:
            self._host = torch.empty(self._device.shape, dtype=self._device.dtype).pin_memory()
            self._head = _AT_DEVICE
        if self._head == _AT_DEVICE:
            self._host.copy_(self._device)
        self._head = _AT_HOST
        return self._host.numpy()

    def rebind(self, tensor: torch.Tensor) -> None:
        """Point at new device memory (a layer's freshly computed output)."""
        self._device = tensor
        self._head = _AT_DEVICE
        self.on_cpu = tensor.device.type == "cpu"
