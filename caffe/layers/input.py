"""Input: tops whose shapes come from input_param; the net's inputs, filled by the caller."""

from __future__ import annotations

from caffe.layer import Layer, register_layer


@register_layer("Input")
class InputLayer(Layer):
    exact_num_bottom = 0
    min_top = 1

    def setup(self, bottom, top):
        shapes = self.layer_param.input_param.shape
        if len(shapes) not in (0, 1, len(top)):
            raise self.error(
                f"input_param.shape must be given once or once per top ({len(shapes)} shapes "
                f"for {len(top)} tops)"
            )
        for i, blob in enumerate(top):
            if shapes:
                blob.reshape(list(shapes[0 if len(shapes) == 1 else i].dim))

    def reshape(self, bottom, top):
        """Input shapes change only when the caller reshapes the blobs."""

    def forward(self, bottom, top):
        """The caller fills the input blobs."""
