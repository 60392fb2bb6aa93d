import numpy as np
import pytest

from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (2, 3, 4), (1, 3, 2, 5)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_numpy_and_gradient(shape):
    x = np.random.default_rng(1).normal(0, 1.5, shape).astype(np.float32)
    layer, bottom, top = make_layer('type: "TanH"', [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64)), rtol=1e-6, atol=1e-7)
    check_gradient(layer, bottom, top)


def test_in_place_matches_out_of_place():
    x = np.random.default_rng(2).normal(0, 2, (3, 4)).astype(np.float32)
    _, dx = forward_backward_both_ways('type: "TanH"', x)
    assert np.abs(dx).max() > 0
