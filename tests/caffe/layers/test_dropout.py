import numpy as np
import pytest
import torch
from google.protobuf import text_format

import caffe
from caffe.errors import LayerError
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def text(ratio=0.5):
    return f'type: "Dropout" dropout_param {{ dropout_ratio: {ratio} }}'


@pytest.mark.parametrize("ratio", [0.5, 0.2, 0.0])
def test_train_output_is_zero_or_scaled_input(ratio):
    x = np.random.default_rng(20).uniform(0.5, 1.5, (64, 50)).astype(np.float32)
    layer, bottom, top = make_layer(text(ratio), [x], phase=TRAIN)
    torch.manual_seed(int(ratio * 100))
    (y,) = run_forward(layer, bottom, top)
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] / (1 - ratio), rtol=1e-6)
    # The kept fraction is Bernoulli(1 − r): within 5 standard deviations of its mean.
    n = x.size
    assert abs(kept.mean() - (1 - ratio)) <= 5 * np.sqrt(ratio * (1 - ratio) / n) + 1e-12


def test_backward_uses_the_forward_mask():
    x = np.random.default_rng(21).uniform(0.5, 1.5, (3, 7)).astype(np.float32)
    layer, bottom, top = make_layer(text(0.4), [x], phase=TRAIN)
    (y,) = run_forward(layer, bottom, top)
    top[0].diff[...] = 1
    layer.run_backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff, (y != 0) / 0.6, rtol=1e-6)
    check_gradient(layer, bottom, top)  # the harness reseeds, so the mask repeats


@pytest.mark.parametrize("shape", [(1, 1), (2, 3, 4)])
def test_test_phase_is_identity_without_aliasing(shape):
    x = np.random.default_rng(22).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(text(0.5), [x], phase=TEST)
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, x)
    top[0].data[...] = 0  # the top is a copy: the bottom is untouched
    np.testing.assert_array_equal(bottom[0].data, x)
    check_gradient(layer, bottom, top)


def test_phase_is_the_layers_own_not_the_nets():
    # In a TRAIN net, a Dropout layer declared with phase: TEST passes its input through.
    net_param = text_format.Parse(
        """
        layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 40 dim: 50 } } }
        layer { name: "own_test" type: "Dropout" bottom: "x" top: "a" phase: TEST }
        layer { name: "net_train" type: "Dropout" bottom: "x" top: "b" }
        """,
        caffe_pb2.NetParameter(),
    )
    net_param.state.phase = TRAIN
    net = caffe.Net(net_param)
    net.blobs["x"].data[...] = 1
    net.forward()
    np.testing.assert_array_equal(net.blobs["a"].data, 1)
    assert set(np.unique(net.blobs["b"].data)) == {0.0, 2.0}


@pytest.mark.parametrize("phase", [TRAIN, TEST])
def test_in_place_matches_out_of_place(phase):
    x = np.random.default_rng(23).standard_normal((5, 6)).astype(np.float32)
    y, dx = forward_backward_both_ways(text(0.3), x, phase=phase)
    if phase == TRAIN:
        assert np.any(y == 0) and np.array_equal(y == 0, dx == 0)


@pytest.mark.parametrize("ratio", [1.0, -0.1])
def test_bad_ratio_names_the_layer(ratio):
    with pytest.raises(LayerError, match=r"under_test.*dropout_ratio"):
        make_layer(text(ratio), [np.ones((1, 2), np.float32)])
