import numpy as np
import pytest

from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 3), (2, 3, 4), (2, 2, 3, 3), (1, 1, 1, 5)]


def text(variance=True, across=False, eps=1e-9):
    return (
        f'type: "MVN" mvn_param {{ normalize_variance: {str(variance).lower()} '
        f"across_channels: {str(across).lower()} eps: {eps} }}"
    )


def reference(x, variance, across, eps):
    x = x.astype(np.float64)
    rows = (
        x.reshape(x.shape[0], -1)
        if across or x.ndim < 2
        else x.reshape(x.shape[0] * x.shape[1], -1)
    )
    centered = rows - rows.mean(1, keepdims=True)
    if variance:
        centered = centered / (np.sqrt((centered**2).mean(1, keepdims=True)) + eps)
    return centered.reshape(x.shape)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "variance,across", [(True, False), (True, True), (False, False), (False, True)]
)
def test_forward_matches_numpy_and_gradient(shape, variance, across):
    x = np.random.default_rng(75).normal(1, 2, shape).astype(np.float32)
    layer, bottom, top = make_layer(text(variance, across), [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, reference(x, variance, across, 1e-9), rtol=1e-4, atol=1e-5)
    row_size = np.prod(shape[1:] if across else shape[2:])
    if not variance or row_size > 2:  # two-value rows normalize to ±1: a flat, kinked map
        check_gradient(layer, bottom, top)


def test_eps_is_added_to_the_standard_deviation():
    x = np.array([[0.0, 2.0]], np.float32)  # mean 1, std 1
    layer, bottom, top = make_layer(text(across=True, eps=1.0), [x])
    np.testing.assert_allclose(run_forward(layer, bottom, top)[0], [[-0.5, 0.5]])


@pytest.mark.parametrize("variance", [True, False])
def test_in_place_matches_out_of_place(variance):
    x = np.random.default_rng(76).normal(0, 1, (2, 3, 4)).astype(np.float32)
    forward_backward_both_ways(text(variance), x)
