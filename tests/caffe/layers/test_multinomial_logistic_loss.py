import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward


@pytest.mark.parametrize("shape", [(1, 2), (5, 4), (3, 4, 1, 1)])
def test_forward_matches_numpy_and_gradient(shape):
    rng = np.random.default_rng(54)
    prob = rng.uniform(0.1, 1.0, shape).astype(np.float32)
    labels = rng.integers(0, shape[1], shape[0]).astype(np.float32)
    layer, bottom, top = make_layer('type: "MultinomialLogisticLoss"', [prob, labels])
    (loss,) = run_forward(layer, bottom, top)
    picked = prob.reshape(shape[0], -1)[np.arange(shape[0]), labels.astype(int)]
    np.testing.assert_allclose(loss, -np.log(picked.astype(np.float64)).sum() / shape[0], rtol=1e-5)
    check_gradient(layer, bottom, top, check_bottom=[0], stepsize=1e-3)


def test_zero_probability_is_clamped():
    prob = np.array([[0.0, 1.0]], np.float32)
    layer, bottom, top = make_layer(
        'type: "MultinomialLogisticLoss"', [prob, np.array([0], np.float32)]
    )
    (loss,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(loss, -np.log(1e-20), rtol=1e-6)
    layer.run_backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].diff, [[-1e20, 0.0]], rtol=1e-6)


def test_label_out_of_range_names_the_layer():
    layer, bottom, top = make_layer(
        'type: "MultinomialLogisticLoss"',
        [np.ones((2, 3), np.float32), np.array([0, -1], np.float32)],
    )
    with pytest.raises(LayerError, match=r"under_test.*label -1"):
        run_forward(layer, bottom, top)
