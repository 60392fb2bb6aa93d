import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 3), (2, 3, 4), (1, 2, 3, 3), (2, 3, 1, 2, 2)]
RANDOM_SLOPES = 'filler { type: "uniform" min: -0.5 max: 1.5 }'


def text(shared=False, filler=RANDOM_SLOPES):
    return f'type: "PReLU" prelu_param {{ channel_shared: {str(shared).lower()} {filler} }}'


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("shared", [False, True])
def test_forward_matches_torch_and_gradient(shape, shared):
    x = np.random.default_rng(30).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(text(shared), [x])
    assert layer.blobs[0].shape == ([] if shared else [shape[1]])
    (y,) = run_forward(layer, bottom, top)
    slope = torch.from_numpy(layer.blobs[0].data.copy()).reshape(-1)
    ref = torch.nn.functional.prelu(torch.from_numpy(x), slope)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-6)
    check_gradient(layer, bottom, top, kink=0.0, kink_range=0.02)


def test_default_filler_is_a_quarter():
    layer, bottom, top = make_layer(text(filler=""), [np.full((2, 3), -4.0, np.float32)])
    np.testing.assert_array_equal(layer.blobs[0].data, [0.25] * 3)
    np.testing.assert_array_equal(run_forward(layer, bottom, top)[0], -1.0)


def test_slope_gradient_by_hand():
    # Channel 0 sees x = [-1, 2] with dy = [3, 5]: only x ≤ 0 teaches the slope, dL/da = -3.
    x = np.array([[[-1.0, 2.0], [0.5, -2.0]]], np.float32)
    layer, bottom, top = make_layer(text(filler=""), [x])
    run_forward(layer, bottom, top)
    top[0].diff[...] = [[[3.0, 5.0], [7.0, 11.0]]]
    layer.run_backward(top, [True], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, [-3.0, -22.0])
    np.testing.assert_allclose(bottom[0].diff, [[[0.75, 5.0], [7.0, 2.75]]])


def test_slopes_learn_without_bottom_gradient():
    x = np.array([[-1.0, -2.0]], np.float32)
    layer, bottom, top = make_layer(text(shared=True, filler=""), [x])
    run_forward(layer, bottom, top)
    top[0].diff[...] = 1
    layer.run_backward(top, [False], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, -3.0)


@pytest.mark.parametrize("shared", [False, True])
def test_in_place_matches_out_of_place(shared):
    x = np.random.default_rng(31).standard_normal((2, 3, 4)).astype(np.float32)
    forward_backward_both_ways(text(shared), x)


def test_one_axis_bottom_and_channel_change_name_the_layer():
    with pytest.raises(LayerError, match=r"under_test.*2 axes"):
        make_layer(text(), [np.ones(3, np.float32)])
    layer, bottom, top = make_layer(text(), [np.ones((2, 3), np.float32)])
    bottom[0].reshape(2, 4)
    with pytest.raises(LayerError, match=r"under_test.*3 channels"):
        layer.run_forward(bottom, top)
