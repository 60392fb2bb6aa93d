import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda

TEXT = 'type: "BatchReindex"'


def data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape", [(5, 3, 2), (4,)])
def test_forward_picks_items_and_gradient(shape):
    x = data(shape)
    index = np.array([4, 0, 0, 2.7, 1, 0], np.float32) % shape[0]
    layer, bottom, top = make_layer(TEXT, [x, index])
    assert top[0].shape == [6, *shape[1:]]
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, x[index.astype(np.int64)])
    check_gradient(layer, bottom, top, check_bottom=[0])


def test_backward_sums_repeated_indices_and_zeroes_unpicked_items():
    x = data((4, 3))
    index = np.array([2, 2, 0, 2], np.float32)
    layer, bottom, top = make_layer(TEXT, [x, index])
    layer.run_forward(bottom, top)
    dy = data((4, 3), seed=1)
    top[0].diff[...] = dy
    bottom[0].diff[...] = 7  # must be overwritten
    layer.run_backward(top, [True, False], bottom)
    expected = np.zeros_like(x)
    np.add.at(expected, index.astype(np.int64), dy)
    np.testing.assert_allclose(bottom[0].diff, expected, rtol=1e-6)
    assert not bottom[0].diff[[1, 3]].any()


def test_empty_index_gives_an_empty_top():
    layer, bottom, top = make_layer(TEXT, [data((3, 2)), np.zeros((0,), np.float32)])
    (y,) = run_forward(layer, bottom, top)
    assert y.shape == (0, 2)
    layer.run_backward(top, [True, False], bottom)
    assert not bottom[0].diff.any()


@pytest.mark.parametrize("bad", [-1, 3, np.nan])
def test_index_outside_the_batch_is_an_error(bad):
    layer, bottom, top = make_layer(TEXT, [data((3, 2)), np.array([0, bad], np.float32)])
    with pytest.raises(LayerError, match=r"under_test.*outside the batch \[0, 3\)"):
        layer.run_forward(bottom, top)


def test_index_must_be_1d_and_gets_no_gradient():
    with pytest.raises(LayerError, match="must be 1-D"):
        make_layer(TEXT, [data((3, 2)), np.zeros((2, 1), np.float32)])
    layer, bottom, top = make_layer(TEXT, [data((3, 2)), np.array([1, 0], np.float32)])
    layer.run_forward(bottom, top)
    with pytest.raises(LayerError, match="Cannot backprop to index"):
        layer.run_backward(top, [True, True], bottom)


@needs_cuda
def test_cuda_matches_cpu():
    index = np.array([1, 1, 0, 3], np.float32)
    assert_cuda_matches_cpu(TEXT, [data((4, 2, 3)), index], propagate=[True, False])
