"""Note [convolution workspace] (caffe/layers/_base_conv.py): on CPU a Convolution or
Deconvolution hands its kernels at most WORKSPACE_BYTES of activations per call, whole images
at a time, and gets the very results of one call over the batch."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import caffe.layers._base_conv
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward

FILLERS = 'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.5 }'
SHAPE = (5, 3, 6, 6)  # 5 images of 3×6×6 in, 2×6×6 (or 2×8×8 transposed) out
PARAMS = "num_output: 2 kernel_size: 3 pad: 1"


def image_bytes(kind: str) -> int:
    out = 8 * 8 if kind == "Deconvolution" else 6 * 6
    return 4 * (3 * 6 * 6 + 2 * out)


class KernelBatches(TorchDispatchMode):
    """Records the batch size of every convolution kernel call."""

    def __init__(self):
        super().__init__()
        self.batches: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution.default:
            self.batches.append(args[0].shape[0])
        elif func is torch.ops.aten.convolution_backward.default:
            self.batches.append(args[1].shape[0])
        return func(*args, **(kwargs or {}))


def run(kind: str, xs: list[np.ndarray], budget: int, monkeypatch) -> tuple:
    """Forward and backward of a layer with two bottoms (shared weights) under `budget`:
    tops, bottom diffs, param diffs (after two backwards: they accumulate) and kernel calls."""
    monkeypatch.setattr(caffe.layers._base_conv, "WORKSPACE_BYTES", budget)
    torch.manual_seed(0)
    text = f'type: "{kind}" convolution_param {{ {PARAMS} {FILLERS} }}'
    layer, bottom, top = make_layer(text, xs, num_tops=len(xs))
    with KernelBatches() as calls:
        ys = run_forward(layer, bottom, top)
        for i, blob in enumerate(top):
            blob.diff[...] = np.random.default_rng(i).standard_normal(blob.shape)
        layer.run_backward(top, [True] * len(xs), bottom)
        layer.run_backward(top, [True] * len(xs), bottom)
    return ys, [b.diff.copy() for b in bottom], [b.diff.copy() for b in layer.blobs], calls.batches


@pytest.mark.parametrize("kind", ["Convolution", "Deconvolution"])
def test_calls_of_two_images_give_the_results_of_one_call(kind, monkeypatch):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2)]
    whole = run(kind, xs, 1 << 30, monkeypatch)
    chunked = run(kind, xs, 2 * image_bytes(kind) + 1, monkeypatch)
    assert whole[3] == [5] * 6  # forward: 2 bottoms; backward twice: 2 bottoms each
    assert chunked[3] == [2, 2, 1] * 6
    for ours, one_call in zip(chunked[:3], whole[:3]):
        for a, b in zip(ours, one_call):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * np.abs(b).max())


def test_an_image_larger_than_the_workspace_is_still_one_call(monkeypatch):
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    *_, batches = run("Convolution", [x], 16, monkeypatch)
    assert batches == [1] * 5 * 3  # forward, two backwards


def test_chunked_gradient_matches_finite_differences(monkeypatch):
    monkeypatch.setattr(caffe.layers._base_conv, "WORKSPACE_BYTES", 1)  # one image a call
    x = np.random.default_rng(3).standard_normal((3, 2, 4, 4)).astype(np.float32)
    layer, bottom, top = make_layer(
        f'type: "Convolution" convolution_param {{ {PARAMS} {FILLERS} }}', [x]
    )
    check_gradient(layer, bottom, top)


def test_the_default_workspace_bounds_every_call():
    """20 images of 16×128×128 in and out: 40 MiB of activations, in calls of 16 and 4."""
    x = np.random.default_rng(4).standard_normal((20, 16, 128, 128)).astype(np.float32)
    text = f'type: "Convolution" convolution_param {{ num_output: 16 kernel_size: 1 {FILLERS} }}'
    layer, bottom, top = make_layer(text, [x])
    with KernelBatches() as calls:
        layer.run_forward(bottom, top)
        layer.run_backward(top, [True], bottom)
    per_image = 4 * 16 * 128 * 128 * 2
    assert calls.batches == [16, 4, 16, 4]
    assert max(calls.batches) * per_image <= caffe.layers._base_conv.WORKSPACE_BYTES
