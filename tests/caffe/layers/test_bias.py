import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

RANDOM = 'filler { type: "uniform" min: -1 max: 1 }'
# (bottom shape, axis, num_axes, operand shape)
GEOMETRIES = [((2, 3, 4), 1, 1, (3,)), ((2, 3, 4), 1, -1, (3, 4)), ((2, 3, 4), 0, 2, (2, 3)),
              ((2, 3, 4), -1, 1, (4,)), ((1, 3, 2, 2), 1, 0, ()), ((5,), 0, 1, (5,))]  # fmt: skip


def broadcast(operand, bottom_shape, axis):
    axis = 0 if not operand.shape else axis % len(bottom_shape)
    shape = [1] * axis + list(operand.shape)
    return operand.reshape(shape + [1] * (len(bottom_shape) - len(shape)))


@pytest.mark.parametrize("shape,axis,num_axes,operand_shape", GEOMETRIES)
def test_learned_bias_forward_and_gradient(shape, axis, num_axes, operand_shape):
    x = np.random.default_rng(80).normal(0, 1, shape).astype(np.float32)
    text = f'type: "Bias" bias_param {{ axis: {axis} num_axes: {num_axes} {RANDOM} }}'
    layer, bottom, top = make_layer(text, [x])
    assert tuple(layer.blobs[0].shape) == operand_shape
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, x + broadcast(layer.blobs[0].data, shape, axis), rtol=1e-6)
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("shape,axis,num_axes,operand_shape", GEOMETRIES)
def test_bias_from_second_bottom(shape, axis, num_axes, operand_shape):
    rng = np.random.default_rng(81)
    x = rng.normal(0, 1, shape).astype(np.float32)
    b = rng.normal(0, 1, operand_shape).astype(np.float32)
    layer, bottom, top = make_layer(f'type: "Bias" bias_param {{ axis: {axis} }}', [x, b])
    assert not layer.blobs
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, x + broadcast(b, shape, axis), rtol=1e-6)
    check_gradient(layer, bottom, top)


def test_default_filler_is_zero_and_in_place_works():
    layer, _, _ = make_layer('type: "Bias"', [np.ones((2, 3), np.float32)])
    np.testing.assert_array_equal(layer.blobs[0].data, 0)
    x = np.random.default_rng(82).normal(0, 1, (2, 3, 2)).astype(np.float32)
    forward_backward_both_ways(f'type: "Bias" bias_param {{ {RANDOM} }}', x)


def test_shape_errors_name_the_layer():
    with pytest.raises(LayerError, match=r"under_test.*does not match"):
        make_layer('type: "Bias"', [np.ones((2, 3)), np.ones(4)])
    with pytest.raises(LayerError, match=r"under_test.*extends past"):
        make_layer('type: "Bias" bias_param { axis: 1 num_axes: 3 }', [np.ones((2, 3))])
    with pytest.raises(LayerError, match=r"under_test.*num_axes"):
        make_layer('type: "Bias" bias_param { num_axes: -2 }', [np.ones((2, 3))])
