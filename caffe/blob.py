"""Blob: an N-D array with `data` and `diff`, the unit that layers exchange.

Internally both halves are torch tensors on the blob's device (`data_tensor`,
`diff_tensor`); from Python, `data` and `diff` are float32 numpy views that share
memory with the blob (a host mirror on CUDA, synced lazily).

Memory stays put, as in BVLC: each half is a SyncedTensor allocated on first use and
kept for as long as the blob's count fits in it - across forward, backward, solver steps
and reshapes to the same or a smaller count; only a larger count allocates anew (zeros).
The one exception is BVLC's too: a prefetching data layer on CPU hands each batch to its
tops by `adopt_data` (Caffe's set_cpu_data) instead of copying it.
Layers write their outputs *into* that memory (`set_data`/`set_diff` copy, hot layers
compute with out=), so a numpy view taken from `blob.data` before a forward pass shows
the values after it. `share_data`/`share_diff` make two blobs one memory (Caffe's
ShareData: Split tops, Flatten, Reshape). Learnable blobs are views into their net's
contiguous parameter buffer (`bind_storage`), which is what lets the communication layer
send a layer's gradient as one range without copying.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch

from caffe.common import compute_device
from caffe.heap import lazy_zeros
from caffe.synced_memory import SyncedTensor

DTYPE = torch.float32
MAX_BLOB_AXES = 32
_INTEGERS = (int, np.integer)
_DATA, _DIFF = "_data", "_diff"  # the attributes of the two halves (Blob._hold)


def _as_shape(dims: Iterable[int]) -> tuple[int, ...]:
    shape = tuple(int(d) for d in dims)
    if len(shape) > MAX_BLOB_AXES:
        raise ValueError(f"blob shape {shape} has more than {MAX_BLOB_AXES} axes")
    if any(d < 0 for d in shape):
        raise ValueError(f"blob shape {shape} has a negative dimension")
    return shape


class BlobCount(int):
    """`blob.count`: the number of elements, an int as in pycaffe. Called, it is Caffe's
    C++ count(start_axis[, end_axis]): the product of the dims start_axis..end_axis-1."""

    def __new__(cls, shape: tuple[int, ...]) -> BlobCount:
        count = super().__new__(cls, math.prod(shape))
        count._shape = shape
        return count

    def __call__(self, start_axis: int = 0, end_axis: int | None = None) -> int:
        axes = len(self._shape)
        end = axes if end_axis is None else end_axis
        if not 0 <= start_axis <= end <= axes:
            raise ValueError(
                f"count({start_axis}, {end}): need 0 <= start_axis <= end_axis <= {axes} "
                f"for a blob of shape {list(self._shape)}"
            )
        return math.prod(self._shape[start_axis:end])

    def __reduce__(self):
        return (int, (int(self),))  # pickles (and copies) as a plain int


class Blob:
    """Caffe's Blob. `shape` is a list like pycaffe; `data`/`diff` are numpy views."""

    def __init__(self, shape: Sequence[int] = (), device: torch.device | None = None) -> None:
        self.device = device if device is not None else compute_device()
        self._shape = _as_shape(shape)
        self._count = BlobCount(self._shape)
        # Each half: its SyncedTensor and the device view of it in the blob's shape.
        self._data: SyncedTensor | None = None
        self._data_view: torch.Tensor | None = None
        self._diff: SyncedTensor | None = None
        self._diff_view: torch.Tensor | None = None
        self._fixed = False  # bound to a parameter buffer: the count never changes
        # Called before the data is first allocated: a deferred fill (caffe/fillers.py).
        self._before_first_data: Callable[[], None] | None = None

    # ----- shape -----------------------------------------------------------------
    @property
    def shape(self) -> list[int]:
        return list(self._shape)

    @property
    def shape_tuple(self) -> tuple[int, ...]:
        return self._shape

    @property
    def count(self) -> BlobCount:
        return self._count

    @property
    def num_axes(self) -> int:
        return len(self._shape)

    def legacy_shape(self, index: int) -> int:
        """Caffe's LegacyShape: axes past the end (index 0..3) or before the start (-4..-1)
        read as 1, so a (10, 4) blob is num 10, channels 4, height 1, width 1."""
        axes = len(self._shape)
        if axes > 4:
            raise ValueError(
                f"Cannot use legacy accessors on Blobs with > 4 axes (shape {list(self._shape)})"
            )
        if not -4 <= index < 4:
            raise ValueError(f"legacy shape index {index} outside -4..3")
        if index >= axes or index < -axes:
            return 1
        return self._shape[index]

    num = property(lambda self: self.legacy_shape(0))
    channels = property(lambda self: self.legacy_shape(1))
    height = property(lambda self: self.legacy_shape(2))
    width = property(lambda self: self.legacy_shape(3))

    def canonical_axis(self, axis: int) -> int:
        n = len(self._shape)
        if not -n <= axis < max(n, 1):
            raise ValueError(f"axis {axis} out of range for a {n}-D blob {self._shape}")
        return axis + n if axis < 0 else axis

    def reshape(self, *dims: int | Sequence[int]) -> None:
        """Reshape; accepts reshape(2, 3) and reshape([2, 3]). The memory is kept unless
        the new count exceeds it (Caffe's capacity rule)."""
        if len(dims) == 1 and not isinstance(dims[0], _INTEGERS):
            dims = tuple(dims[0])  # type: ignore[arg-type]
        if dims == self._shape:
            return  # layers reshape their tops before every forward: mostly to the same shape
        shape = _as_shape(dims)  # type: ignore[arg-type]
        if shape == self._shape:
            return
        if self._fixed and math.prod(shape) != self._count:
            raise ValueError(
                f"cannot reshape a parameter blob from {self._shape} to {shape}: count changes"
            )
        self._shape = shape
        self._count = BlobCount(shape)
        for which, half in ((_DATA, self._data), (_DIFF, self._diff)):
            if half is not None:
                self._hold(which, half if half.capacity >= self._count else None)

    def reshape_like(self, other: Blob) -> None:
        self.reshape(other._shape)

    # ----- memory -------------------------------------------------------------------
    def _shaped(self, half: SyncedTensor) -> torch.Tensor:
        """The device view of `half` in this blob's shape (a prefix of its capacity)."""
        return half.device()[: self._count].view(self._shape)

    def _hold(
        self, which: str, half: SyncedTensor | None, view: torch.Tensor | None = None
    ) -> None:
        """Make `half` the data (which=_DATA) or the diff (_DIFF), seen as `view` (default:
        its prefix in the blob's shape), and keep the holder counts."""
        old: SyncedTensor | None = getattr(self, which)
        if old is not None:
            old.holders -= 1
        if half is not None:
            half.holders += 1
            if view is None:
                view = self._shaped(half)
        setattr(self, which, half)
        setattr(self, which + "_view", view)

    def _new_half(self) -> SyncedTensor:
        # Zeros as Caffe's SyncedMemory gives them, resident only once written (caffe/heap.py).
        return SyncedTensor(lazy_zeros(self._count, self.device))

    def await_fill(self, draw: Callable[[], None] | None) -> None:
        """Have `draw` (which fills this blob's data) run before the data is first allocated,
        or, with None, forget it (Note [deferred fills] in caffe/fillers.py)."""
        self._before_first_data = draw

    @property
    def awaits_fill(self) -> bool:
        """Whether a deferred fill has yet to write this blob's data (none allocated yet)."""
        return self._before_first_data is not None and self._data is None

    @property
    def data_tensor(self) -> torch.Tensor:
        """The data on the blob's device, this blob's memory. Callers may write it in place."""
        half = self._data
        if half is None:
            draw, self._before_first_data = self._before_first_data, None
            if draw is not None:
                draw()  # fills this blob (allocating it) and every fill pending before it
                return self.data_tensor
            self._hold(_DATA, self._new_half())
        elif not half.on_cpu:
            half.device()
        return self._data_view  # type: ignore[return-value]

    @property
    def diff_tensor(self) -> torch.Tensor:
        """The diff on the blob's device, this blob's memory. Callers may write it in place."""
        half = self._diff
        if half is None:
            self._hold(_DIFF, self._new_half())
        elif not half.on_cpu:
            half.device()
        return self._diff_view  # type: ignore[return-value]

    def set_data(self, tensor: torch.Tensor) -> None:
        """Write `tensor` (shape must equal the blob's) into the blob's data memory."""
        self._write(self.data_tensor, tensor)

    def set_diff(self, tensor: torch.Tensor) -> None:
        """Write `tensor` (shape must equal the blob's) into the blob's diff memory."""
        self._write(self.diff_tensor, tensor)

    def _write(self, memory: torch.Tensor, tensor: torch.Tensor) -> None:
        if tensor.shape != memory.shape:
            raise ValueError(f"tensor of shape {tuple(tensor.shape)} set into blob {self._shape}")
        if tensor.data_ptr() == memory.data_ptr() and tensor.stride() == memory.stride():
            return  # computed in place: already there
        memory.copy_(tensor.detach())

    # Note [taking fresh tensors]
    # PyTorch's convolution kernels return their output in memory of their own, and copying
    # it into the blob is a pass over it, and a second buffer as large, beside the kernel's
    # own freshly faulted one. When nothing outside this blob can see its memory - one blob
    # holds it (no Split top, Flatten or Reshape shares it; not a parameter) and no numpy
    # view of it is alive (caffe/synced_memory.py) - nothing can tell the blob's memory from
    # the kernel's: the blob adopts the output and lets the old memory go, as PyTorch's own
    # modules do. Whoever can see the memory sees it stay put, as ever. Engine code reads
    # `data_tensor`/`diff_tensor` afresh in every pass (it never keeps them across passes,
    # docs/engine.md), so it follows. The caller promises a fresh tensor: a kernel's output
    # that nothing else holds (no view of another blob, nothing an autograd graph keeps).
    # Adopting is not free either: the replaced memory goes back to malloc, and whether the
    # next output reuses it or is a fresh mapping to fault in depends on glibc's thresholds.
    # Measured (bench/page_faults.py, docs/benchmarks.md): with glibc left alone, adopting
    # faulted less than copying on CIFAR-10 quick and more on LeNet, varying by process;
    # with the thresholds caffe/heap.py sets (the default) neither faults, and adopting
    # saves the copy.
    def take_data(self, tensor: torch.Tensor) -> None:
        """set_data for a kernel's fresh output: adopted instead of copied where nothing
        can tell (Note [taking fresh tensors])."""
        self._take(_DATA, tensor)

    def take_diff(self, tensor: torch.Tensor) -> None:
        """set_diff for a kernel's fresh output: adopted instead of copied where nothing
        can tell (Note [taking fresh tensors])."""
        self._take(_DIFF, tensor)

    def _take(self, which: str, tensor: torch.Tensor) -> None:
        if self._may_take(getattr(self, which), tensor):
            self._hold(which, SyncedTensor(tensor.view(-1)), tensor)
        else:
            self._write(self.data_tensor if which == _DATA else self.diff_tensor, tensor)

    def _may_take(self, half: SyncedTensor | None, tensor: torch.Tensor) -> bool:
        # CPU only: there a fresh buffer costs page faults and the copy a pass through the
        # caches; on CUDA the caching allocator recycles buffers, the copy is cheap, and a
        # new SyncedTensor would cost a new pinned host mirror.
        return (
            (half is None or half.private)
            and not self._fixed
            and tensor.device.type == "cpu"
            and self.device.type == "cpu"
            and tensor.shape == self._shape
            and tensor.dtype == DTYPE
            and tensor.is_contiguous()
        )

    def bind_storage(self, data: torch.Tensor, diff: torch.Tensor) -> None:
        """Make flat views `data`/`diff` (count elements each) this blob's memory for life."""
        if data.numel() != self._count or diff.numel() != self._count:
            raise ValueError(f"storage of {data.numel()} elements bound to blob {self._shape}")
        self.device = data.device
        self._hold(_DATA, SyncedTensor(data.view(-1)))
        self._hold(_DIFF, SyncedTensor(diff.view(-1)))
        self._fixed = True

    def share_data(self, other: Blob) -> None:
        """Make other's data memory this blob's (counts must match); Caffe's ShareData."""
        if other._count != self._count:
            raise ValueError(f"share_data: counts differ ({other._shape} vs {self._shape})")
        other.data_tensor  # noqa: B018  (allocates it if still unused)
        self._hold(_DATA, other._data)
        self._fixed = other._fixed
        self.device = other.device

    def adopt_data(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """Make `tensor` (contiguous, this blob's shape, on its device) the blob's data memory,
        without a copy; returns the memory it replaces (None if none was allocated). Caffe's
        set_cpu_data, with which a prefetching data layer hands its batch to its top: views
        of the top taken before that keep the previous batch, as in BVLC, and layers that
        share the top's memory (Split, Flatten, Reshape) share it anew at their reshape."""
        if tuple(tensor.shape) != self._shape or not tensor.is_contiguous():
            raise ValueError(f"adopt_data: need a contiguous {self._shape} tensor, got "
                             f"{tuple(tensor.shape)}")  # fmt: skip
        if self._fixed:
            raise ValueError("adopt_data: a parameter blob's memory is its net's buffer")
        old = self._data_view if self._data is not None else None
        self._hold(_DATA, SyncedTensor(tensor.view(-1)), tensor)
        return old

    @property
    def has_diff(self) -> bool:
        """Whether diff memory exists: a diff nothing has written or read yet is not
        allocated, and reads as zeros when first asked for."""
        return self._diff is not None

    def memory(self) -> tuple[SyncedTensor | None, SyncedTensor | None]:
        """The memory behind data and diff (None where none is allocated yet), for
        accounting: reading it allocates nothing, unlike `data_tensor` and `diff_tensor`.
        Blobs that share a half return the same object for it."""
        return self._data, self._diff

    def shares_data_with(self, other: Blob) -> bool:
        """Whether this blob already is `other`'s data memory in `other`'s shape."""
        return self._data is not None and self._data is other._data and self._shape == other._shape

    def share_diff(self, other: Blob) -> None:
        """Make other's diff memory this blob's (counts must match); Caffe's ShareDiff."""
        if other._count != self._count:
            raise ValueError(f"share_diff: counts differ ({other._shape} vs {self._shape})")
        other.diff_tensor  # noqa: B018  (allocates it if still unused)
        self._hold(_DIFF, other._diff)

    # ----- numpy views (pycaffe side) ---------------------------------------------------
    @property
    def data(self) -> np.ndarray:
        if self._data is None:
            self.data_tensor  # noqa: B018  (allocates the memory on first use)
        half: SyncedTensor = self._data  # type: ignore[assignment]
        if half.on_cpu:
            return half.expose(self._data_view.numpy())  # type: ignore[union-attr]
        return half.expose(half.host()[: self._count].view(self._shape).numpy())

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self.data[...] = value

    @property
    def diff(self) -> np.ndarray:
        if self._diff is None:
            self.diff_tensor  # noqa: B018  (allocates the memory on first use)
        half: SyncedTensor = self._diff  # type: ignore[assignment]
        if half.on_cpu:
            return half.expose(self._diff_view.numpy())  # type: ignore[union-attr]
        return half.expose(half.host()[: self._count].view(self._shape).numpy())

    @diff.setter
    def diff(self, value: np.ndarray) -> None:
        self.diff[...] = value

    def __repr__(self) -> str:
        return f"Blob(shape={list(self._shape)}, device={self.device})"

    def shape_string(self) -> str:
        """Caffe's shape_string: '64 1 28 28 (50176)'; a 0-axis blob is '(1)'."""
        return "".join(f"{d} " for d in self._shape) + f"({self._count})"
