import math

import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (1, 3, 2, 5)]
CASES = [(-1.0, 1.0, 0.0), (-1.0, 0.5, 1.0), (2.0, 1.0, 0.0), (3.0, 0.6, -1.2), (0.5, 2.0, 0.7)]


def text(base, scale, shift):
    return f'type: "Exp" exp_param {{ base: {base} scale: {scale} shift: {shift} }}'


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("base,scale,shift", CASES)
def test_forward_matches_numpy_and_gradient(shape, base, scale, shift):
    x = np.random.default_rng(10).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(text(base, scale, shift), [x])
    (y,) = run_forward(layer, bottom, top)
    b = math.e if base == -1 else base
    np.testing.assert_allclose(y, b ** (shift + scale * x.astype(np.float64)), rtol=1e-5)
    check_gradient(layer, bottom, top)


def test_in_place_matches_out_of_place():
    x = np.random.default_rng(11).standard_normal((3, 4)).astype(np.float32)
    forward_backward_both_ways(text(2.0, 0.6, -1.2), x)


@pytest.mark.parametrize("base", [0.0, -2.0])
def test_non_positive_base_names_the_layer(base):
    with pytest.raises(LayerError, match=r"under_test.*base"):
        make_layer(text(base, 1.0, 0.0), [np.ones((1, 2), np.float32)])
