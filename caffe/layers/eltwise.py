"""Eltwise: element-wise SUM (with one coefficient per bottom), PROD or MAX of the bottoms.

Backward: SUM scales the top gradient by each coefficient; PROD gives each bottom the
top gradient times the product of the other bottoms (or top / bottom when
stable_prod_grad is false, Caffe's faster but zero-unsafe form, with the top's data at
backward time as Caffe reads it); MAX routes the top
gradient to the bottom that won, ties going as in Caffe's forward (between bottoms 0
and 1 to bottom 1, later ties to the earlier bottom).
"""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer
from caffe.proto import caffe_pb2

Op = caffe_pb2.EltwiseParameter


@register_layer("Eltwise")
class EltwiseLayer(Layer):
    min_bottom = 2
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.eltwise_param
        self.op = p.operation
        if p.coeff and self.op == Op.PROD:
            raise self.error("Eltwise layer only takes coefficients for summation.")
        if p.coeff and len(p.coeff) != len(bottom):
            raise self.error(
                f"Eltwise Layer takes one coefficient per bottom blob ({len(p.coeff)} "
                f"coefficients for {len(bottom)} bottoms)"
            )
        self.coeffs = list(p.coeff) if p.coeff else [1.0] * len(bottom)
        self.stable_prod_grad = p.stable_prod_grad
        self._winner: torch.Tensor | None = None

    def flops(self, bottom, top, bottom_need, param_need) -> tuple[float, float]:
        # One FLOP per bottom element forward; backward one per needed bottom element, two
        # for PROD (its gradient divides or re-multiplies).
        per_bottom = 2 if self.op == Op.PROD else 1
        backward = sum(per_bottom * b.count for b, need in zip(bottom, bottom_need) if need)
        return sum(b.count for b in {id(b): b for b in bottom}.values()), backward

    def backward_reads_input(self) -> bool:
        return self.op != Op.SUM  # SUM's gradient is the top's, scaled

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        for i, blob in enumerate(bottom[1:], start=1):
            if blob.shape != shape:
                raise self.error(f"bottom[{i}] has shape {blob.shape}, bottom[0] has {shape}")
        top[0].reshape(shape)

    def forward(self, bottom, top):
        xs = [blob.data_tensor for blob in bottom]
        y = top[0].data_tensor  # bottom 0's memory when in place
        # PROD's gradient reads the bottoms' data: in place, keep a copy of bottom 0's.
        in_place = top[0] is bottom[0] and self.op == Op.PROD and self.need_backward
        self._first = xs[0].clone() if in_place else None
        if self.op == Op.SUM:
            c = self.coeffs
            if c[0] == 1:
                torch.add(xs[0], xs[1], alpha=c[1], out=y)
            else:
                torch.mul(xs[0], c[0], out=y).add_(xs[1], alpha=c[1])
            for x, coeff in zip(xs[2:], c[2:]):
                y.add_(x, alpha=coeff)
        elif self.op == Op.PROD:
            torch.mul(xs[0], xs[1], out=y)
            for x in xs[2:]:
                y.mul_(x)
        else:
            self._winner = self._max(xs, y)

    @staticmethod
    def _max(xs: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
        """Write the maximum into y; return the winning bottom per element."""
        winner = (xs[0] <= xs[1]).to(torch.uint8)  # strict > keeps bottom 0
        torch.maximum(xs[0], xs[1], out=y)
        for index, x in enumerate(xs[2:], start=2):
            better = x > y
            torch.where(better, x, y, out=y)
            winner = torch.where(better, index, winner).to(torch.uint8)
        return winner

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff_tensor
        # Bottom 0 last: in place its diff is dy's memory, which the others still read.
        for i in reversed(range(len(bottom))):
            blob = bottom[i]
            if not propagate_down[i]:
                continue
            if self.op == Op.SUM:
                if self.coeffs[i] == 1:
                    blob.set_diff(dy)  # a copy (in place: the same memory, nothing to do)
                else:
                    torch.mul(dy, self.coeffs[i], out=blob.diff_tensor)
            elif self.op == Op.PROD:
                torch.mul(dy, self._others_product(bottom, i, top), out=blob.diff_tensor)
            else:
                torch.mul(dy, self._winner == i, out=blob.diff_tensor)

    def _data(self, bottom, j: int) -> torch.Tensor:
        first = getattr(self, "_first", None)
        return first if j == 0 and first is not None else bottom[j].data_tensor

    def _others_product(self, bottom, i: int, top) -> torch.Tensor:
        if not self.stable_prod_grad:
            return top[0].data_tensor / self._data(bottom, i)
        others = [self._data(bottom, j) for j in range(len(bottom)) if j != i]
        if len(others) == 1:
            return others[0]  # only read: the caller multiplies it into the bottom's diff
        product = others[0] * others[1]
        for x in others[2:]:
            product.mul_(x)
        return product
