import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from caffe.formats.weights_io import write_blobproto
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def reference(x, labels, h, axis, ignore=None, divisor=None):
    prob = np.moveaxis(softmax(x.astype(np.float64), axis), axis, -1).reshape(-1, h.shape[0])
    labels = labels.reshape(-1).astype(int)
    keep = labels != ignore if ignore is not None else np.ones(len(labels), bool)
    rows = h[np.where(keep, labels, 0)]
    per_position = -(rows * np.log(np.maximum(prob, 1e-20))).sum(1) * keep
    return per_position.sum() / (divisor if divisor is not None else keep.sum())


@pytest.fixture
def h_file(tmp_path):
    def write(h):
        path = tmp_path / "H.binaryproto"
        write_blobproto(str(path), h.astype(np.float32))
        return str(path)

    return write


@pytest.mark.parametrize(
    "shape,axis", [((1, 3), 1), ((4, 3), 1), ((2, 3, 2, 2), 1), ((2, 2, 3), 2), ((3, 4), -1)]
)
def test_h_from_source_matches_numpy_and_gradient(h_file, shape, axis):
    rng = np.random.default_rng(60)
    classes = shape[axis]
    x = rng.normal(0, 1, shape).astype(np.float32)
    label_shape = [d for i, d in enumerate(shape) if i != axis % len(shape)]
    labels = rng.integers(0, classes, label_shape).astype(np.float32)
    h = rng.uniform(0, 1, (classes, classes))
    text = f'type: "InfogainLoss" infogain_loss_param {{ source: "{h_file(h)}" axis: {axis} }}'
    layer, bottom, top = make_layer(text, [x, labels.reshape(shape[0], -1)])
    (loss,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(loss, reference(x, labels, h.astype(np.float32), axis), rtol=1e-5)
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_identity_h_equals_softmax_with_loss():
    rng = np.random.default_rng(61)
    x = rng.normal(0, 1, (5, 4)).astype(np.float32)
    labels = rng.integers(0, 4, 5).astype(np.float32)
    h = np.eye(4, dtype=np.float32).reshape(1, 1, 4, 4)
    layer, bottom, top = make_layer('type: "InfogainLoss"', [x, labels, h], num_tops=2)
    loss, prob = run_forward(layer, bottom, top)
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(labels).long())
    np.testing.assert_allclose(loss, ref.numpy(), rtol=1e-5)
    np.testing.assert_allclose(prob, softmax(x, 1), rtol=1e-5)


@pytest.mark.parametrize(
    "mode,divisor", [("VALID", 4), ("FULL", 6), ("BATCH_SIZE", 6), ("NONE", 1)]
)
def test_third_bottom_h_with_ignore_label(mode, divisor):
    rng = np.random.default_rng(62)
    x = rng.normal(0, 1, (6, 3)).astype(np.float32)
    labels = np.array([0, 5, 2, 1, 5, 1], np.float32)  # 5 is ignored
    h = rng.uniform(0, 2, (3, 3)).astype(np.float32)
    text = f'type: "InfogainLoss" loss_param {{ ignore_label: 5 normalization: {mode} }}'
    layer, bottom, top = make_layer(text, [x, labels, h])
    (loss,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(
        loss, reference(x, labels, h, 1, ignore=5, divisor=divisor), rtol=1e-5
    )
    check_gradient(layer, bottom, top, check_bottom=[0])
    assert np.all(bottom[0].diff[[1, 4]] == 0)
    assert not layer.allow_force_backward(2)
    with pytest.raises(LayerError, match=r"under_test.*infogain matrix"):
        layer.run_backward(top, [True, False, True], bottom)


def test_missing_source_bad_file_and_wrong_size_name_the_layer(tmp_path, h_file):
    x, labels = np.zeros((2, 3), np.float32), np.zeros(2, np.float32)
    with pytest.raises(LayerError, match=r"under_test.*source"):
        make_layer('type: "InfogainLoss"', [x, labels])
    missing = tmp_path / "missing.binaryproto"
    with pytest.raises(LayerError, match=rf"under_test.*{missing}"):
        make_layer(
            f'type: "InfogainLoss" infogain_loss_param {{ source: "{missing}" }}', [x, labels]
        )
    with pytest.raises(LayerError, match=r"under_test.*3x3"):
        make_layer(
            f'type: "InfogainLoss" infogain_loss_param {{ source: "{h_file(np.eye(2))}" }}',
            [x, labels],
        )
    with pytest.raises(LayerError, match=r"under_test.*normalize is deprecated"):
        make_layer('type: "InfogainLoss" loss_param { normalize: true }', [x, labels, np.eye(3)])
