import numpy as np
import pytest

from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (2, 3, 4), (1, 3, 2, 5)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_numpy_and_gradient(shape):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer('type: "AbsVal"', [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, np.abs(x))
    check_gradient(layer, bottom, top, kink=0.0, kink_range=0.02)


def test_in_place_keeps_the_sign_of_the_input():
    # In place the blob holds |x| by backward time; the sign must come from the kept input.
    x = np.array([[-2.0, 0.0, 3.0, -0.5]], np.float32)
    _, dx = forward_backward_both_ways('type: "AbsVal"', x)
    dy = dx / np.where(x == 0, 1, np.sign(x))
    np.testing.assert_array_equal(np.sign(dx), np.sign(x) * np.sign(dy))
    assert dx[0, 1] == 0
