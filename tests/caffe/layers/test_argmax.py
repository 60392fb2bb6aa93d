import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import make_layer, run_forward


def ranked(row):
    """Caffe's order: by value descending, equal values by index descending."""
    return sorted(range(len(row)), key=lambda i: (row[i], i), reverse=True)


@pytest.mark.parametrize("shape", [(1, 4), (3, 5), (2, 3, 2), (2, 2, 2, 2)])
@pytest.mark.parametrize("top_k,out_max_val", [(1, False), (3, False), (2, True)])
def test_without_axis_ranks_flattened_items(shape, top_k, out_max_val):
    x = np.random.default_rng(73).integers(0, 3, shape).astype(np.float32)  # ties
    text = (
        f'type: "ArgMax" argmax_param {{ top_k: {top_k} out_max_val: {str(out_max_val).lower()} }}'
    )
    layer, bottom, top = make_layer(text, [x])
    (y,) = run_forward(layer, bottom, top)
    expected_shape = [shape[0], 2 if out_max_val else 1, top_k] + [1] * (len(shape) - 3)
    assert list(y.shape) == expected_shape
    for n, row in enumerate(x.reshape(shape[0], -1)):
        order = ranked(row)[:top_k]
        np.testing.assert_array_equal(y[n, 0].reshape(-1), order)
        if out_max_val:
            np.testing.assert_array_equal(y[n, 1].reshape(-1), row[order])


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("out_max_val", [False, True])
def test_with_axis_ranks_along_it(axis, out_max_val):
    x = np.random.default_rng(74).integers(0, 3, (3, 4, 5)).astype(np.float32)
    text = (
        f'type: "ArgMax" argmax_param {{ top_k: 2 axis: {axis} '
        f"out_max_val: {str(out_max_val).lower()} }}"
    )
    layer, bottom, top = make_layer(text, [x])
    (y,) = run_forward(layer, bottom, top)
    moved = np.moveaxis(x, axis, -1)
    expected = np.empty((*moved.shape[:-1], 2), np.float32)
    for index in np.ndindex(moved.shape[:-1]):
        order = ranked(moved[index])[:2]
        expected[index] = moved[index][order] if out_max_val else order
    np.testing.assert_array_equal(y, np.moveaxis(expected, -1, axis))


def test_top_k_beyond_classes_names_the_layer():
    with pytest.raises(LayerError, match=r"under_test.*top_k"):
        make_layer('type: "ArgMax" argmax_param { top_k: 7 }', [np.zeros((2, 3, 2))])
    with pytest.raises(LayerError, match=r"under_test.*top_k"):
        make_layer('type: "ArgMax" argmax_param { top_k: 4 axis: 1 }', [np.zeros((2, 3, 2))])
