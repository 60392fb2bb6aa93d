"""The caffe.io.Transformer that Classifier and Detector set up for a net's first input.

Both take the same preprocessing arguments (pycaffe's): images arrive H×W×K in [0, 1] and
reach the net K×H×W, channel-swapped, ×raw_scale, −mean, ×input_scale.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caffe.errors import CaffeError
from caffe.io import Transformer
from caffe.net import Net


def input_transformer(
    net: Net,
    mean: np.ndarray | None = None,
    input_scale: float | None = None,
    raw_scale: float | None = None,
    channel_swap: Sequence[int] | None = None,
) -> Transformer:
    """A Transformer for `net.inputs[0]` with the (2, 0, 1) transpose and the given steps.

    A step left as None is skipped, so an argument of None means "not part of preprocessing".
    """
    if not net.inputs:
        raise CaffeError(f"net '{net.name}' has no input blobs: give it an Input layer")
    in_ = net.inputs[0]
    shape = net.blobs[in_].data.shape
    if len(shape) != 4:
        raise CaffeError(f"input '{in_}' of net '{net.name}' is {shape}, not N×K×H×W images")
    if channel_swap is not None and not all(0 <= int(c) < shape[1] for c in channel_swap):
        raise CaffeError(
            f"channel_swap {list(channel_swap)} names channels outside 0..{shape[1] - 1}"
        )
    transformer = Transformer({in_: shape})
    transformer.set_transpose(in_, (2, 0, 1))
    steps = (
        ("mean", transformer.set_mean, mean),
        ("input_scale", transformer.set_input_scale, input_scale),
        ("raw_scale", transformer.set_raw_scale, raw_scale),
        ("channel_swap", transformer.set_channel_swap, channel_swap),
    )
    for name, setter, value in steps:
        if value is None:
            continue
        try:
            setter(in_, value)
        except Exception as e:
            # pycaffe's setters raise bare Exception (or ValueError) for a value that does not
            # fit the input; say which argument it was, as a CaffeError the tools report.
            raise CaffeError(f"{name} does not fit input '{in_}' {shape}: {e}") from None
    return transformer
