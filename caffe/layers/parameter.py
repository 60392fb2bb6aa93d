"""Parameter: no bottom; one learnable blob of parameter_param.shape (zeros unless given),
published as the top, data and diff: the top is the parameter (BVLC's ShareData and
ShareDiff), so the gradient a consumer writes into the top is the parameter's gradient, and
a second backward without clearing writes it again rather than adding to it, as in BVLC."""

from __future__ import annotations

from caffe.layer import Layer, register_layer


@register_layer("Parameter")
class ParameterLayer(Layer):
    exact_num_bottom = 0
    exact_num_top = 1

    def setup(self, bottom, top):
        shape = list(self.layer_param.parameter_param.shape.dim)
        if self.blobs:
            if len(self.blobs) != 1 or self.blobs[0].shape != shape:
                got = [b.shape for b in self.blobs]
                raise self.error(f"given blobs have shapes {got}, expected [{shape}]")
        else:
            self.blobs.add_blob(*shape)  # zeros, as a fresh Caffe blob
        top[0].reshape(shape)

    def reshape(self, bottom, top):
        """The shape is fixed at setup."""

    def forward(self, bottom, top):
        # The top is the parameter's memory (Caffe's ShareData and ShareDiff), which the Net
        # moves into its parameter buffers after setup: share both at every forward.
        top[0].share_data(self.blobs[0])
        top[0].share_diff(self.blobs[0])

    def backward(self, top, propagate_down, bottom):
        """Nothing to do: the consumers wrote the gradient into the shared diff."""
