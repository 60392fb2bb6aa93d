import numpy as np
import pytest

from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (1, 3, 2, 5)]
# (power, scale, shift): general, square, linear, constant (power 0, scale 0), fractional.
CASES = [(0.37, 0.83, 1.2), (2.0, 0.34, -2.4), (1.0, 0.83, -2.4), (0.0, 0.83, -2.4),
         (1.5, 0.0, 2.0), (-0.5, 1.0, 3.0), (3.0, -1.5, 0.0)]  # fmt: skip


def text(power, scale, shift):
    return f'type: "Power" power_param {{ power: {power} scale: {scale} shift: {shift} }}'


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("power,scale,shift", CASES)
def test_forward_matches_numpy_and_gradient(shape, power, scale, shift):
    rng = np.random.default_rng(8)
    x = rng.uniform(0.2, 1.0, shape).astype(np.float32)  # base stays > 0 for real powers
    layer, bottom, top = make_layer(text(power, scale, shift), [x])
    (y,) = run_forward(layer, bottom, top)
    base = shift + scale * x.astype(np.float64)
    assert power == int(power) or base.min() > 0  # real powers of positive bases only
    np.testing.assert_allclose(y, base**power, rtol=2e-5)
    check_gradient(layer, bottom, top)


def test_constant_output_never_reads_the_input():
    x = np.array([[np.inf, -np.inf, np.nan]], np.float32)
    y, dx = forward_backward_both_ways(text(0.0, 2.0, 5.0), x)
    np.testing.assert_array_equal(y, 1.0)
    np.testing.assert_array_equal(dx, 0.0)
    y, _ = forward_backward_both_ways(text(3.0, 0.0, 2.0), x)
    np.testing.assert_array_equal(y, 8.0)


@pytest.mark.parametrize("power,scale,shift", CASES)
def test_in_place_matches_out_of_place(power, scale, shift):
    x = np.random.default_rng(9).uniform(0.2, 1.0, (2, 4)).astype(np.float32)
    forward_backward_both_ways(text(power, abs(scale) or 0.0, abs(shift)), x)
