"""InnerProduct: y = x·Wᵀ + b over the axes from `axis` on (W is N×K, or K×N if transpose).

Backward is written out (three GEMMs) rather than left to autograd: the weight-gradient
GEMM is the one that sufficient-factor broadcasting replaces, so it must be separable.

On small nets the views around the GEMMs cost as much as the GEMMs, so the layer makes none
it can avoid: a blob that already is the M×K (or M×N) matrix is used as it is, and the
transposed views of the weight and of the top diff are kept for as long as those tensors are
the same objects (blob memory stays put; a test net sharing the train net's weights gets
new ones, and the cache follows).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from caffe.fillers import fill
from caffe.layer import Layer, register_layer
from caffe.training_hooks import HookSlot


@register_layer("InnerProduct")
class InnerProductLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    # Set by caffe/parallel/syncer.py (a single slot, caffe/training_hooks.py) when this layer is
    # synchronised by sufficient factors:
    # called with (top diff M×N, bottom data M×K) instead of computing the weight and
    # bias gradients here; every worker rebuilds them from all workers' factors.
    sufficient_factor_sink: HookSlot[Callable[[torch.Tensor, torch.Tensor], None]] = HookSlot()

    def setup(self, bottom, top):
        p = self.layer_param.inner_product_param
        if p.num_output <= 0:
            raise self.error("inner_product_param.num_output must be positive")
        self.num_output = p.num_output
        self.bias_term = p.bias_term
        self.transpose = p.transpose
        self.axis = bottom[0].canonical_axis(p.axis)
        self._bottom_shape: tuple[int, ...] | None = None  # what M and the top shape are for
        self._t_of: list[torch.Tensor | None] = [None, None]  # weight, top diff
        self._t_views: list[torch.Tensor | None] = [None, None]
        self.K = math.prod(bottom[0].shape[self.axis :])
        weight_shape = [self.K, self.num_output] if self.transpose else [self.num_output, self.K]
        expected = [weight_shape] + ([[self.num_output]] if self.bias_term else [])
        if self.blobs:
            got = [b.shape for b in self.blobs]
            if got != expected:
                raise self.error(f"given blobs have shapes {got}, expected {expected}")
            return
        fill(self.blobs.add_blob(*weight_shape), p.weight_filler)
        if self.bias_term:
            fill(self.blobs.add_blob(self.num_output), p.bias_filler)

    def reshape(self, bottom, top):
        shape = bottom[0].shape_tuple
        if shape is not self._bottom_shape:  # a blob keeps its shape tuple until it changes
            k = math.prod(shape[self.axis :])
            if k != self.K:
                raise self.error(
                    f"input size incompatible with inner product parameters: bottom "
                    f"{list(shape)} has {k} features from axis {self.axis}, the weights "
                    f"expect {self.K}"
                )
            self.M = math.prod(shape[: self.axis])
            self._top_shape = (*shape[: self.axis], self.num_output)
            self._bottom_shape = shape
            # Whether the blobs are the GEMM operands already, or need a 2-D view.
            self._bottom_is_matrix = shape == (self.M, self.K)
            self._top_is_matrix = len(self._top_shape) == 2
        top[0].reshape(self._top_shape)

    def _transposed(self, slot: int, tensor: torch.Tensor) -> torch.Tensor:
        """tensor.t(), made again only when `tensor` is another object than last time."""
        if self._t_of[slot] is not tensor:
            self._t_of[slot] = tensor
            self._t_views[slot] = tensor.t()
        return self._t_views[slot]

    def forward(self, bottom, top):
        x, y = bottom[0].data_tensor, top[0].data_tensor
        if not self._bottom_is_matrix:
            x = x.view(self.M, self.K)
        if not self._top_is_matrix:
            y = y.view(self.M, self.num_output)
        w = self.blobs[0].data_tensor
        w = w if self.transpose else self._transposed(0, w)
        if self.bias_term:
            torch.addmm(self.blobs[1].data_tensor, x, w, out=y)
        else:
            torch.mm(x, w, out=y)

    def backward(self, top, propagate_down, bottom):
        dy, x = top[0].diff_tensor, bottom[0].data_tensor
        if not self._top_is_matrix:
            dy = dy.view(self.M, self.num_output)
        if not self._bottom_is_matrix:
            x = x.view(self.M, self.K)
        if self.sufficient_factor_sink is not None:
            self.sufficient_factor_sink(dy, x)
        else:
            if self.param_propagate_down[0]:
                self.accumulate_weight_gradient(dy, x)
            if self.bias_term and self.param_propagate_down[1]:
                self.blobs[1].diff_tensor.add_(dy.sum(dim=0))
        if propagate_down[0]:
            w = self.blobs[0].data_tensor
            dx = bottom[0].diff_tensor
            if not self._bottom_is_matrix:
                dx = dx.view(self.M, self.K)
            torch.mm(dy, self._transposed(0, w) if self.transpose else w, out=dx)

    # ----- sufficient factors (caffe/parallel/syncer.py, SFB) ---------------------------------
    def comm_shape(self, bottom) -> tuple[str, int, int, int]:
        # Note [M, N, K]. The one place the engine's names meet the cost model's. Here, as
        # in Caffe's InnerProductLayer, the GEMM is M rows (the batch, axes before `axis`)
        # × K inputs -> N = num_output outputs, weight N×K. The paper (docs/paper.md §4) and
        # the comm core call the weight M×N (M = outputs, N = inputs) and the batch K.
        # So: cost-model M = our N, cost-model N = our K, cost-model K = our M (per pass;
        # poseidon.plan.layer_specs multiplies by iter_size).
        return ("FC", self.num_output, self.K, self.M)

    def flops(self, bottom, top, bottom_need, param_need) -> tuple[float, float]:
        # Forward: the M×K by K×N GEMM and the bias; backward: dX and dW, each as large,
        # and the bias's column sums, each only where asked for.
        gemm = 2.0 * self.M * self.num_output * self.K
        bias = self.M * self.num_output if self.bias_term else 0
        backward = (gemm if bottom_need[0] else 0) + (gemm if param_need[0] else 0)
        if self.bias_term and param_need[1]:
            backward += bias
        return gemm + bias, backward

    def factor_widths(self) -> tuple[int, int]:
        """Floats per row of the two factors the sink receives: top diff, bottom data."""
        return self.num_output, self.K

    def add_factor_gradients(self, dy: torch.Tensor, x: torch.Tensor, scale: float) -> None:
        """Add scale·dyᵀ·x into the weight diff and scale·Σ dy into the bias diff, where
        dy (R×N) and x (R×K) stack every worker's factors (poseidon/sync/factors.py
        unpacks them): the rebuild GEMM of sufficient-factor broadcasting."""
        if self.param_propagate_down[0]:
            dw = self.blobs[0].diff_tensor
            if self.transpose:
                dw.addmm_(x.t(), dy, alpha=scale)
            else:
                dw.addmm_(dy.t(), x, alpha=scale)
        if self.bias_term and self.param_propagate_down[1]:
            self.blobs[1].diff_tensor.add_(dy.sum(dim=0), alpha=scale)

    def accumulate_weight_gradient(self, dy: torch.Tensor, x: torch.Tensor) -> None:
        """dW += dyᵀ·x (or xᵀ·dy when transposed): the sum of M rank-1 sufficient factors."""
        dw = self.blobs[0].diff_tensor
        if self.transpose:
            dw.addmm_(x.t(), dy)
        else:
            dw.addmm_(self._transposed(1, dy), x)
