import numpy as np
import pytest

from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (1, 3, 2, 5)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beta", [1.0, 1.5, 0.0, -0.5])
def test_forward_matches_numpy_and_gradient(shape, beta):
    x = np.random.default_rng(14).normal(0, 2, shape).astype(np.float32)
    layer, bottom, top = make_layer(f'type: "Swish" swish_param {{ beta: {beta} }}', [x])
    (y,) = run_forward(layer, bottom, top)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, x64 / (1 + np.exp(-beta * x64)), rtol=1e-5, atol=1e-7)
    check_gradient(layer, bottom, top)


def test_in_place_matches_out_of_place():
    x = np.random.default_rng(15).normal(0, 2, (3, 4)).astype(np.float32)
    forward_backward_both_ways('type: "Swish" swish_param { beta: 1.5 }', x)
