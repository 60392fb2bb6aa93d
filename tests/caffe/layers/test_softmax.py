import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize(
    "shape,axis",
    [((1, 1), 1), ((2, 5), 1), ((2, 3, 2, 3), 1), ((3, 2, 4), 2), ((3, 4), 0), ((2, 3, 2), -1)],
)
def test_forward_matches_numpy_and_gradient(shape, axis):
    x = np.random.default_rng(70).normal(0, 2, shape).astype(np.float32)
    layer, bottom, top = make_layer(f'type: "Softmax" softmax_param {{ axis: {axis} }}', [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, softmax(x.astype(np.float64), axis), rtol=1e-5, atol=1e-7)
    check_gradient(layer, bottom, top)


def test_large_scores_are_max_subtracted():
    x = np.array([[1000.0, 1001.0, 999.0]], np.float32)
    layer, bottom, top = make_layer('type: "Softmax"', [x])
    (y,) = run_forward(layer, bottom, top)
    ref = torch.softmax(torch.tensor([[1.0, 2.0, 0.0]]), 1).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-6)


def test_in_place_matches_out_of_place():
    x = np.random.default_rng(71).normal(0, 1, (3, 4, 2)).astype(np.float32)
    forward_backward_both_ways('type: "Softmax"', x)


def test_bad_axis_names_the_layer():
    with pytest.raises(LayerError, match=r"under_test.*axis"):
        make_layer('type: "Softmax" softmax_param { axis: 3 }', [np.ones((2, 3), np.float32)])
