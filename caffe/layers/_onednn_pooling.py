"""MAX and AVE pooling on CPU through oneDNN, for Pooling layers whose windows PyTorch shapes
natively.

Why: PyTorch's CPU kernel for max pooling of contiguous NCHW tensors is a scalar loop
whose `val > max` branch the CPU cannot predict on real activations: CIFAR-10 quick's
pool1 (100×32×32×32, 3×3 stride 2) took 13.95 ms forward+backward there, a fifth of a
training step, and 4.51 ms through oneDNN, the copies in and out included; oneDNN was
1.6-4.2x as fast on every pool of bench/engine_vs_torch.py's nets (bench/pooling_kernels.py).
Both pick the first maximum of a window in row-major order, as Caffe does
(tests/caffe/layers/test_onednn_pooling.py checks values and gradients against PyTorch's kernel,
ties included).

oneDNN works on its own tensors: the input is copied in, the output and the gradient are
copied out. So that these copies stay small beside the net's blobs (VGG19's pool1 input is
~100 MB at batch 8), one call covers at most WORKSPACE_BYTES of input and output, whole
images, as convolution does (Note [convolution workspace] in caffe/layers/_base_conv.py).

oneDNN keeps the winners of a training forward as a workspace inside its output tensor;
`forward(..., keep=True)` holds those outputs (pooled size, not input size) until the next
forward, so that backward can run more than once, as Caffe's mask allows. Without them
(TEST nets, or a forward with no backward to follow) `backward` answers False and the layer
finds the winners with PyTorch's kernel.
"""

from __future__ import annotations

import math

import torch

from caffe.blob import Blob
from caffe.layers._base_conv import WORKSPACE_BYTES

_aten = torch.ops.aten
_NO_DILATION = (1, 1)
_BUILT_IN = torch.backends.mkldnn.is_available()


def usable(x: torch.Tensor) -> bool:
    """Whether oneDNN can pool `x` here: a float32 CPU tensor, oneDNN built into torch and
    not switched off (torch.backends.mkldnn.enabled)."""
    return (
        _BUILT_IN
        and torch.backends.mkldnn.enabled
        and x.device.type == "cpu"
        and x.dtype == torch.float32
    )


class OneDnnMaxPool:
    """One Pooling layer's oneDNN state: its geometry and the last forward's workspaces."""

    def __init__(
        self, kernel: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int], ceil: bool
    ) -> None:
        self.made_for = (kernel, stride, pad, ceil)
        self.geometry = (list(kernel), list(stride), list(pad), list(_NO_DILATION), ceil)
        self._pooled: list[torch.Tensor] = []  # per chunk: oneDNN output with its workspace
        self._shapes: dict[torch.Size, torch.Tensor] = {}  # chunk input shape -> stand-in

    def forward(self, x: torch.Tensor, top: Blob, keep: bool) -> None:
        """Pool `x` into `top`'s data; with `keep`, remember the winners for backward."""
        chunks = self._chunks(x.shape, top.shape_tuple)
        self._pooled = []
        if len(chunks) == 1:
            top.take_data(self._pool(x, keep))
            return
        y = top.data_tensor
        for start, end in chunks:
            y[start:end] = self._pool(x[start:end], keep)

    def backward(self, dy: torch.Tensor, bottom: Blob) -> bool:
        """Write the input's gradient into `bottom`'s diff; False without kept winners."""
        if not self._pooled:
            return False
        if len(self._pooled) == 1:
            bottom.take_diff(self._unpool(dy, self._pooled[0], bottom.shape_tuple))
            return True
        dx = bottom.diff_tensor
        start = 0
        for pooled in self._pooled:
            end = start + pooled.shape[0]
            dx[start:end] = self._unpool(dy[start:end], pooled, dx[start:end].shape)
            start = end
        return True

    def _chunks(self, in_shape: torch.Size, out_shape: tuple[int, ...]) -> list[tuple[int, int]]:
        image_bytes = 4 * (math.prod(in_shape[1:]) + math.prod(out_shape[1:]))
        num = in_shape[0]
        rows = max(1, WORKSPACE_BYTES // image_bytes)
        return [(start, min(start + rows, num)) for start in range(0, num, rows)]

    def _pool(self, x: torch.Tensor, keep: bool) -> torch.Tensor:
        xm = x.to_mkldnn()
        if not keep:
            return _aten.mkldnn_max_pool2d(xm, *self.geometry).to_dense()
        # oneDNN stores the winners only for an input that requires grad while grad mode is
        # on; below autograd nothing records a graph (which would keep xm alive).
        xm.requires_grad_()
        with torch.enable_grad(), torch._C._AutoDispatchBelowAutograd():
            pooled = _aten.mkldnn_max_pool2d(xm, *self.geometry)
        self._pooled.append(pooled)
        return pooled.to_dense()

    def _unpool(self, dy: torch.Tensor, pooled: torch.Tensor, in_shape) -> torch.Tensor:
        in_shape = torch.Size(in_shape)
        if in_shape not in self._shapes:
            if len(self._shapes) >= 4:  # inputs that change shape: keep the recent ones
                self._shapes.clear()
            # Backward reads only the input's shape: an oneDNN tensor never written to,
            # whose pages are never touched (no memory, no page faults).
            self._shapes[in_shape] = torch.empty(in_shape, layout=torch._mkldnn)
        grad = _aten.mkldnn_max_pool2d_backward(
            dy.contiguous().to_mkldnn(), pooled, self._shapes[in_shape], *self.geometry
        )
        return grad.to_dense()


# ----- AVE ---------------------------------------------------------------------------------
# Note [AVE divisor]. Caffe divides each window's sum by the window clipped to the padded
# input (hend = min(hstart + k, height + pad)): the full k·k wherever the padded input holds
# the window, fewer cells only where a ceil-mode window hangs past it. oneDNN has two rules:
# include-padding divides by k·k always, exclude-padding by the window clipped to the image.
# So with no padding Caffe's divisor is exclude-padding's (the overhang is all that is
# clipped), and with padding it is include-padding's as long as no window hangs past the
# padded input; otherwise neither, and the layer keeps PyTorch's kernel, which follows
# Caffe's rule everywhere. Only the forward goes through oneDNN: 2.7x as fast as PyTorch's
# NCHW kernel on CIFAR-10 quick's pools (bench/pooling_kernels.py, docs/benchmarks.md),
# where oneDNN's backward, its reorders included, was 2.7x slower on pool2.


def ave_include_padding(
    in_hw: tuple[int, ...], out_hw: tuple[int, ...], kernel: tuple[int, int],
    stride: tuple[int, int], pad: tuple[int, int],
) -> bool | None:  # fmt: skip
    """oneDNN's count_include_pad that gives Caffe's divisor for these windows, or None
    where neither does (Note [AVE divisor])."""
    if not any(pad):
        return False
    fits = all((o - 1) * s + k <= n + 2 * p
               for n, o, k, s, p in zip(in_hw, out_hw, kernel, stride, pad))  # fmt: skip
    return True if fits else None


def ave_pool_forward(
    x: torch.Tensor, top: Blob, kernel: tuple[int, int], stride: tuple[int, int],
    pad: tuple[int, int], ceil: bool, include_padding: bool,
) -> None:  # fmt: skip
    """AVE pooling of `x` into `top`'s data through oneDNN, whole images at a time within
    WORKSPACE_BYTES of input and output (its copies stay small beside the net's blobs)."""
    image_bytes = 4 * (math.prod(x.shape[1:]) + math.prod(top.shape_tuple[1:]))
    rows = max(1, WORKSPACE_BYTES // image_bytes)

    def pool(part: torch.Tensor) -> torch.Tensor:
        pooled = torch.nn.functional.avg_pool2d(part.to_mkldnn(), kernel, stride, pad, ceil,
                                                include_padding)  # fmt: skip
        return pooled.to_dense()

    if rows >= x.shape[0]:
        top.take_data(pool(x))
        return
    y = top.data_tensor
    for start in range(0, x.shape[0], rows):
        y[start : start + rows] = pool(x[start : start + rows])
