"""Eltwise: element-wise SUM (with one coefficient per bottom), PROD or MAX of the bottoms.

Backward: SUM scales the top gradient by each coefficient; PROD gives each bottom the
top gradient times the product of the other bottoms (or top / bottom when
stable_prod_grad is false, Caffe's faster but zero-unsafe form); MAX routes the top
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

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        for i, blob in enumerate(bottom[1:], start=1):
            if blob.shape != shape:
                raise self.error(f"bottom[{i}] has shape {blob.shape}, bottom[0] has {shape}")
        top[0].reshape(shape)

    def forward(self, bottom, top):
        xs = [blob.data_tensor for blob in bottom]
        if self.op == Op.SUM:
            c = self.coeffs
            y = torch.add(xs[0] if c[0] == 1 else xs[0] * c[0], xs[1], alpha=c[1])
            for x, coeff in zip(xs[2:], c[2:]):
                y.add_(x, alpha=coeff)
        elif self.op == Op.PROD:
            y = xs[0] * xs[1]
            for x in xs[2:]:
                y.mul_(x)
        else:
            y, winner = self._max(xs)
            self._winner = winner
        top[0].set_data(y)

    @staticmethod
    def _max(xs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        winner = (xs[0] <= xs[1]).to(torch.uint8)  # strict > keeps bottom 0
        y = torch.maximum(xs[0], xs[1])
        for index, x in enumerate(xs[2:], start=2):
            better = x > y
            y = torch.where(better, x, y)
            winner = torch.where(better, index, winner).to(torch.uint8)
        return y, winner

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff_tensor
        for i, (blob, down) in enumerate(zip(bottom, propagate_down)):
            if not down:
                continue
            if self.op == Op.SUM:
                # A coefficient of 1 passes the top's gradient through without a copy.
                blob.set_diff(dy if self.coeffs[i] == 1 else dy * self.coeffs[i])
            elif self.op == Op.PROD:
                blob.set_diff(dy * self._others_product(bottom, i, top))
            else:
                blob.set_diff(dy * (self._winner == i))

    def _others_product(self, bottom, i: int, top) -> torch.Tensor:
        if not self.stable_prod_grad:
            return top[0].data_tensor / bottom[i].data_tensor
        others = [blob.data_tensor for j, blob in enumerate(bottom) if j != i]
        if len(others) == 1:
            return others[0]  # only read: the caller multiplies into a new tensor
        product = others[0] * others[1]
        for x in others[2:]:
            product.mul_(x)
        return product
