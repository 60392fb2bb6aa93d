import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward

SHAPES = [((1, 1), (1, 1)), ((5, 3), (5, 3)), ((2, 3, 4), (2, 12)), ((3, 2, 1, 2), (3, 4))]


@pytest.mark.parametrize("shape_a,shape_b", SHAPES)
def test_forward_matches_numpy_and_both_gradients(shape_a, shape_b):
    rng = np.random.default_rng(50)
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    layer, bottom, top = make_layer('type: "EuclideanLoss"', [a, b])
    (loss,) = run_forward(layer, bottom, top)
    diff = a.astype(np.float64).reshape(shape_b) - b
    assert loss.shape == ()
    np.testing.assert_allclose(loss, (diff**2).sum() / (2 * shape_a[0]), rtol=1e-5)
    check_gradient(layer, bottom, top, check_bottom=[0, 1])


def test_loss_weight_scales_gradients_with_opposite_signs():
    a = np.array([[1.0, 2.0]], np.float32)
    b = np.array([[0.0, 4.0]], np.float32)
    layer, bottom, top = make_layer('type: "EuclideanLoss" loss_weight: 3', [a, b])
    run_forward(layer, bottom, top)
    layer.run_backward(top, [True, True], bottom)
    np.testing.assert_allclose(bottom[0].diff, 3 * (a - b))
    np.testing.assert_allclose(bottom[1].diff, -3 * (a - b))
    assert layer.allow_force_backward(1)


def test_dimension_mismatch_names_the_layer():
    with pytest.raises(LayerError, match=r"under_test.*same dimension"):
        make_layer(
            'type: "EuclideanLoss"', [np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)]
        )
