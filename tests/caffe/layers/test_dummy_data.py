import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from tests.caffe.layer_harness import make_layer, run_forward


def dummy(body, tops):
    return make_layer(f"type: 'DummyData' dummy_data_param {{ {body} }}", [], num_tops=tops)


def test_no_filler_means_constant_zero_shared_shape():
    layer, bottom, top = dummy("shape { dim: 2 dim: 3 }", 2)
    for out in run_forward(layer, bottom, top):
        np.testing.assert_array_equal(out, np.zeros((2, 3), np.float32))


def test_constant_tops_are_filled_once_and_keep_what_the_caller_writes():
    layer, bottom, top = dummy("shape { dim: 4 } data_filler { type: 'constant' value: 3 }", 1)
    np.testing.assert_array_equal(top[0].data, np.full(4, 3, np.float32))
    top[0].data[...] = [1, 2, 3, 4]
    (out,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(out, [1, 2, 3, 4])


def test_random_tops_are_refilled_every_forward():
    body = """shape { dim: 200 dim: 50 } shape { dim: 3 }
        data_filler { type: 'gaussian' mean: 2 std: 0.5 } data_filler { value: 7 }"""
    layer, bottom, top = dummy(body, 2)
    torch.manual_seed(0)
    first, constant = run_forward(layer, bottom, top)
    second, _ = run_forward(layer, bottom, top)
    assert not np.array_equal(first, second)
    assert abs(first.mean() - 2) < 0.02 and abs(first.std() - 0.5) < 0.02
    np.testing.assert_array_equal(constant, [7, 7, 7])


def test_legacy_shape_fields_once_or_per_top():
    body = """num: 2 num: 5 channels: 3 height: 4 width: 1 width: 6
        data_filler { type: 'uniform' min: -1 max: 1 }"""
    layer, bottom, top = dummy(body, 2)
    a, b = run_forward(layer, bottom, top)
    assert a.shape == (2, 3, 4, 1) and b.shape == (5, 3, 4, 6)
    assert a.min() >= -1 and b.max() <= 1 and a.std() > 0


@pytest.mark.parametrize(
    "body,tops,message",
    [
        ("shape { dim: 1 } num: 1 channels: 1 height: 1 width: 1", 1, "Both shape and legacy"),
        ("shape { dim: 1 } shape { dim: 2 }", 3, "once per top"),
        ("num: 1 num: 2 channels: 1 height: 1 width: 1", 3, "num must be specified once"),
        ("shape { dim: 1 } data_filler {} data_filler {}", 3, "fillers must be 0, 1"),
    ],
)
def test_inconsistent_parameters_are_errors(body, tops, message):
    with pytest.raises(LayerError, match=message):
        dummy(body, tops)
