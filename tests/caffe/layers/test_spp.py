import numpy as np
import pytest

from caffe.errors import LayerError
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda


def data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def spp_text(height, pool="MAX"):
    return f'type: "SPP" spp_param {{ pyramid_height: {height} pool: {pool} }}'


def reference_level(x, level, average):
    """One pyramid level from its definition: kernel ceil(n / 2^l), stride = kernel, pad
    (kernel·2^l − n + 1) // 2, Caffe's pooled size ceil((n + 2p − k) / k) + 1 less a last
    window starting at >= n + p; a MAX bin is the max of its cells inside the image, an AVE
    bin their sum over the window clipped to [−p, n + p) (Caffe's divisor)."""
    bins = 2**level
    n, c, height, width = x.shape
    axes = []
    for size in (height, width):
        kernel = -(-size // bins)
        pad = (kernel * bins - size + 1) // 2
        count = -(-(size + 2 * pad - kernel) // kernel) + 1
        if pad and (count - 1) * kernel >= size + pad:
            count -= 1
        starts = [i * kernel - pad for i in range(count)]
        axes.append([(s, min(s + kernel, size + pad)) for s in starts])
    out = np.zeros((n, c, len(axes[0]), len(axes[1])), np.float32)
    for i, (top, bottom) in enumerate(axes[0]):
        for j, (left, right) in enumerate(axes[1]):
            cells = x[:, :, max(top, 0) : min(bottom, height), max(left, 0) : min(right, width)]
            if average:
                out[:, :, i, j] = cells.sum(axis=(2, 3)) / ((bottom - top) * (right - left))
            else:
                out[:, :, i, j] = cells.max(axis=(2, 3))
    return out


@pytest.mark.parametrize(
    "shape,height,channels",
    [((2, 3, 9, 8), 3, 63), ((10, 3, 7, 7), 3, 63), ((4, 3, 1024, 765), 5, 1023)],
)
def test_bvlc_output_shapes(shape, height, channels):
    _, _, top = make_layer(spp_text(height), [np.zeros(shape, np.float32)])
    assert top[0].shape == [shape[0], channels]


@pytest.mark.parametrize("pool", ["MAX", "AVE"])
@pytest.mark.parametrize("shape", [(2, 3, 9, 8), (1, 2, 7, 10), (2, 1, 6, 6)])
def test_forward_matches_pooling_by_definition(shape, pool):
    x = data(shape)
    layer, bottom, top = make_layer(spp_text(3, pool), [x])
    (y,) = run_forward(layer, bottom, top)
    levels = [reference_level(x, level, pool == "AVE") for level in range(3)]
    assert [lv.shape[2:] for lv in levels] == [(1, 1), (2, 2), (4, 4)]
    expected = np.concatenate([lv.reshape(shape[0], -1) for lv in levels], axis=1)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pool", ["MAX", "AVE"])
def test_gradient(pool):
    # Distinct values 0.05 apart: a finite-difference step never changes a MAX winner.
    x = np.random.default_rng(1).permutation(168).reshape(2, 2, 6, 7).astype(np.float32) * 0.05
    layer, bottom, top = make_layer(spp_text(3, pool), [x])
    check_gradient(layer, bottom, top)


def test_pyramid_height_1_is_one_global_pooling_with_a_4d_top():
    x = data((2, 3, 5, 4))
    layer, bottom, top = make_layer(spp_text(1), [x])
    assert top[0].shape == [2, 3, 1, 1]
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, x.max(axis=(2, 3), keepdims=True))
    check_gradient(layer, bottom, top)


def test_a_new_input_size_rebuilds_the_levels():
    layer, bottom, top = make_layer(spp_text(2, "AVE"), [data((2, 3, 9, 8))])
    x = data((3, 3, 6, 11), 2)
    bottom[0].reshape(x.shape)
    bottom[0].data[...] = x
    (y,) = run_forward(layer, bottom, top)
    expected = [reference_level(x, level, True).reshape(3, -1) for level in range(2)]
    np.testing.assert_allclose(y, np.concatenate(expected, axis=1), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("phase", [caffe_pb2.TRAIN, caffe_pb2.TEST])
def test_stochastic_levels_sample_in_every_phase(phase):
    # Caffe builds the level poolings without the net's phase: they sample even in TEST.
    x = np.random.default_rng(4).uniform(0.5, 1.5, (2, 3, 8, 8)).astype(np.float32)
    layer, bottom, top = make_layer(spp_text(3, "STOCHASTIC"), [x], phase=phase)
    (y,) = run_forward(layer, bottom, top)
    assert y.shape == (2, 63)
    for n, c in np.ndindex(2, 3):
        assert np.isin(y[n, c], x[n, c]).all()  # level 0: one drawn element, not an average
    top[0].diff[...] = 1
    layer.run_backward(top, [True], bottom)
    assert bottom[0].diff.sum() == pytest.approx(y.size)


@pytest.mark.parametrize(
    "text,shape,match",
    [
        ('type: "SPP"', (2, 3, 4, 4), "pyramid_height must be positive"),
        (spp_text(3), (2, 3, 2, 2), "pyramid level 2 of 3 cannot pool a 2×2 input"),
        (spp_text(2), (2, 3, 4), "must have 4 axes"),
        (spp_text(2, "STOCHASTIC"), (2, 3, 5, 5), "level 1 .*Padding implemented only"),
    ],
)
def test_invalid_parameters_name_the_layer(text, shape, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(text, [np.zeros(shape, np.float32)])


@needs_cuda
def test_cuda_matches_cpu():
    assert_cuda_matches_cpu(spp_text(3, "AVE"), [data((2, 3, 9, 8))])
