import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (1, 3, 2, 5)]
TEXT = 'type: "Clip" clip_param { min: -0.75 max: 0.5 }'


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_numpy_and_gradient(shape):
    x = np.random.default_rng(16).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(TEXT, [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, np.clip(x, -0.75, 0.5))
    check_gradient(layer, bottom, top, kink=-0.75, kink_range=0.02)
    check_gradient(layer, bottom, top, kink=0.5, kink_range=0.02)


def test_gradient_passes_at_the_bounds_and_in_place():
    # An input exactly at a bound passes its gradient (Caffe: min ≤ x ≤ max); in place,
    # the output alone could not tell a bound from a clipped value, so x must be kept.
    x = np.array([[-0.75, 0.5, -2.0, 3.0, 0.1]], np.float32)
    _, dx = forward_backward_both_ways(TEXT, x)
    assert np.all(dx[0, [0, 1, 4]] != 0) and np.all(dx[0, [2, 3]] == 0)


@pytest.mark.parametrize(
    "params", ["", "clip_param { min: 0 }", "clip_param { max: 1 }", "clip_param { min: 2 max: 1 }"]
)
def test_missing_or_bad_bounds_name_the_layer(params):
    with pytest.raises(LayerError, match=r"under_test.*clip_param"):
        make_layer(f'type: "Clip" {params}', [np.ones((1, 2), np.float32)])
