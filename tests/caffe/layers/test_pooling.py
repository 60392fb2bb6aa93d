import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda

FLT_MAX = np.float32(3.4028234663852886e38)
FLT_MIN = 1.1754943508222875e-38


def pooled(size, k, s, p, ceil=True, any_pad=None):
    """Caffe's output size, written from the spec."""
    out = int((np.ceil if ceil else np.floor)((size + 2 * p - k) / s)) + 1
    if (p if any_pad is None else any_pad) and (out - 1) * s >= size + p:
        out -= 1
    return out


def reference(x, kernel, stride, pad, method, ceil=True):
    """Caffe's MAX/AVE pooling, loop by loop (returns output and MAX argmax mask)."""
    n, c, h, w = x.shape
    any_pad = any(pad)
    oh = pooled(h, kernel[0], stride[0], pad[0], ceil, any_pad)
    ow = pooled(w, kernel[1], stride[1], pad[1], ceil, any_pad)
    y = np.zeros((n, c, oh, ow), np.float64)
    mask = np.full((n, c, oh, ow), -1.0)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * stride[0] - pad[0], j * stride[1] - pad[1]
            if method == "MAX":
                h1, w1 = min(h0 + kernel[0], h), min(w0 + kernel[1], w)
                h0, w0 = max(h0, 0), max(w0, 0)
                window = x[:, :, h0:h1, w0:w1].reshape(n, c, -1)
                if window.shape[2] == 0:
                    y[:, :, i, j] = -FLT_MAX
                    continue
                first = window.argmax(axis=2)
                y[:, :, i, j] = window.max(axis=2)
                ww = w1 - w0
                mask[:, :, i, j] = (h0 + first // ww) * w + (w0 + first % ww)
            else:
                h1, w1 = min(h0 + kernel[0], h + pad[0]), min(w0 + kernel[1], w + pad[1])
                size = (h1 - h0) * (w1 - w0)
                h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
                total = x[:, :, h0:h1, w0:w1].sum(axis=(2, 3))
                # An unpadded ceil window past the image is empty: Caffe divides 0 by 0
                # there; the engine defines it as 0.
                y[:, :, i, j] = total / size if size > 0 else 0.0
    return y, mask


def distinct(shape, seed=0):
    """Values 0.05 apart in random order: no ties, and no argmax flips under ±0.01."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    return (rng.permutation(count).reshape(shape) * 0.05 - count * 0.025).astype(np.float32)


def pool_text(method="MAX", kernel=None, stride=None, pad=None, extra=""):
    parts = [f"pool: {method}"]
    for name, value in (("kernel", kernel), ("stride", stride), ("pad", pad)):
        if value is None:
            continue
        if isinstance(value, tuple):
            field = "kernel" if name == "kernel" else name
            parts.append(f"{field}_h: {value[0]} {field}_w: {value[1]}")
        else:
            parts.append(f"{'kernel_size' if name == 'kernel' else name}: {value}")
    return f'type: "Pooling" pooling_param {{ {" ".join(parts)} {extra} }}'


def pair(value, default):
    if value is None:
        return (default, default)
    return value if isinstance(value, tuple) else (value, value)


@pytest.mark.parametrize(
    "size,k,s,p,expected",
    [(112, 3, 2, 0, 56), (7, 3, 2, 0, 3), (7, 3, 2, 1, 4), (6, 3, 2, 0, 3), (5, 2, 2, 1, 3),
     (4, 2, 2, 1, 3), (6, 1, 2, 0, 4), (5, 3, 1, 2, 7)],
)  # fmt: skip
@pytest.mark.parametrize("method", ["MAX", "AVE"])
def test_ceil_shapes_and_values_match_caffe(size, k, s, p, expected, method):
    x = distinct((1, 2, size, size), seed=size)
    layer, bottom, top = make_layer(pool_text(method, k, s, p), [x])
    (y,) = run_forward(layer, bottom, top)
    assert y.shape == (1, 2, expected, expected)
    ref, _ = reference(x.astype(np.float64), (k, k), (s, s), (p, p), method)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)


CASES = [
    # (shape, kernel, stride, pad)
    ((2, 1, 7, 7), 3, 2, None),  # ceil extension without padding
    ((1, 2, 7, 6), 3, 2, 1),  # pad, odd sizes, batch 1
    ((2, 1, 5, 5), 3, 2, 2),  # pad > k/2: the explicitly padded path
    ((1, 2, 6, 6), 1, 2, None),  # k < s: unpadded ceil window past the image
    ((2, 1, 7, 6), (1, 3), 1, (0, 1)),  # asymmetric kernel_h/kernel_w with pad_h/pad_w
    ((1, 3, 5, 9), (3, 1), (2, 1), (1, 0)),  # Inception-V3 style 3×1
    ((1, 2, 5, 6), (2, 1), 2, (1, 0)),  # padding on one axis clips both
]


@pytest.mark.parametrize("shape,kernel,stride,pad", CASES)
@pytest.mark.parametrize("method", ["MAX", "AVE"])
def test_forward_and_gradient(shape, kernel, stride, pad, method):
    x = distinct(shape, seed=len(shape) + sum(shape))
    layer, bottom, top = make_layer(pool_text(method, kernel, stride, pad), [x])
    (y,) = run_forward(layer, bottom, top)
    ref, _ = reference(x.astype(np.float64), pair(kernel, 1), pair(stride, 1), pair(pad, 0), method)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)
    # Cases PyTorch's pooling cannot express take the explicitly padded path.
    (kh, kw), (ph, pw) = pair(kernel, 1), pair(pad, 0)
    beyond_torch = ph > kh // 2 or pw > kw // 2 or has_empty_window(shape, kernel, stride, pad)
    assert (layer.explicit_pads is not None) == beyond_torch
    if not (method == "MAX" and has_empty_window(shape, kernel, stride, pad)):
        check_gradient(layer, bottom, top)


def has_empty_window(shape, kernel, stride, pad):
    # MAX outputs -FLT_MAX there, which swamps a finite-difference objective.
    (kh, kw), (sh, sw) = pair(kernel, 1), pair(stride, 1)
    return pad is None and (kh < sh or kw < sw)


@pytest.mark.parametrize("shape,kernel,stride,pad", CASES)
def test_max_mask_top_is_the_flat_argmax(shape, kernel, stride, pad):
    x = distinct(shape, seed=7)
    layer, bottom, top = make_layer(pool_text("MAX", kernel, stride, pad), [x], num_tops=2)
    y, mask = run_forward(layer, bottom, top)
    ref, ref_mask = reference(x.astype(np.float64), pair(kernel, 1), pair(stride, 1),
                              pair(pad, 0), "MAX")  # fmt: skip
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    np.testing.assert_array_equal(mask, ref_mask)


@pytest.mark.parametrize("shape,kernel,stride,pad", CASES)
def test_max_backward_follows_the_mask_top(shape, kernel, stride, pad):
    # BVLC's MAX backward with a mask top reads the mask, not a record of its own: each
    # output's gradient goes into the cell its mask names (hand-computed here, loop by loop),
    # also after a later layer rewrote the mask in place.
    x = distinct(shape, seed=9)
    layer, bottom, top = make_layer(pool_text("MAX", kernel, stride, pad), [x], num_tops=2)
    _, mask = run_forward(layer, bottom, top)
    rewritten = mask.copy()
    rewritten.reshape(-1)[::2] = 0  # every other output now names cell (0, 0) of its plane
    top[1].data[...] = rewritten
    dy = np.random.default_rng(2).standard_normal(mask.shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.run_backward(top, [True], bottom)
    n, c, h, w = x.shape
    expected = np.zeros((n, c, h * w), np.float32)
    for i in range(n):
        for j in range(c):
            for cell, g in zip(rewritten[i, j].reshape(-1), dy[i, j].reshape(-1)):
                if cell >= 0:
                    expected[i, j, int(cell)] += g
    np.testing.assert_allclose(bottom[0].diff, expected.reshape(x.shape), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("method", ["MAX", "AVE"])
def test_floor_round_mode_matches_torch(method):
    x = distinct((2, 1, 7, 8), seed=3)
    text = pool_text(method, 3, 2, 1, extra="round_mode: FLOOR")
    layer, bottom, top = make_layer(text, [x])
    (y,) = run_forward(layer, bottom, top)
    t = torch.from_numpy(x)
    if method == "MAX":
        ref = torch.nn.functional.max_pool2d(t, 3, 2, 1)
    else:
        ref = torch.nn.functional.avg_pool2d(t, 3, 2, 1, count_include_pad=True)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-6)
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("method", ["MAX", "AVE"])
@pytest.mark.parametrize("shape", [(1, 2, 3, 3), (2, 3, 5, 4)])
def test_global_pooling_follows_the_input_size(method, shape):
    x = distinct(shape, seed=11)
    layer, bottom, top = make_layer(pool_text(method, extra="global_pooling: true"), [x])
    (y,) = run_forward(layer, bottom, top)
    ref = x.max(axis=(2, 3)) if method == "MAX" else x.mean(axis=(2, 3))
    np.testing.assert_allclose(y.reshape(ref.shape), ref, rtol=1e-5, atol=1e-6)
    check_gradient(layer, bottom, top)
    bigger = (shape[0], shape[1], shape[2] + 2, shape[3] + 1)
    bottom[0].reshape(bigger)
    bottom[0].data[...] = distinct(bigger, seed=12)
    (y,) = run_forward(layer, bottom, top)
    assert y.shape == (shape[0], shape[1], 1, 1)


def stochastic_windows(x, k, s):
    h, w = x.shape[2:]
    oh, ow = pooled(h, k, s, 0), pooled(w, k, s, 0)
    for i in range(oh):
        for j in range(ow):
            yield i, j, x[:, :, i * s : min(i * s + k, h), j * s : min(j * s + k, w)]


def test_stochastic_test_phase_is_the_activation_weighted_average():
    x = np.random.default_rng(5).uniform(0.1, 1.0, (2, 2, 5, 6)).astype(np.float32)
    text = pool_text("STOCHASTIC", 3, 2)
    layer, bottom, top = make_layer(text, [x], phase=caffe_pb2.TEST)
    (y,) = run_forward(layer, bottom, top)
    ref = np.zeros(y.shape)
    for i, j, window in stochastic_windows(x.astype(np.float64), 3, 2):
        ref[:, :, i, j] = (window**2).sum(axis=(2, 3)) / (window.sum(axis=(2, 3)) + FLT_MIN)
    np.testing.assert_allclose(y, ref, rtol=1e-5)
    check_gradient(layer, bottom, top)


def test_stochastic_train_samples_by_activation_and_routes_the_gradient():
    # 4000 copies of one window holding 1 and 3 (and two zeros, never drawn).
    x = np.tile(np.array([[0, 1], [3, 0]], np.float32), (4000, 1, 1, 1))
    layer, bottom, top = make_layer(pool_text("STOCHASTIC", 2, 2), [x])
    torch.manual_seed(0)
    (y,) = run_forward(layer, bottom, top)
    assert set(np.unique(y)) <= {1.0, 3.0}
    assert abs((y == 3).mean() - 0.75) < 0.03
    top[0].diff[...] = np.arange(4000, dtype=np.float32).reshape(y.shape)
    layer.run_backward(top, [True], bottom)
    dx = bottom[0].diff
    picked_three = (y == 3).reshape(-1)
    np.testing.assert_array_equal(dx[:, 0, 1, 0], np.where(picked_three, np.arange(4000), 0))
    np.testing.assert_array_equal(dx[:, 0, 0, 1], np.where(picked_three, 0, np.arange(4000)))
    assert not dx[:, 0, 0, 0].any() and not dx[:, 0, 1, 1].any()


def test_stochastic_train_draws_from_each_clipped_window():
    x = np.random.default_rng(6).uniform(0.1, 1.0, (1, 2, 5, 5)).astype(np.float32)
    layer, bottom, top = make_layer(pool_text("STOCHASTIC", 3, 2), [x])
    (y,) = run_forward(layer, bottom, top)
    for i, j, window in stochastic_windows(x, 3, 2):
        for c in range(2):
            assert y[0, c, i, j] in window[0, c]


@pytest.mark.parametrize(
    "text,match",
    [
        (pool_text("MAX"), "both kernel_h and kernel_w are required"),
        (pool_text("MAX", 3, extra="kernel_h: 2 kernel_w: 2"), "not both"),
        (pool_text("MAX", 2, extra="global_pooling: true"), "Filter size cannot"),
        (pool_text("AVE", extra="global_pooling: true stride: 2"), "only pad = 0 and stride = 1"),
        (pool_text("MAX", 3, pad=3), "smaller than the kernel"),
        (pool_text("STOCHASTIC", 3, pad=1), "only for average and max"),
        (pool_text("MAX", 3, extra="pad_h: 1"), "pad_h and pad_w are required"),
        (pool_text("MAX", 0), "cannot be zero"),
        (pool_text("MAX", 9), "output would be empty"),
    ],
)
def test_invalid_parameters_name_the_layer(text, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(text, [np.zeros((1, 1, 5, 5), np.float32)])


def test_mask_top_only_for_max_and_4d_input_required():
    with pytest.raises(LayerError, match=r"under_test.*only MAX pooling"):
        make_layer(pool_text("AVE", 2), [np.zeros((1, 1, 4, 4), np.float32)], num_tops=2)
    with pytest.raises(LayerError, match=r"under_test.*4 axes"):
        make_layer(pool_text("MAX", 2), [np.zeros((1, 4, 4), np.float32)])


@needs_cuda
@pytest.mark.parametrize("shape,kernel,stride,pad", CASES)
@pytest.mark.parametrize("method", ["MAX", "AVE"])
def test_cuda_matches_cpu(shape, kernel, stride, pad, method):
    x = distinct(shape, seed=5)
    tops = 2 if method == "MAX" else 1
    assert_cuda_matches_cpu(pool_text(method, kernel, stride, pad), [x], num_tops=tops)


@needs_cuda
def test_cuda_matches_cpu_stochastic_test_phase():
    x = np.random.default_rng(5).uniform(0.1, 1.0, (2, 2, 5, 6)).astype(np.float32)
    assert_cuda_matches_cpu(pool_text("STOCHASTIC", 3, 2), [x], phase=caffe_pb2.TEST)
