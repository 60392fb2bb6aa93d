import math

import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (1, 3, 2, 5)]
CASES = [(-1.0, 1.0, 0.0), (-1.0, 0.5, 1.0), (2.0, 1.0, 0.0), (3.0, 0.6, 0.4), (0.5, 2.0, 0.7)]


def text(base, scale, shift):
    return f'type: "Log" log_param {{ base: {base} scale: {scale} shift: {shift} }}'


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("base,scale,shift", CASES)
def test_forward_matches_numpy_and_gradient(shape, base, scale, shift):
    x = np.random.default_rng(12).uniform(0.5, 2.0, shape).astype(np.float32)
    layer, bottom, top = make_layer(text(base, scale, shift), [x])
    (y,) = run_forward(layer, bottom, top)
    b = math.e if base == -1 else base
    np.testing.assert_allclose(
        y, np.log(shift + scale * x.astype(np.float64)) / np.log(b), rtol=1e-5, atol=1e-6
    )
    check_gradient(layer, bottom, top)


def test_in_place_keeps_the_input():
    x = np.random.default_rng(13).uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    _, dx = forward_backward_both_ways(text(3.0, 0.6, 0.4), x)
    dy = np.random.default_rng(11).uniform(-1, 1, x.shape)  # the helper's top diff
    np.testing.assert_allclose(dx, dy * 0.6 / (np.log(3.0) * (0.4 + 0.6 * x)), rtol=1e-5)


def test_non_positive_base_names_the_layer():
    with pytest.raises(LayerError, match=r"under_test.*base"):
        make_layer(text(-3.0, 1.0, 0.0), [np.ones((1, 2), np.float32)])
