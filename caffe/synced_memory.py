"""Fixed memory on the compute device with a lazily synced host mirror (Caffe's SyncedMemory).

A SyncedTensor is `capacity` float32 values, flat; blobs view a prefix of it in their
shape, and several blobs may hold the same SyncedTensor (ShareData: Split tops, Flatten,
Reshape), so the host mirror and its sync state are shared with the memory itself.
Neither the device memory nor the host mirror is ever replaced: a numpy view of `host()`
or a tensor view of `device()` stays this memory for the object's life.

On CPU the host view *is* the device tensor. On CUDA, `host()` copies device -> host only
when the device copy may be newer, and `device()` copies host -> device only when the host
copy may be newer. Both accessors are "mutable": whoever asks for one is assumed to write
it, exactly like pycaffe's `blob.data`, which calls mutable_cpu_data.

Who can see the memory (Note [taking fresh tensors] in caffe/blob.py): `holders` counts the
blob halves that hold this object (Blob keeps the count), and `expose` remembers, weakly,
every numpy view handed out of it. Memory that one blob holds and no live numpy view shows
is `private`: that blob may adopt a kernel's output in its place instead of copying it in.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

_AT_DEVICE, _AT_HOST = 0, 1


class SyncedTensor:
    __slots__ = ("_device", "_head", "_host", "_views", "holders", "on_cpu")

    def __init__(self, flat: torch.Tensor) -> None:
        if flat.dim() != 1:
            raise ValueError(f"SyncedTensor takes flat memory, got shape {tuple(flat.shape)}")
        self._device = flat
        self._host: torch.Tensor | None = None
        self._head = _AT_DEVICE
        self.on_cpu = flat.device.type == "cpu"
        self.holders = 0  # blob halves that hold this memory
        self._views: list[weakref.ref] = []  # numpy views handed out

    def expose(self, view: np.ndarray) -> np.ndarray:
        """Remember `view`, a numpy view of this memory that leaves the engine, and return
        it. Every view derived from it keeps it alive (numpy's base chain, torch.from_numpy),
        so its weak reference lives as long as anything outside can see this memory."""
        live = [ref for ref in self._views if ref() is not None]  # few: the list stays short
        live.append(weakref.ref(view))
        self._views = live
        return view

    @property
    def private(self) -> bool:
        """Whether exactly one blob half holds this memory and no numpy view of it lives."""
        return self.holders == 1 and all(ref() is None for ref in self._views)

    @property
    def capacity(self) -> int:
        return self._device.numel()

    @property
    def nbytes(self) -> int:
        """Bytes on the compute device (a host mirror, on CUDA, is as large again)."""
        return self._device.nbytes

    def device(self) -> torch.Tensor:
        """The flat compute tensor; marks the device copy as the newest."""
        if not self.on_cpu:
            if self._head == _AT_HOST:
                self._device.copy_(self._host)
            self._head = _AT_DEVICE
        return self._device

    def host(self) -> torch.Tensor:
        """The flat host tensor (pinned on CUDA), synced; marks the host copy as the newest."""
        if self.on_cpu:
            return self._device
        if self._host is None:
            self._host = torch.empty(self.capacity, dtype=self._device.dtype).pin_memory()
            self._head = _AT_DEVICE
        if self._head == _AT_DEVICE:
            self._host.copy_(self._device)
        self._head = _AT_HOST
        return self._host
