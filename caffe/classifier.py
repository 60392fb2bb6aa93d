"""pycaffe's caffe.Classifier: a Net that classifies H×W×K images, optionally over 10 crops.

Each image is resized to `image_dims`, then cut to the net's input size (`crop_dims`): either
the 4 corners, the centre and their mirrors (oversample, predictions averaged per image) or
the centre alone. The crops go through the input Transformer and forward_all in net batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from caffe import io
from caffe.errors import CaffeError
from caffe.input_transformer import input_transformer
from caffe.net import Net
from caffe.proto import caffe_pb2

_CROPS_PER_IMAGE = 10  # caffe.io.oversample: 4 corners + centre, and their mirrors


class Classifier(Net):
    """A TEST-phase net with preprocessing for its first input (see caffe.io.Transformer).

    `image_dims` (H, W) is the size images are resized to before cropping; it defaults to
    the input blob's H×W (`crop_dims`), which is the size of each crop.
    """

    def __init__(
        self,
        model_file: str,
        pretrained_file: str,
        image_dims: Sequence[int] | None = None,
        mean: np.ndarray | None = None,
        input_scale: float | None = None,
        raw_scale: float | None = None,
        channel_swap: Sequence[int] | None = None,
    ) -> None:
        Net.__init__(self, model_file, caffe_pb2.TEST, weights=pretrained_file)
        self.transformer = input_transformer(self, mean, input_scale, raw_scale, channel_swap)
        in_ = self.inputs[0]
        self.crop_dims = np.array(self.blobs[in_].data.shape[2:])
        self.image_dims = self.crop_dims if image_dims is None else _image_dims(image_dims)
        if np.any(self.image_dims < self.crop_dims):
            raise CaffeError(
                f"image_dims {tuple(self.image_dims.tolist())} are smaller than the net "
                f"input {tuple(self.crop_dims.tolist())}: crops of the input size would not fit"
            )

    def predict(self, inputs: Iterable[np.ndarray], oversample: bool = True) -> np.ndarray:
        """Class scores of each H×W×K image: (N, classes), or the first output's raw
        per-crop shape when not oversampling. Oversampling averages the 10 crops of an image.
        """
        images = self._resized(inputs)
        if oversample:
            crops = io.oversample(images, self.crop_dims)
        else:
            # The centre crop, placed as caffe.io.oversample places its centre crop.
            top, left = (self.image_dims / 2.0 - self.crop_dims / 2.0).astype(int)
            height, width = self.crop_dims
            crops = images[:, top : top + height, left : left + width, :]
        in_ = self.inputs[0]
        caffe_in = np.zeros((len(crops), *self.blobs[in_].data.shape[1:]), dtype=np.float32)
        for ix, crop in enumerate(crops):
            caffe_in[ix] = self.transformer.preprocess(in_, crop)
        predictions = self.forward_all(**{in_: caffe_in})[self.outputs[0]]
        if oversample:
            predictions = predictions.reshape(len(images), _CROPS_PER_IMAGE, -1).mean(axis=1)
        return predictions

    def _resized(self, inputs: Iterable[np.ndarray]) -> np.ndarray:
        """Every image resized to image_dims, as one (N, H, W, K) float32 array."""
        images = [np.asarray(image) for image in inputs]
        if not images:
            raise CaffeError("Classifier.predict: no input images (inputs is empty)")
        channels = self.blobs[self.inputs[0]].data.shape[1]
        for ix, image in enumerate(images):
            if image.ndim != 3 or image.shape[2] != channels:
                raise CaffeError(
                    f"Classifier.predict: input {ix} has shape {image.shape}; "
                    f"expected an H×W×{channels} image (the net input has {channels} channels)"
                )
        resized = np.zeros((len(images), *self.image_dims, channels), dtype=np.float32)
        for ix, image in enumerate(images):
            resized[ix] = io.resize_image(image, self.image_dims)
        return resized


def _image_dims(dims: Sequence[int]) -> np.ndarray:
    values = np.asarray(dims)
    if values.shape != (2,) or np.any(values <= 0) or np.any(values != values.astype(int)):
        raise CaffeError(f"image_dims must be two positive integers (height, width), got {dims}")
    return values.astype(int)
