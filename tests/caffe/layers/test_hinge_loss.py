import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward


def reference(x, labels, norm):
    flat = x.reshape(len(x), -1).astype(np.float64)
    t = flat.copy()
    t[np.arange(len(x)), labels.astype(int)] *= -1
    margin = np.maximum(0, 1 + t)
    return (margin if norm == "L1" else margin**2).sum() / len(x)


@pytest.mark.parametrize("shape", [(1, 2), (5, 4), (3, 3, 1, 1), (2, 5, 1)])
@pytest.mark.parametrize("norm", ["L1", "L2"])
def test_forward_matches_numpy_and_gradient(shape, norm):
    rng = np.random.default_rng(53)
    x = rng.normal(0, 1, shape).astype(np.float32)
    labels = rng.integers(0, int(np.prod(shape[1:])), shape[0]).astype(np.float32)
    text = f'type: "HingeLoss" hinge_loss_param {{ norm: {norm} }}'
    layer, bottom, top = make_layer(text, [x, labels])
    (loss,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(loss, reference(x, labels, norm), rtol=1e-5)
    # The L1 loss has kinks where a margin is 0, i.e. x = ±1.
    check_gradient(layer, bottom, top, check_bottom=[0], kink=1.0, kink_range=0.02)
    check_gradient(layer, bottom, top, check_bottom=[0], kink=-1.0, kink_range=0.02)


def test_bad_label_and_label_count_name_the_layer():
    layer, bottom, top = make_layer(
        'type: "HingeLoss"', [np.zeros((2, 3), np.float32), np.array([0, 3], np.float32)]
    )
    with pytest.raises(LayerError, match=r"under_test.*label 3"):
        run_forward(layer, bottom, top)
    with pytest.raises(LayerError, match=r"under_test.*one label per item"):
        make_layer(
            'type: "HingeLoss"', [np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32)]
        )
