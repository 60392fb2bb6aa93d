import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward


def flatten_text(extra=""):
    return f'type: "Flatten" flatten_param {{ {extra} }}'


# (bottom shape, flatten_param text, expected top shape)
CASES = [
    ((2, 3, 6, 5), "", (2, 90)),
    ((2, 3, 6, 5), "axis: 2", (2, 3, 30)),
    ((2, 3, 6, 5), "axis: 1 end_axis: 2", (2, 18, 5)),
    ((2, 3, 6, 5), "axis: 0 end_axis: -2", (36, 5)),
    ((1, 3), "axis: 1", (1, 3)),
    ((4,), "axis: 0", (4,)),
]


@pytest.mark.parametrize("shape,params,expected", CASES)
def test_shape_values_and_shared_memory(shape, params, expected):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(flatten_text(params), [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, x.reshape(expected))
    assert top[0].data_tensor.data_ptr() == bottom[0].data_tensor.data_ptr()  # no copy
    top[0].diff[...] = np.arange(y.size, dtype=np.float32).reshape(y.shape)
    layer.run_backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.arange(y.size).reshape(shape))


def test_gradient_matches_finite_differences():
    x = np.random.default_rng(1).standard_normal((2, 3, 2)).astype(np.float32)
    layer, bottom, top = make_layer(flatten_text(), [x])
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize(
    "params,match", [("axis: 4", "flatten_param"), ("axis: 2 end_axis: 1", "comes before axis")]
)
def test_invalid_axes_name_the_layer(params, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(flatten_text(params), [np.zeros((2, 3, 4), np.float32)])
