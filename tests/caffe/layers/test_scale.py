import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways
from tests.caffe.layers.test_bias import GEOMETRIES, broadcast

RANDOM = 'filler { type: "uniform" min: -1 max: 1 }'
RANDOM_BIAS = 'bias_filler { type: "uniform" min: -1 max: 1 }'


def text(axis=1, num_axes=1, bias=False):
    return (
        f'type: "Scale" scale_param {{ axis: {axis} num_axes: {num_axes} {RANDOM} '
        f"bias_term: {str(bias).lower()} {RANDOM_BIAS} }}"
    )


@pytest.mark.parametrize("shape,axis,num_axes,operand_shape", GEOMETRIES)
@pytest.mark.parametrize("bias", [False, True])
def test_learned_scale_forward_and_gradient(shape, axis, num_axes, operand_shape, bias):
    x = np.random.default_rng(83).normal(0, 1, shape).astype(np.float32)
    layer, bottom, top = make_layer(text(axis, num_axes, bias), [x])
    assert [tuple(b.shape) for b in layer.blobs] == [operand_shape] * (2 if bias else 1)
    (y,) = run_forward(layer, bottom, top)
    ref = x * broadcast(layer.blobs[0].data, shape, axis)
    if bias:
        ref = ref + broadcast(layer.blobs[1].data, shape, axis)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-7)
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("shape,axis,num_axes,operand_shape", GEOMETRIES)
@pytest.mark.parametrize("bias", [False, True])
def test_scale_from_second_bottom(shape, axis, num_axes, operand_shape, bias):
    rng = np.random.default_rng(84)
    x = rng.normal(0, 1, shape).astype(np.float32)
    s = rng.normal(0, 1, operand_shape).astype(np.float32)
    layer, bottom, top = make_layer(text(axis, num_axes, bias), [x, s])
    assert [tuple(b.shape) for b in layer.blobs] == ([operand_shape] if bias else [])
    (y,) = run_forward(layer, bottom, top)
    ref = x * broadcast(s, shape, axis)
    if bias:
        ref = ref + broadcast(layer.blobs[0].data, shape, axis)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-7)
    check_gradient(layer, bottom, top)


def test_matches_torch_batchnorm_affine_after_normalization():
    # Scale with bias_term over channels is the affine half of torch's BatchNorm2d.
    x = np.random.default_rng(85).normal(0, 1, (2, 3, 2, 2)).astype(np.float32)
    layer, bottom, top = make_layer(text(bias=True), [x])
    (y,) = run_forward(layer, bottom, top)
    gamma = torch.from_numpy(layer.blobs[0].data.copy())
    beta = torch.from_numpy(layer.blobs[1].data.copy())
    ref = torch.addcmul(beta[:, None, None], torch.from_numpy(x), gamma[:, None, None])
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-6, atol=1e-7)


def test_default_fillers_and_in_place():
    layer, _, _ = make_layer('type: "Scale" scale_param { bias_term: true }', [np.ones((2, 3))])
    np.testing.assert_array_equal(layer.blobs[0].data, 1)
    np.testing.assert_array_equal(layer.blobs[1].data, 0)
    x = np.random.default_rng(86).normal(0, 1, (2, 3, 2)).astype(np.float32)
    forward_backward_both_ways(text(bias=True), x)


def test_shape_errors_name_the_layer():
    with pytest.raises(LayerError, match=r"under_test.*does not match"):
        make_layer('type: "Scale"', [np.ones((2, 3)), np.ones((3, 2))])
    layer, bottom, top = make_layer('type: "Scale"', [np.ones((2, 3))])
    bottom[0].reshape(2, 4)
    with pytest.raises(LayerError, match=r"under_test.*does not match"):
        layer.run_forward(bottom, top)
