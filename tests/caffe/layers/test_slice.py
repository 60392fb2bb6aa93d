import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda


def slice_text(extra=""):
    return f'type: "Slice" slice_param {{ {extra} }}'


# (bottom shape, slice_param text, number of tops, numpy axis, numpy split points)
CASES = [
    ((2, 6, 3), "", 3, 1, [2, 4]),
    ((2, 6, 3), "slice_point: 1 slice_point: 5", 3, 1, [1, 5]),
    ((5, 2), "axis: 0 slice_point: 3", 2, 0, [3]),
    ((2, 3, 4), "axis: -1", 2, 2, [2]),
    ((4, 3), "slice_dim: 0", 2, 0, [2]),
    ((1, 3), "", 1, 1, []),
]


@pytest.mark.parametrize("shape,params,tops,axis,points", CASES)
def test_forward_matches_numpy_and_gradient(shape, params, tops, axis, points):
    x = np.random.default_rng(tops).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(slice_text(params), [x], num_tops=tops)
    ys = run_forward(layer, bottom, top)
    for y, ref in zip(ys, np.split(x, points, axis=axis), strict=True):
        np.testing.assert_array_equal(y, ref)
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize(
    "params,tops,match",
    [
        ("", 4, "should evenly divide input slice axis"),
        ("slice_point: 2", 3, "one fewer slice_point than tops"),
        ("slice_point: 3 slice_point: 2", 3, "strictly increasing"),
        ("slice_point: 6", 2, "strictly increasing"),
        ("axis: 1 slice_dim: 1", 2, "not both"),
    ],
)
def test_invalid_parameters_name_the_layer(params, tops, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(slice_text(params), [np.zeros((2, 6), np.float32)], num_tops=tops)


@needs_cuda
def test_cuda_matches_cpu():
    x = np.random.default_rng(2).standard_normal((2, 6, 3)).astype(np.float32)
    assert_cuda_matches_cpu(slice_text("slice_point: 1 slice_point: 5"), [x], num_tops=3)
