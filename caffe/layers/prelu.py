"""PReLU: y = x for x > 0, a·x otherwise, with a learnable slope per channel (axis 1), or
one scalar slope (shape []) if channel_shared. The slopes start at the filler's values
(default constant 0.25). Backward needs the input's sign and value: in place, where the
blob holds y by then, a copy of the input is kept (as Caffe does)."""

from __future__ import annotations

import torch

from caffe.fillers import fill
from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer
from caffe.proto import caffe_pb2


@register_layer("PReLU")
class PReLULayer(NeuronLayer):
    def setup(self, bottom, top):
        p = self.layer_param.prelu_param
        if bottom[0].num_axes < 2:
            raise self.error(f"bottom must have at least 2 axes (N, C, ...), got shape "
                             f"{bottom[0].shape}")  # fmt: skip
        self.channel_shared = p.channel_shared
        self.channels = bottom[0].shape[1]
        expected = [] if self.channel_shared else [self.channels]
        if self.blobs:
            if len(self.blobs) != 1 or self.blobs[0].shape != expected:
                got = [b.shape for b in self.blobs]
                raise self.error(f"given blobs have shapes {got}, expected [{expected}]")
            return
        filler = p.filler
        if not p.HasField("filler"):
            filler = caffe_pb2.FillerParameter(type="constant", value=0.25)
        fill(self.blobs.add_blob(*expected), filler)

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        if len(shape) < 2 or shape[1] != self.channels:
            raise self.error(f"bottom shape {shape} does not have the {self.channels} channels "
                             "the slopes were set up for")  # fmt: skip
        top[0].reshape(shape)

    def _slope(self, ndim: int) -> torch.Tensor:
        slope = self.blobs[0].data_tensor
        if self.channel_shared:
            return slope
        return slope.view(self.channels, *([1] * (ndim - 2)))

    def activate(self, x, out):
        torch.where(x > 0, x, x * self._slope(x.dim()), out=out)

    def gradient(self, x, y, dy, out):
        torch.where(x > 0, dy, dy * self._slope(x.dim()), out=out)

    def backward(self, top, propagate_down, bottom):
        # The slopes learn even when the bottom needs no gradient (e.g. fed by data); first,
        # as in place the bottom gradient overwrites dy.
        if self.param_propagate_down[0]:
            x, dy = self.kept_tensors(top)[0], top[0].diff_tensor
            contribution = dy * torch.clamp(x, max=0)  # dL/da = Σ dy·x over x ≤ 0
            if self.channel_shared:
                grad = contribution.sum()
            else:
                grad = contribution.sum(dim=[0, *range(2, x.dim())])
            self.blobs[0].diff_tensor.add_(grad)
        super().backward(top, propagate_down, bottom)
