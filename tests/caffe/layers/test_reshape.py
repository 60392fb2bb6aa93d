import numpy as np
import pytest
import torch

from caffe.blob import Blob
from caffe.errors import LayerError
from caffe.layer import create_layer
from tests.caffe.layer_harness import check_gradient, layer_param, make_layer, run_forward


def reshape_text(dims, extra=""):
    shape = " ".join(f"dim: {d}" for d in dims)
    return f'type: "Reshape" reshape_param {{ shape {{ {shape} }} {extra} }}'


# (new dims, extra reshape_param text, expected top shape for a (2, 3, 6, 5) bottom)
CASES = [
    ([0, -1], "", [2, 90]),
    ([6, -1], "", [6, 30]),
    ([0, 0, 0, 0], "", [2, 3, 6, 5]),
    ([2, 0, -1, 1], "", [2, 3, 30, 1]),
    ([1, 3], "axis: 1 num_axes: 1", [2, 1, 3, 6, 5]),
    ([], "axis: 1 num_axes: 0", [2, 3, 6, 5]),
    ([1], "axis: -1 num_axes: 0", [2, 3, 6, 5, 1]),
    ([-1], "axis: 2", [2, 3, 30]),
    ([-1], "axis: -3 num_axes: 2", [2, 3, 30]),
    ([0, 2, -1], "axis: -4 num_axes: 2", [2, 3, 2, 3, 5]),
]


@pytest.mark.parametrize("dims,extra,expected", CASES)
def test_shape_rules_and_shared_memory(dims, extra, expected):
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 5)).astype(np.float32)
    layer, bottom, top = make_layer(reshape_text(dims, extra), [x])
    (y,) = run_forward(layer, bottom, top)
    assert list(y.shape) == expected
    np.testing.assert_array_equal(y.reshape(-1), x.reshape(-1))
    assert top[0].data_tensor.data_ptr() == bottom[0].data_tensor.data_ptr()  # no copy
    top[0].diff[...] = np.arange(y.size, dtype=np.float32).reshape(y.shape)
    layer.run_backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff.reshape(-1), np.arange(y.size))


def test_gradient_matches_finite_differences():
    x = np.random.default_rng(1).standard_normal((1, 3, 2)).astype(np.float32)
    layer, bottom, top = make_layer(reshape_text([-1, 2]), [x])
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize(
    "dims,extra,match",
    [
        ([-1, -1], "", "multiple -1"),
        ([-2, 5], "", "only negative"),
        ([0, 0, 0, 0, 0], "", "no axis 4 to copy"),
        ([7, -1], "", "must be divisible"),
        ([2, 3, 6], "", "output count must match"),
        ([1], "axis: 5", "axis 5 out of range"),
        ([1], "axis: 3 num_axes: 2", "exceeds bottom"),
        ([1], "num_axes: -2", "num_axes must be"),
    ],
)
def test_invalid_shapes_name_the_layer(dims, extra, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(reshape_text(dims, extra), [np.zeros((2, 3, 6, 5), np.float32)])


@pytest.mark.parametrize("text", [reshape_text([-1]), 'type: "Flatten"'])
def test_in_place_is_refused(text):
    layer = create_layer(layer_param(text), torch.device("cpu"))
    blob = Blob((2, 3), device=torch.device("cpu"))
    with pytest.raises(LayerError, match=r"under_test.*does not allow in-place"):
        layer.run_setup([blob], [blob])
