import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda


def concat_text(extra=""):
    return f'type: "Concat" concat_param {{ {extra} }}'


# (bottom shapes, concat_param text, numpy axis)
CASES = [
    ([(2, 3, 4, 5), (2, 1, 4, 5), (2, 2, 4, 5)], "", 1),
    ([(1, 2, 3), (4, 2, 3)], "axis: 0", 0),
    ([(2, 3, 1), (2, 3, 4)], "axis: -1", 2),
    ([(2, 3, 2), (2, 5, 2)], "concat_dim: 1", 1),
    ([(3, 2)], "", 1),
]


@pytest.mark.parametrize("shapes,params,axis", CASES)
def test_forward_matches_numpy_and_gradient(shapes, params, axis):
    rng = np.random.default_rng(len(shapes))
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    layer, bottom, top = make_layer(concat_text(params), xs)
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, np.concatenate(xs, axis=axis))
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize(
    "shapes,params,match",
    [
        ([(2, 3), (3, 3)], "", "same shape, except at concat_axis 1"),
        ([(2, 3), (2, 3, 1)], "", "same shape"),
        ([(2, 3), (2, 3)], "axis: 1 concat_dim: 1", "not both"),
        ([(2, 3), (2, 3)], "axis: 2", "concat axis"),
    ],
)
def test_invalid_inputs_name_the_layer(shapes, params, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(concat_text(params), [np.zeros(s, np.float32) for s in shapes])


@needs_cuda
def test_cuda_matches_cpu():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((2, c, 3, 3)).astype(np.float32) for c in (1, 2, 3)]
    assert_cuda_matches_cpu(concat_text(), xs)
