import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward


def text(extra=""):
    return f'type: "SoftmaxWithLoss" {extra}'


@pytest.mark.parametrize("shape", [(1, 3), (5, 4), (2, 3, 2, 3)])
def test_forward_matches_torch_cross_entropy(shape):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    label_shape = (shape[0], *tuple(shape[2:]))
    labels = rng.integers(0, shape[1], label_shape).astype(np.float32)
    layer, bottom, top = make_layer(text(), [x, labels])
    (loss,) = run_forward(layer, bottom, top)
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(labels).long())
    assert loss.shape == ()
    np.testing.assert_allclose(loss, ref.numpy(), rtol=1e-5)
    check_gradient(layer, bottom, top, check_bottom=[0])


@pytest.mark.parametrize(
    "mode,divisor", [("FULL", 6), ("VALID", 4), ("BATCH_SIZE", 6), ("NONE", 1)]
)
def test_normalization_modes_with_ignore_label(mode, divisor):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    labels = np.array([0, 1, 0, 1, 1, 0], np.float32)
    labels[[1, 4]] = 2  # the ignored label
    extra = f"loss_param {{ ignore_label: 2 normalization: {mode} }}"
    layer, bottom, top = make_layer(text(extra), [x, labels])
    (loss,) = run_forward(layer, bottom, top)
    logp = torch.log_softmax(torch.from_numpy(x), 1)
    keep = labels != 2
    total = -logp[torch.arange(6), torch.from_numpy(labels).long()][torch.from_numpy(keep)].sum()
    np.testing.assert_allclose(loss, total.numpy() / divisor, rtol=1e-5)
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_probability_top_and_loss_weight_in_diff():
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    layer, bottom, top = make_layer(text(), [x, np.array([1, 3], np.float32)], num_tops=2)
    _, prob = run_forward(layer, bottom, top)
    np.testing.assert_allclose(prob, torch.softmax(torch.from_numpy(x), 1).numpy(), rtol=1e-5)
    assert top[0].diff == 1.0  # the default loss weight lives in the loss top's diff


def test_label_out_of_range_names_the_layer():
    layer, bottom, top = make_layer(text(), [np.zeros((2, 3), np.float32), np.array([0, 7.0])])
    with pytest.raises(LayerError, match=r"under_test.*label 7"):
        layer.run_forward(bottom, top)


def test_cannot_backpropagate_to_labels():
    layer, bottom, top = make_layer(text(), [np.zeros((2, 3), np.float32), np.array([0, 1.0])])
    layer.run_forward(bottom, top)
    with pytest.raises(LayerError, match="cannot backpropagate to label"):
        layer.run_backward(top, [True, True], bottom)
