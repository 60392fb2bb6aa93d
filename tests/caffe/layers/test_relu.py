import numpy as np
import pytest
import torch

from tests.caffe.layer_harness import check_gradient, make_layer, run_forward


@pytest.mark.parametrize("shape", [(1,), (2, 3), (1, 3, 5, 7), (4, 1, 2, 2)])
@pytest.mark.parametrize("slope", [0.0, 0.01, 0.3])
def test_forward_and_gradient(shape, slope):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(f'type: "ReLU" relu_param {{ negative_slope: {slope} }}', [x])
    (y,) = run_forward(layer, bottom, top)
    ref = torch.nn.functional.leaky_relu(torch.from_numpy(x), slope)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-6)
    check_gradient(layer, bottom, top, kink=0.0, kink_range=0.01)


def test_in_place_backward_uses_output_sign():
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    layer, bottom, top = make_layer('type: "ReLU"', [x])
    top = bottom  # in-place: the top is the bottom blob
    layer.run_forward(bottom, top)
    np.testing.assert_array_equal(bottom[0].data, [[0, 2, 0, 4]])
    bottom[0].diff[...] = 1
    layer.run_backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [[0, 1, 0, 1]])
