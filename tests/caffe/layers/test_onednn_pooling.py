"""caffe/layers/_onednn_pooling.py: CPU MAX pooling through oneDNN gives exactly what PyTorch's own
kernel gives (values, the first maximum of a window in row-major order, gradients), inside
the Pooling layer and on its own, with or without the workspace of a training forward."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from caffe.blob import Blob
from caffe.layers._onednn_pooling import OneDnnMaxPool, usable
from tests.caffe.layer_harness import make_layer, run_forward

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN"
)

# (shape, kernel, stride, pad, ceil): the canonical models' windows and odd edges.
GEOMETRIES = [
    ((3, 4, 13, 13), 3, 2, 0, True),  # AlexNet/CIFAR: overlapping, ceil extension
    ((3, 4, 12, 12), 2, 2, 0, True),  # LeNet/VGG: tiling windows
    ((2, 5, 13, 11), 3, 2, 1, True),  # GoogLeNet/ResNet: padded
    ((2, 3, 7, 9), 3, 1, 1, False),  # stride 1, floor
    ((2, 3, 9, 8), (3, 1), (2, 1), (1, 0), True),  # kernel_h != kernel_w
]


def ties(shape, seed):
    """Values from {0, 1, 2}: most windows hold their maximum more than once."""
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 3, shape).astype(np.float32))


def pair(value):
    return value if isinstance(value, tuple) else (value, value)


def torch_pool(x, kernel, stride, pad, ceil, dy):
    xg = x.clone().requires_grad_()
    y = F.max_pool2d(xg, pair(kernel), pair(stride), pair(pad), ceil_mode=ceil)
    y.backward(dy)
    return y.detach(), xg.grad


def pool_through(pool: OneDnnMaxPool, x: torch.Tensor, out_shape, keep: bool, dy=None):
    """Forward (and backward with `dy`) of `pool` between blobs: (y, dx or None)."""
    top, bottom = Blob(out_shape), Blob(x.shape)
    pool.forward(x, top, keep)
    if dy is None:
        return top.data_tensor.clone(), None
    top.diff_tensor.copy_(dy)
    done = pool.backward(top.diff_tensor, bottom)
    return top.data_tensor.clone(), bottom.diff_tensor.clone() if done else None


@pytest.mark.parametrize("shape,kernel,stride,pad,ceil", GEOMETRIES)
@pytest.mark.parametrize("values", ["ties", "distinct", "zeros"])
def test_values_and_gradients_equal_pytorch_kernel(shape, kernel, stride, pad, ceil, values):
    gen = torch.Generator().manual_seed(sum(shape))
    x = {
        "ties": ties(shape, sum(shape)),
        "distinct": torch.randn(shape, generator=gen),
        "zeros": torch.zeros(shape),
    }[values]
    ref_y = F.max_pool2d(x, pair(kernel), pair(stride), pair(pad), ceil_mode=ceil)
    dy = torch.randn(ref_y.shape, generator=gen)
    _, ref_dx = torch_pool(x, kernel, stride, pad, ceil, dy)
    pool = OneDnnMaxPool(pair(kernel), pair(stride), pair(pad), ceil)
    for _ in range(2):  # backward again from the same forward: the winners are kept
        y, dx = pool_through(pool, x, ref_y.shape, keep=True, dy=dy)
        assert torch.equal(y, ref_y)
        # Overlapping windows add up several gradients into one cell, in an order of their own.
        torch.testing.assert_close(dx, ref_dx, rtol=0, atol=1e-6)


def test_a_batch_over_the_workspace_goes_in_chunks(monkeypatch):
    # 5 images of 2·(3·8·8 + 3·4·4) floats; a workspace of two images: chunks 2, 2, 1.
    monkeypatch.setattr("caffe.layers._onednn_pooling.WORKSPACE_BYTES", 2 * 4 * (3 * 64 + 3 * 16))
    x = ties((5, 3, 8, 8), seed=2)
    pool = OneDnnMaxPool((2, 2), (2, 2), (0, 0), True)
    assert pool._chunks(x.shape, (5, 3, 4, 4)) == [(0, 2), (2, 4), (4, 5)]
    dy = torch.randn(5, 3, 4, 4, generator=torch.Generator().manual_seed(3))
    y, dx = pool_through(pool, x, (5, 3, 4, 4), keep=True, dy=dy)
    ref_y, ref_dx = torch_pool(x, 2, 2, 0, True, dy)
    assert len(pool._pooled) == 3
    assert torch.equal(y, ref_y)
    torch.testing.assert_close(dx, ref_dx, rtol=0, atol=0)


def test_without_the_workspace_backward_answers_false():
    x = torch.randn(2, 3, 8, 8)
    pool = OneDnnMaxPool((2, 2), (2, 2), (0, 0), True)
    assert not pool.backward(torch.ones(2, 3, 4, 4), Blob((2, 3, 8, 8)))  # no forward yet
    y, dx = pool_through(pool, x, (2, 3, 4, 4), keep=False, dy=torch.ones(2, 3, 4, 4))
    assert torch.equal(y, F.max_pool2d(x, 2, 2, ceil_mode=True))
    assert dx is None


def test_usable_only_for_float32_cpu_with_onednn_on(monkeypatch):
    assert usable(torch.zeros(1, 1, 2, 2))
    assert not usable(torch.zeros(1, 1, 2, 2, dtype=torch.float64))
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    assert not usable(torch.zeros(1, 1, 2, 2))


def layer_with(text_kernel: str, x: np.ndarray, need_backward: bool):
    text = f'type: "Pooling" pooling_param {{ pool: MAX {text_kernel} }}'
    layer, bottom, top = make_layer(text, [x])
    layer.need_backward = need_backward
    return layer, bottom, top


@pytest.mark.parametrize("need_backward", [True, False])
def test_the_layer_pools_with_onednn_and_routes_gradients_like_pytorch(need_backward):
    # Without need_backward (a TEST net) the forward keeps no workspace; a backward called
    # anyway finds the winners with PyTorch's kernel and must agree.
    x = ties((2, 3, 11, 11), seed=4).numpy()
    layer, bottom, top = layer_with("kernel_size: 3 stride: 2", x, need_backward)
    (y,) = run_forward(layer, bottom, top)
    assert layer._pooled_by_onednn
    dy = np.random.default_rng(5).standard_normal(y.shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.run_backward(top, [True], bottom)
    ref_y, ref_dx = torch_pool(torch.from_numpy(x), 3, 2, 0, True, torch.from_numpy(dy))
    np.testing.assert_array_equal(y, ref_y.numpy())
    np.testing.assert_allclose(bottom[0].diff, ref_dx.numpy(), rtol=0, atol=1e-6)


def test_a_mask_top_keeps_pytorch_kernel():
    x = ties((1, 2, 6, 6), seed=6).numpy()
    text = 'type: "Pooling" pooling_param { pool: MAX kernel_size: 2 stride: 2 }'
    layer, bottom, top = make_layer(text, [x], num_tops=2)
    run_forward(layer, bottom, top)
    assert not layer._pooled_by_onednn and layer._onednn is None


# ----- AVE (Note [AVE divisor]) -----------------------------------------------------------
AVE_GEOMETRIES = [  # (shape, kernel, stride, pad, oneDNN's include-padding or None)
    ((3, 4, 16, 16), 3, 2, 0, False),  # CIFAR-10 quick: ceil windows hang past the image
    ((3, 4, 8, 8), 3, 2, 0, False),
    ((2, 5, 7, 7), 7, 1, 0, False),  # global-like
    ((2, 3, 9, 9), 3, 1, 1, True),  # Inception: padded, every window in the padded input
    ((2, 3, 10, 10), 3, 2, 1, None),  # padded and hanging past it: neither rule is Caffe's
]


def caffe_ave(x: np.ndarray, k: int, s: int, p: int) -> np.ndarray:
    """Caffe's AVE forward: each window's sum over the image, divided by the window clipped
    to the padded input; ceil-mode output size."""
    n, c, h, w = x.shape
    oh, ow = (-(-(h + 2 * p - k) // s) + 1, -(-(w + 2 * p - k) // s) + 1)
    oh -= (oh - 1) * s >= h + p
    ow -= (ow - 1) * s >= w + p
    y = np.zeros((n, c, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s - p, j * s - p
            h1, w1 = min(h0 + k, h + p), min(w0 + k, w + p)
            size = (h1 - h0) * (w1 - w0)
            window = x[:, :, max(h0, 0) : min(h1, h), max(w0, 0) : min(w1, w)]
            y[:, :, i, j] = window.sum(axis=(2, 3)) / size
    return y.astype(np.float32)


@pytest.mark.parametrize("shape,kernel,stride,pad,include", AVE_GEOMETRIES)
def test_ave_through_onednn_divides_as_caffe(shape, kernel, stride, pad, include):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    text = (f'type: "Pooling" pooling_param {{ pool: AVE kernel_size: {kernel} '
            f"stride: {stride} pad: {pad} }}")  # fmt: skip
    layer, bottom, top = make_layer(text, [x])
    (y,) = run_forward(layer, bottom, top)
    assert layer._ave_include_padding is include
    np.testing.assert_allclose(y, caffe_ave(x, kernel, stride, pad), rtol=1e-5, atol=1e-6)
    # Backward stays PyTorch's kernel (Caffe's rule): each cell gets dy / divisor per window.
    dy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.run_backward(top, [True], bottom)
    xt = torch.from_numpy(x).requires_grad_()
    ref = F.avg_pool2d(xt, kernel, stride, pad, ceil_mode=True, count_include_pad=True)
    ref.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(bottom[0].diff, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_ave_over_the_workspace_goes_in_chunks(monkeypatch):
    monkeypatch.setattr("caffe.layers._onednn_pooling.WORKSPACE_BYTES", 2 * 4 * (4 * 256 + 4 * 64))
    x = np.random.default_rng(7).standard_normal((5, 4, 16, 16)).astype(np.float32)
    text = 'type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 }'
    layer, bottom, top = make_layer(text, [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, caffe_ave(x, 3, 2, 0), rtol=1e-5, atol=1e-6)
