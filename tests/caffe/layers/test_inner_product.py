import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward

SHAPES = [((1, 3), 1), ((2, 3, 4, 5), 1), ((5, 7), 1), ((3, 2, 5), 2), ((2, 3, 4), -1)]


def ip_text(num_output, axis=1, transpose=False, bias=True):
    return f"""type: "InnerProduct" inner_product_param {{ num_output: {num_output} axis: {axis}
        transpose: {str(transpose).lower()} bias_term: {str(bias).lower()}
        weight_filler {{ type: "gaussian" std: 0.5 }}
        bias_filler {{ type: "uniform" min: -1 max: 1 }} }}"""


@pytest.mark.parametrize("shape,axis", SHAPES)
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_matches_torch(shape, axis, transpose, bias):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(ip_text(3, axis, transpose, bias), [x])
    (y,) = run_forward(layer, bottom, top)
    w = torch.from_numpy(layer.blobs[0].data.copy())
    if transpose:
        w = w.t()
    ax = axis % len(shape)
    flat = torch.from_numpy(x).reshape(int(np.prod(shape[:ax])), -1)
    ref = torch.nn.functional.linear(
        flat, w, torch.from_numpy(layer.blobs[1].data) if bias else None
    )
    assert y.shape == (*tuple(shape[:ax]), 3)
    np.testing.assert_allclose(y.reshape(ref.shape), ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,axis", SHAPES[:4])
@pytest.mark.parametrize("transpose", [False, True])
def test_gradient(shape, axis, transpose):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(ip_text(4, axis, transpose), [x])
    assert check_gradient(layer, bottom, top) > 0


def test_param_gradients_accumulate():
    x = np.ones((2, 3), np.float32)
    layer, bottom, top = make_layer(ip_text(2), [x])
    run_forward(layer, bottom, top)
    top[0].diff[...] = 1
    layer.run_backward(top, [True], bottom)
    once = layer.blobs[0].diff.copy()
    layer.run_backward(top, [True], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * once)


def test_input_size_change_is_an_error_naming_the_layer():
    layer, bottom, top = make_layer(ip_text(2), [np.ones((2, 3), np.float32)])
    bottom[0].reshape(2, 4)
    with pytest.raises(LayerError, match="under_test"):
        layer.run_forward(bottom, top)


@pytest.mark.parametrize("transpose", [False, True])
def test_comm_shape_in_the_cost_models_names(transpose):
    # Note [M, N, K]: 3 × 2 rows of 5 inputs to 4 outputs is, for the cost model, a 4×5
    # weight (M outputs × N inputs) and K = 6 rows, whichever way the weight is stored.
    x = np.zeros((3, 2, 5), np.float32)
    layer, bottom, _ = make_layer(ip_text(4, axis=2, transpose=transpose), [x])
    assert layer.comm_shape(bottom) == ("FC", 4, 5, 6)  # (kind, m, n, rows)
