import numpy as np
import pytest

from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (2, 3, 4), (1, 3, 2, 5)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_numpy_and_gradient(shape):
    x = np.random.default_rng(0).normal(0, 2, shape).astype(np.float32)
    layer, bottom, top = make_layer('type: "Sigmoid"', [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
    check_gradient(layer, bottom, top)


def test_in_place_matches_out_of_place_and_saturates_cleanly():
    x = np.array([[-100.0, -3.0, 0.0, 2.0, 100.0]], np.float32)
    y, dx = forward_backward_both_ways('type: "Sigmoid"', x)
    assert np.all(np.isfinite(y)) and y[0, 0] == 0.0 and y[0, -1] == 1.0
    assert np.all(np.isfinite(dx))
