"""Blob: an N-D array with `data` and `diff`, the unit that layers exchange.

Internally both halves are torch tensors on the blob's device (`data_tensor`,
`diff_tensor`); from Python, `data` and `diff` are float32 numpy views that share
memory with the blob (a host mirror on CUDA, synced lazily). Storage is allocated on
first use, so reshaping is cheap. A layer's output may *replace* a top's memory
(`set_data`): take numpy views after the forward pass that fills them.
Learnable blobs are views into their net's contiguous parameter buffer and keep that
memory for life (`bind_storage`), which is what lets the communication layer send a
layer's gradient as one range without copying.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from caffe.common import compute_device
from caffe.synced_memory import SyncedTensor

DTYPE = torch.float32
MAX_BLOB_AXES = 32


def _as_shape(dims: Iterable[int]) -> tuple[int, ...]:
    shape = tuple(int(d) for d in dims)
    if len(shape) > MAX_BLOB_AXES:
        raise ValueError(f"blob shape {shape} has more than {MAX_BLOB_AXES} axes")
    if any(d < 0 for d in shape):
        raise ValueError(f"blob shape {shape} has a negative dimension")
    return shape


class Blob:
    """Caffe's Blob. `shape` is a list like pycaffe; `data`/`diff` are numpy views."""

    def __init__(self, shape: Sequence[int] = (), device: torch.device | None = None) -> None:
        self.device = device if device is not None else compute_device()
        self._shape = _as_shape(shape)
        self._data: SyncedTensor | None = None
        self._diff: SyncedTensor | None = None
        self._fixed = False  # bound to a parameter buffer: memory never replaced

    # ----- shape -----------------------------------------------------------------
    @property
    def shape(self) -> list[int]:
        return list(self._shape)

    @property
    def shape_tuple(self) -> tuple[int, ...]:
        return self._shape

    @property
    def count(self) -> int:
        return math.prod(self._shape)

    @property
    def num_axes(self) -> int:
        return len(self._shape)

    def _legacy(self, axis: int) -> int:
        # Caffe's LegacyShape: 4-D view, missing leading axes read as 1.
        if len(self._shape) > 4:
            raise ValueError(f"legacy accessor on a {len(self._shape)}-D blob {self._shape}")
        index = axis + len(self._shape) - 4
        return self._shape[index] if index >= 0 else 1

    num = property(lambda self: self._legacy(0))
    channels = property(lambda self: self._legacy(1))
    height = property(lambda self: self._legacy(2))
    width = property(lambda self: self._legacy(3))

    def canonical_axis(self, axis: int) -> int:
        n = len(self._shape)
        if not -n <= axis < max(n, 1):
            raise ValueError(f"axis {axis} out of range for a {n}-D blob {self._shape}")
        return axis + n if axis < 0 else axis

    def reshape(self, *dims: int | Sequence[int]) -> None:
        """Reshape; accepts reshape(2, 3) and reshape([2, 3]). Same count keeps the memory."""
        if len(dims) == 1 and not isinstance(dims[0], int | np.integer):
            dims = tuple(dims[0])  # type: ignore[arg-type]
        shape = _as_shape(dims)  # type: ignore[arg-type]
        if shape == self._shape:
            return
        if self._fixed and math.prod(shape) != self.count:
            raise ValueError(
                f"cannot reshape a parameter blob from {self._shape} to {shape}: count changes"
            )
        self._shape = shape
        self._data = self._reshaped(self._data)
        self._diff = self._reshaped(self._diff)

    def _reshaped(self, half: SyncedTensor | None) -> SyncedTensor | None:
        # Same count: keep the memory as a view; otherwise drop it (reallocated lazily).
        if half is None or half.peek().numel() != self.count:
            return None
        half.rebind(half.peek().view(self._shape))
        return half

    def reshape_like(self, other: Blob) -> None:
        self.reshape(other._shape)

    # ----- tensors (engine side) ---------------------------------------------------
    def _materialize(self, half: SyncedTensor | None) -> SyncedTensor:
        if half is None:
            half = SyncedTensor(torch.zeros(self._shape, dtype=DTYPE, device=self.device))
        return half

    @property
    def data_tensor(self) -> torch.Tensor:
        """The data on the blob's device. Callers may write it in place."""
        self._data = self._materialize(self._data)
        return self._data.device()

    @property
    def diff_tensor(self) -> torch.Tensor:
        """The diff on the blob's device. Callers may write it in place."""
        self._diff = self._materialize(self._diff)
        return self._diff.device()

    def set_data(self, tensor: torch.Tensor) -> None:
        """Make `tensor` (shape must equal the blob's) the blob's data, without copying."""
        self._set(tensor, is_diff=False)

    def set_diff(self, tensor: torch.Tensor) -> None:
        """Make `tensor` (shape must equal the blob's) the blob's diff, without copying."""
        self._set(tensor, is_diff=True)

    def _set(self, tensor: torch.Tensor, is_diff: bool) -> None:
        if tuple(tensor.shape) != self._shape:
            raise ValueError(f"tensor of shape {tuple(tensor.shape)} set into blob {self._shape}")
        tensor = tensor.detach().to(DTYPE).contiguous()
        half = self._diff if is_diff else self._data
        if self._fixed and half is not None:
            half.device().copy_(tensor)
            return
        if half is None:
            half = SyncedTensor(tensor)
        else:
            half.rebind(tensor)
        if is_diff:
            self._diff = half
        else:
            self._data = half

    def bind_storage(self, data: torch.Tensor, diff: torch.Tensor) -> None:
        """Make flat views `data`/`diff` (count elements each) this blob's memory for life."""
        if data.numel() != self.count or diff.numel() != self.count:
            raise ValueError(f"storage of {data.numel()} elements bound to blob {self._shape}")
        self._data = SyncedTensor(data.view(self._shape))
        self._diff = SyncedTensor(diff.view(self._shape))
        self._fixed = True
        self.device = data.device

    def share_data(self, other: Blob) -> None:
        """Alias other's data (counts must match); Caffe's ShareData."""
        if other.count != self.count:
            raise ValueError(f"share_data: counts differ ({other._shape} vs {self._shape})")
        self._data = SyncedTensor(other.data_tensor.view(self._shape))
        self._fixed = other._fixed
        self.device = other.device

    def share_diff(self, other: Blob) -> None:
        """Alias other's diff (counts must match); Caffe's ShareDiff."""
        if other.count != self.count:
            raise ValueError(f"share_diff: counts differ ({other._shape} vs {self._shape})")
        self._diff = SyncedTensor(other.diff_tensor.view(self._shape))

    # ----- numpy views (pycaffe side) ---------------------------------------------------
    @property
    def data(self) -> np.ndarray:
        self._data = self._materialize(self._data)
        return self._data.host()

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self.data[...] = value

    @property
    def diff(self) -> np.ndarray:
        self._diff = self._materialize(self._diff)
        return self._diff.host()

    @diff.setter
    def diff(self, value: np.ndarray) -> None:
        self.diff[...] = value

    def __repr__(self) -> str:
        return f"Blob(shape={list(self._shape)}, device={self.device})"

    def shape_string(self) -> str:
        """Caffe's shape_string: '64 1 28 28 (50176)'."""
        return " ".join(str(d) for d in self._shape) + f" ({self.count})"
