"""One batch of a data layer, assembled on the decode threads (caffe/data/threads.py).

    batch = assemble_batch(decode, count, transformer, mismatch, pin_memory)

1. every item is decoded in parallel (`decode(i)`: a C×H×W array, any strides);
2. on the calling thread, the items' shapes are checked against the first, and the batch's
   random draws are made (`DataTransformer.draw`, Caffe's order);
3. every item is transformed in parallel straight into its row of the batch, a float32
   (N, C, H', W') tensor allocated once, in pinned memory when the batch goes to a GPU.

The result is the same for any number of threads: step 2 fixes everything random, and each
item is written by exactly one thread.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from caffe.data.threads import parallel_map
from caffe.data.transformer import DataTransformer
from caffe.errors import CaffeError


def assemble_batch(
    decode: Callable[[int], np.ndarray],
    count: int,
    transformer: DataTransformer,
    mismatch: Callable[[int, tuple[int, ...], tuple[int, ...]], CaffeError],
    new_tensor: Callable[[tuple[int, ...]], torch.Tensor] | None = None,
) -> torch.Tensor:
    """The transformed batch of `count` items; `mismatch(i, shape_i, shape_0)` makes the error
    for an item whose shape differs from the batch's first; `new_tensor(shape)` gives the
    float32 batch (BatchLoader.new_tensor: pinned or recycled; default torch.empty)."""
    items = parallel_map(decode, count)
    first = tuple(items[0].shape)
    for i, item in enumerate(items):
        if tuple(item.shape) != first:
            raise mismatch(i, tuple(item.shape), first)
    windows = transformer.draw(count, *first)
    shape = (count, first[0], windows.out_h, windows.out_w)
    out = new_tensor(shape) if new_tensor is not None else torch.empty(shape)
    rows = out.numpy()
    parallel_map(lambda i: transformer.transform_item(items[i], windows, i, rows[i]), count)
    return out
