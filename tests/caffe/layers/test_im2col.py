import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda


def data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def im2col_text(params):
    return f'type: "Im2col" convolution_param {{ {params} }}'


def loop_im2col(x, kernel, stride, pad, dilation):
    """The definition, one cell at a time: x (C, *S) -> (C·∏k, *out)."""
    channels, spatial = x.shape[0], x.shape[1:]
    out = [(s + 2 * p - d * (k - 1) - 1) // st + 1
           for s, k, st, p, d in zip(spatial, kernel, stride, pad, dilation)]  # fmt: skip
    cols = np.zeros((channels, *kernel, *out), np.float32)
    for c in range(channels):
        for offsets in itertools.product(*(range(k) for k in kernel)):
            for position in itertools.product(*(range(o) for o in out)):
                source = [o * st - p + i * d for o, st, p, i, d in
                          zip(position, stride, pad, offsets, dilation)]  # fmt: skip
                if all(0 <= s < n for s, n in zip(source, spatial)):
                    cols[(c, *offsets, *position)] = x[(c, *source)]
    return cols.reshape(channels * int(np.prod(kernel)), *out)


def test_bvlc_shape_and_layout():
    # BVLC's Im2colLayerTest: 2×3×6×5, kernel 3, stride 2 -> 2×27×2×2, column c reads
    # channel c // 9 at kernel offset ((c // 3) % 3, c % 3).
    x = data((2, 3, 6, 5))
    layer, bottom, top = make_layer(im2col_text("kernel_size: 3 stride: 2"), [x])
    assert top[0].shape == [2, 27, 2, 2]
    (y,) = run_forward(layer, bottom, top)
    for c in range(27):
        assert y[0, c, 1, 1] == x[0, c // 9, (c // 3) % 3 + 2, c % 3 + 2]


@pytest.mark.parametrize(
    "params,kernel,stride,pad,dilation",
    [
        ("kernel_size: 3 stride: 2 dilation: 3", (3, 3), (2, 2), (0, 0), (3, 3)),
        ("kernel_h: 5 kernel_w: 3 stride: 2 pad_h: 1 pad_w: 2", (5, 3), (2, 2), (1, 2), (1, 1)),
        ("kernel_size: 2 kernel_size: 3 pad: 1 stride: 1 stride: 2", (2, 3), (1, 2), (1, 1),
         (1, 1)),
    ],
)  # fmt: skip
def test_2d_matches_torch_unfold_and_gradient(params, kernel, stride, pad, dilation):
    x = data((2, 3, 9, 8))
    layer, bottom, top = make_layer(im2col_text(params), [x])
    (y,) = run_forward(layer, bottom, top)
    expected = F.unfold(torch.from_numpy(x), kernel, dilation, pad, stride)
    assert y.shape[:2] == expected.shape[:2]
    np.testing.assert_array_equal(y.reshape(expected.shape), expected.numpy())
    small, small_bottom, small_top = make_layer(im2col_text(params), [data((1, 2, 9, 8), 1)])
    check_gradient(small, small_bottom, small_top)


@pytest.mark.parametrize(
    "shape,params,kernel,stride,pad,dilation",
    [
        ((2, 3, 7), "kernel_size: 3 stride: 2 pad: 1", (3,), (2,), (1,), (1,)),
        ((2, 2, 4, 5, 3), "kernel_size: 2 kernel_size: 3 kernel_size: 1 pad: 1 "
         "stride: 2 stride: 1 stride: 1 dilation: 2", (2, 3, 1), (2, 1, 1), (1, 1, 1), (2, 2, 2)),
        ((2, 3, 6, 5), "kernel_size: 3 stride: 2 force_nd_im2col: true", (3, 3), (2, 2), (0, 0),
         (1, 1)),
    ],
)  # fmt: skip
def test_nd_matches_the_definition_and_gradient(shape, params, kernel, stride, pad, dilation):
    x = data(shape)
    layer, bottom, top = make_layer(im2col_text(params), [x])
    (y,) = run_forward(layer, bottom, top)
    for n in range(shape[0]):
        np.testing.assert_array_equal(y[n], loop_im2col(x[n], kernel, stride, pad, dilation))
    check_gradient(layer, bottom, top)


def test_leading_batch_axes_before_the_channel_axis():
    x = data((2, 3, 2, 5, 4))
    layer, bottom, top = make_layer(im2col_text("axis: 2 kernel_size: 2"), [x])
    (y,) = run_forward(layer, bottom, top)
    assert y.shape == (2, 3, 8, 4, 3)
    for i, j in itertools.product(range(2), range(3)):
        np.testing.assert_array_equal(y[i, j], loop_im2col(x[i, j], (2, 2), (1, 1), (0, 0), (1, 1)))


def test_backward_sums_overlapping_patches():
    x = np.zeros((1, 1, 3, 3), np.float32)
    layer, bottom, top = make_layer(im2col_text("kernel_size: 2"), [x])
    layer.run_forward(bottom, top)
    top[0].diff[...] = 1
    layer.run_backward(top, [True], bottom)
    # How many 2×2 windows cover each cell of a 3×3 image.
    np.testing.assert_array_equal(bottom[0].diff[0, 0], [[1, 2, 1], [2, 4, 2], [1, 2, 1]])


@pytest.mark.parametrize(
    "shape,params,match",
    [
        ((2, 3, 4, 4), "stride: 1", "kernel_size must be specified"),
        ((2, 3, 4, 4, 4), "kernel_h: 2 kernel_w: 2", "only be used for 2D"),
        ((2, 3, 4, 4), "kernel_size: 2 kernel_h: 2 kernel_w: 2", "not both"),
        ((2, 3, 4, 4), "kernel_size: 2 stride: 0", "Stride dimensions must be nonzero"),
        ((2, 3, 4, 4), "kernel_size: 5", "output would be empty"),
        ((2, 3), "kernel_size: 1", "at least one spatial axis"),
    ],
)
def test_invalid_parameters_name_the_layer(shape, params, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(im2col_text(params), [np.zeros(shape, np.float32)])


@needs_cuda
def test_cuda_matches_cpu():
    assert_cuda_matches_cpu(im2col_text("kernel_size: 3 stride: 2 pad: 1"), [data((2, 3, 7, 6))])
