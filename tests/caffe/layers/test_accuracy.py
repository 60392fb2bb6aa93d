import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import make_layer, run_forward


def reference(scores, labels, top_k, axis=1, ignore=None):
    """Caffe's rule by loops: correct iff fewer than top_k other classes score ≥ the label's."""
    moved = np.moveaxis(scores, axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    labels = labels.reshape(-1).astype(int)
    classes = flat.shape[1]
    correct = seen = 0
    per_class_hits, per_class_seen = np.zeros(classes), np.zeros(classes)
    for row, label in zip(flat, labels):
        if label == ignore:
            continue
        rivals = sum(1 for k in range(classes) if k != label and row[k] >= row[label])
        hit = rivals < top_k
        correct += hit
        seen += 1
        per_class_hits[label] += hit
        per_class_seen[label] += 1
    per_class = np.divide(
        per_class_hits, per_class_seen, out=np.zeros(classes), where=per_class_seen > 0
    )
    return (correct / seen if seen else 0.0), per_class


@pytest.mark.parametrize(
    "shape,axis", [((1, 3), 1), ((7, 5), 1), ((2, 4, 3, 2), 1), ((3, 2, 6), 2)]
)
@pytest.mark.parametrize("top_k", [1, 2])
def test_matches_the_reference_with_per_class_top(shape, axis, top_k):
    rng = np.random.default_rng(72)
    scores = rng.integers(0, 4, shape).astype(np.float32)  # many ties on purpose
    label_shape = [d for i, d in enumerate(shape) if i != axis]
    labels = rng.integers(0, shape[axis], label_shape).astype(np.float32)
    text = f'type: "Accuracy" accuracy_param {{ top_k: {top_k} axis: {axis} }}'
    layer, bottom, top = make_layer(text, [scores, labels], num_tops=2)
    accuracy, per_class = run_forward(layer, bottom, top)
    ref_accuracy, ref_per_class = reference(scores, labels, top_k, axis)
    assert accuracy.shape == () and per_class.shape == (shape[axis],)
    np.testing.assert_allclose(accuracy, ref_accuracy, rtol=1e-6)
    np.testing.assert_allclose(per_class, ref_per_class, rtol=1e-6)


def test_ties_count_against_the_true_class():
    scores = np.array([[1.0, 1.0, 0.0], [2.0, 1.0, 2.0], [0.0, 3.0, 1.0]], np.float32)
    labels = np.array([0, 2, 1], np.float32)
    layer, bottom, top = make_layer('type: "Accuracy"', [scores, labels])
    np.testing.assert_allclose(run_forward(layer, bottom, top)[0], 1 / 3, rtol=1e-6)
    layer, bottom, top = make_layer(
        'type: "Accuracy" accuracy_param { top_k: 2 }', [scores, labels]
    )
    np.testing.assert_allclose(run_forward(layer, bottom, top)[0], 1.0)


def test_ignore_label_skips_positions():
    scores = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], np.float32)
    labels = np.array([1, 9, 1], np.float32)
    text = 'type: "Accuracy" accuracy_param { ignore_label: 9 }'
    layer, bottom, top = make_layer(text, [scores, labels], num_tops=2)
    accuracy, per_class = run_forward(layer, bottom, top)
    np.testing.assert_allclose(accuracy, 0.5)
    np.testing.assert_allclose(per_class, [0.0, 0.5])
    bottom[1].data[...] = 9
    np.testing.assert_array_equal(run_forward(layer, bottom, top)[0], 0.0)  # nothing counted


def test_errors_name_the_layer():
    scores = np.zeros((2, 3), np.float32)
    with pytest.raises(LayerError, match=r"under_test.*top_k"):
        make_layer('type: "Accuracy" accuracy_param { top_k: 4 }', [scores, np.zeros(2)])
    with pytest.raises(LayerError, match=r"under_test.*number of labels"):
        make_layer('type: "Accuracy"', [scores, np.zeros(3)])
    layer, bottom, top = make_layer('type: "Accuracy"', [scores, np.array([0.0, 3.0])])
    with pytest.raises(LayerError, match=r"under_test.*label 3"):
        run_forward(layer, bottom, top)
    assert not layer.allow_force_backward(0)
    with pytest.raises(LayerError, match=r"under_test.*no backward"):
        layer.run_backward(top, [True, False], bottom)
