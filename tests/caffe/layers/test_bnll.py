import numpy as np
import pytest

from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (2, 3, 4), (1, 3, 2, 5)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_numpy_and_gradient(shape):
    x = np.random.default_rng(4).normal(0, 3, shape).astype(np.float32)
    layer, bottom, top = make_layer('type: "BNLL"', [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, np.log1p(np.exp(x.astype(np.float64))), rtol=1e-6)
    check_gradient(layer, bottom, top)


def test_extreme_inputs_do_not_overflow():
    x = np.array([[-200.0, -30.0, 0.0, 30.0, 200.0]], np.float32)
    y, dx = forward_backward_both_ways('type: "BNLL"', x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, np.logaddexp(x64, 0), rtol=1e-6, atol=1e-37)
    dy = np.random.default_rng(11).uniform(-1, 1, x.shape)  # the helper's top diff
    np.testing.assert_allclose(dx, dy / (1 + np.exp(-x64)), rtol=1e-5, atol=1e-30)
