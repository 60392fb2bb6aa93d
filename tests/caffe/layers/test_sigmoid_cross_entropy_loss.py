import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward


def reference_losses(x, t):
    x = x.astype(np.float64)
    p = 1 / (1 + np.exp(-x))
    return -(t * np.log(p) + (1 - t) * np.log(1 - p))


@pytest.mark.parametrize("shape", [(1, 1), (4, 3), (2, 3, 2, 2)])
def test_default_normalization_is_batch_size(shape):
    rng = np.random.default_rng(51)
    x = rng.normal(0, 2, shape).astype(np.float32)
    t = rng.uniform(0, 1, shape).astype(np.float32)  # soft targets are allowed
    layer, bottom, top = make_layer('type: "SigmoidCrossEntropyLoss"', [x, t])
    (loss,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(loss, reference_losses(x, t).sum() / shape[0], rtol=1e-5)
    check_gradient(layer, bottom, top, check_bottom=[0])


@pytest.mark.parametrize(
    "param,divisor",
    [
        ("normalization: FULL", 8),
        ("normalization: VALID", 6),
        ("normalization: BATCH_SIZE", 2),
        ("normalization: NONE", 1),
        ("normalize: true", 6),
        ("normalize: false", 2),
    ],
)
def test_ignore_label_and_normalization_modes(param, divisor):
    x = np.random.default_rng(52).normal(0, 1, (2, 4)).astype(np.float32)
    t = np.array([[1, 0, -1, 1], [0, -1, 0, 1]], np.float32)
    text = f'type: "SigmoidCrossEntropyLoss" loss_param {{ ignore_label: -1 {param} }}'
    layer, bottom, top = make_layer(text, [x, t])
    (loss,) = run_forward(layer, bottom, top)
    keep = t != -1
    np.testing.assert_allclose(loss, reference_losses(x, t)[keep].sum() / divisor, rtol=1e-5)
    check_gradient(layer, bottom, top, check_bottom=[0])
    assert np.all(bottom[0].diff[~keep] == 0)


def test_extreme_logits_stay_finite():
    x = np.array([[-200.0, 200.0, 90.0, -90.0]], np.float32)
    t = np.array([[1.0, 0.0, 1.0, 0.0]], np.float32)
    layer, bottom, top = make_layer('type: "SigmoidCrossEntropyLoss"', [x, t])
    (loss,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(loss, 400.0, rtol=1e-6)
    layer.run_backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].diff, [[-1.0, 1.0, 0.0, 0.0]], atol=1e-30)


def test_label_gradient_and_count_mismatch_name_the_layer():
    layer, bottom, top = make_layer(
        'type: "SigmoidCrossEntropyLoss"',
        [np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)],
    )
    run_forward(layer, bottom, top)
    with pytest.raises(LayerError, match=r"under_test.*cannot backpropagate to label"):
        layer.run_backward(top, [True, True], bottom)
    with pytest.raises(LayerError, match=r"under_test.*same count"):
        make_layer(
            'type: "SigmoidCrossEntropyLoss"',
            [np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32)],
        )
