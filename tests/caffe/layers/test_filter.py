import numpy as np
import pytest

from caffe.errors import LayerError, NetError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda

TEXT = 'type: "Filter"'


def data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


SELECTOR = np.array([0, 1, 0, 2.5, -1], np.float32)


@pytest.mark.parametrize("selector_shape", [(5,), (5, 1, 1)])
def test_keeps_selected_items_and_gradient(selector_shape):
    a, b = data((5, 3)), data((5, 2, 2), seed=1)
    layer, bottom, top = make_layer(TEXT, [a, b, SELECTOR.reshape(selector_shape)], num_tops=2)
    # The setup reshape sees no selector data yet: all items, as Caffe.
    assert top[0].shape == [5, 3] and top[1].shape == [5, 2, 2]
    ya, yb = run_forward(layer, bottom, top)
    keep = SELECTOR != 0
    np.testing.assert_array_equal(ya, a[keep])
    np.testing.assert_array_equal(yb, b[keep])
    check_gradient(layer, bottom, top, check_bottom=[0, 1])


def test_backward_copies_diffs_back_and_zeroes_filtered_items():
    a = data((5, 3))
    layer, bottom, top = make_layer(TEXT, [a, SELECTOR])
    layer.run_forward(bottom, top)
    dy = data((3, 3), seed=2)
    top[0].diff[...] = dy
    bottom[0].diff[...] = 9  # must be overwritten
    layer.run_backward(top, [True, False], bottom)
    expected = np.zeros_like(a)
    expected[SELECTOR != 0] = dy
    np.testing.assert_array_equal(bottom[0].diff, expected)


def test_nothing_selected_gives_empty_tops_and_zero_diffs():
    layer, bottom, top = make_layer(TEXT, [data((3, 2)), np.zeros(3, np.float32)])
    (y,) = run_forward(layer, bottom, top)
    assert y.shape == (0, 2)
    bottom[0].diff[...] = 1
    layer.run_backward(top, [True, False], bottom)
    assert not bottom[0].diff.any()


def test_selection_follows_the_selector_at_every_forward():
    layer, bottom, top = make_layer(TEXT, [data((3, 2)), np.ones(3, np.float32)])
    assert run_forward(layer, bottom, top)[0].shape == (3, 2)
    bottom[1].data[...] = [0, 0, 1]
    np.testing.assert_array_equal(run_forward(layer, bottom, top)[0], bottom[0].data[2:])


def test_selector_gets_no_gradient():
    layer, bottom, top = make_layer(TEXT, [data((5, 3)), SELECTOR])
    layer.run_forward(bottom, top)
    with pytest.raises(LayerError, match="cannot backpropagate to filter index inputs"):
        layer.run_backward(top, [True, True], bottom)


@pytest.mark.parametrize(
    "arrays,num_tops,error,match",
    [
        ([data((5, 3)), np.zeros((5, 2), np.float32)], 1, LayerError, "must be singletons"),
        ([data((4, 3)), SELECTOR], 1, LayerError, "same 0th dimension"),
        ([data((5, 3)), data((5, 3)), SELECTOR], 1, LayerError, "one top per filtered bottom"),
        ([SELECTOR], 1, NetError, "at least 2 bottom"),
    ],
)
def test_invalid_inputs_name_the_layer(arrays, num_tops, error, match):
    with pytest.raises(error, match=rf"under_test.*{match}"):
        make_layer(TEXT, arrays, num_tops=num_tops)


@pytest.mark.parametrize("device", [
    "cpu",  # the harness alone: the tops' shapes are known only after the forward
    pytest.param("cuda", marks=needs_cuda),
])  # fmt: skip
def test_cuda_matches_cpu(device):
    assert_cuda_matches_cpu(
        TEXT,
        [data((5, 3)), data((5, 2), 1), SELECTOR],
        num_tops=2,
        propagate=[True, True, False],
        device=device,
    )
