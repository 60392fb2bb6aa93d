import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward


def reference(a, b, y, margin, legacy):
    d2 = ((a.astype(np.float64) - b) ** 2).reshape(len(a), -1).sum(1)
    if legacy:
        far = np.maximum(margin - d2, 0)
    else:
        far = np.maximum(margin - np.sqrt(d2), 0) ** 2
    return np.where(y.astype(int) != 0, d2, far).sum() / (2 * len(a))


@pytest.mark.parametrize("shape", [(1, 2), (6, 3), (4, 2, 1, 1)])
@pytest.mark.parametrize("legacy", [False, True])
def test_forward_matches_numpy_and_gradient(shape, legacy):
    rng = np.random.default_rng(55)
    a = rng.uniform(-0.5, 0.5, shape).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, shape).astype(np.float32)
    y = (rng.uniform(0, 1, shape[0]) > 0.5).astype(np.float32)
    y[0] = 0  # at least one dissimilar pair
    text = (
        f'type: "ContrastiveLoss" contrastive_loss_param {{ margin: 1.2 '
        f"legacy_version: {str(legacy).lower()} }}"
    )
    layer, bottom, top = make_layer(text, [a, b, y])
    (loss,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(loss, reference(a, b, y, 1.2, legacy), rtol=1e-5)
    # Caffe's non-legacy gradient divides by d + 1e-4, so it is 1e-4-relative off.
    check_gradient(layer, bottom, top, check_bottom=[0, 1], threshold=2e-3 if not legacy else 1e-3)


def test_similarity_is_the_integer_part_of_the_label():
    a = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    b = np.zeros((2, 2), np.float32)
    y = np.array([0.7, 1.0], np.float32)  # int(0.7) = 0: dissimilar
    layer, bottom, top = make_layer('type: "ContrastiveLoss"', [a, b, y])
    (loss,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(loss, (0.0 + 1.0) / 4)  # margin 1 − d = 0; similar d² = 1


def test_label_gradient_is_refused_and_shapes_are_checked():
    layer, bottom, top = make_layer(
        'type: "ContrastiveLoss"', [np.ones((2, 3), np.float32)] * 2 + [np.ones(2, np.float32)]
    )
    assert not layer.allow_force_backward(2)
    run_forward(layer, bottom, top)
    with pytest.raises(LayerError, match=r"under_test.*label"):
        layer.run_backward(top, [True, True, True], bottom)
    with pytest.raises(LayerError, match=r"under_test.*differ"):
        make_layer(
            'type: "ContrastiveLoss"',
            [np.ones((2, 3), np.float32), np.ones((2, 4), np.float32), np.ones(2, np.float32)],
        )
