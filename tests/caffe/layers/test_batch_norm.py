import numpy as np
import pytest
from google.protobuf import text_format

import caffe
from caffe.errors import LayerError
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST
SHAPES = [(1, 3), (4, 3), (2, 3, 4), (2, 2, 3, 3), (7,), (1, 2, 1, 2, 3)]


def text(extra=""):
    return f'type: "BatchNorm" batch_norm_param {{ {extra} }}'


def per_channel(x):
    """x as (channels, values) with each channel's N × spatial values in a row."""
    if x.ndim == 1:
        return x.reshape(1, -1)
    return np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)


def normalized(x, mean, var, eps):
    shape = [1, -1] + [1] * (x.ndim - 2) if x.ndim > 1 else [-1]
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)


@pytest.mark.parametrize("shape", SHAPES)
def test_train_normalizes_by_batch_statistics(shape):
    x = np.random.default_rng(40).normal(1.0, 2.0, shape).astype(np.float32)
    layer, bottom, top = make_layer(text(), [x], phase=TRAIN)
    (y,) = run_forward(layer, bottom, top)
    rows = per_channel(x.astype(np.float64))
    ref = normalized(x.astype(np.float64), rows.mean(1), rows.var(1), 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    if rows.shape[1] > 1:
        check_gradient(layer, bottom, top, check_params=False)


def test_moving_statistics_follow_caffes_update():
    rng = np.random.default_rng(41)
    batches = [rng.normal(0, 1, (2, 3, 2)).astype(np.float32) for _ in range(3)]
    layer, bottom, top = make_layer(text("moving_average_fraction: 0.9"), [batches[0]])
    factor, mean_sum, var_sum = 0.0, np.zeros(3), np.zeros(3)
    for batch in batches:
        bottom[0].data[...] = batch
        run_forward(layer, bottom, top)
        rows = per_channel(batch.astype(np.float64))
        m = rows.shape[1]
        factor = factor * 0.9 + 1
        mean_sum = rows.mean(1) + 0.9 * mean_sum
        var_sum = m / (m - 1) * rows.var(1) + 0.9 * var_sum
    np.testing.assert_allclose(layer.blobs[2].data, [factor], rtol=1e-6)
    np.testing.assert_allclose(layer.blobs[0].data, mean_sum, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.blobs[1].data, var_sum, rtol=1e-5, atol=1e-6)


def test_single_value_per_channel_has_no_variance_correction():
    layer, bottom, top = make_layer(text(), [np.array([[1.0, 2.0]], np.float32)])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, 0)  # x − mean is 0 for m = 1
    np.testing.assert_array_equal(layer.blobs[1].data, 0)  # and no m/(m−1) = 1/0


@pytest.mark.parametrize("shape", SHAPES)
def test_global_statistics_divide_by_the_factor(shape):
    x = np.random.default_rng(42).normal(0, 1, shape).astype(np.float32)
    layer, bottom, top = make_layer(text("eps: 0.001"), [x], phase=TEST)
    channels = layer.blobs[0].shape[0]
    mean_sum = np.linspace(-1, 1, channels).astype(np.float32)
    var_sum = np.linspace(0.5, 3, channels).astype(np.float32)
    layer.blobs[0].data[...], layer.blobs[1].data[...] = mean_sum, var_sum
    layer.blobs[2].data[...] = 2.5
    (y,) = run_forward(layer, bottom, top)
    ref = normalized(x.astype(np.float64), mean_sum / 2.5, var_sum / 2.5, 1e-3)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    check_gradient(layer, bottom, top, check_params=False)
    np.testing.assert_array_equal(layer.blobs[2].data, [2.5])  # TEST never updates


def test_zero_factor_means_zero_statistics():
    x = np.array([[1.0, -2.0]], np.float32)
    layer, bottom, top = make_layer(text(), [x], phase=TEST)
    layer.blobs[0].data[...] = 5.0
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, x / np.sqrt(1e-5), rtol=1e-5)


@pytest.mark.parametrize(
    "phase,explicit", [(TRAIN, "use_global_stats: true"), (TEST, "use_global_stats: false")]
)
def test_use_global_stats_overrides_the_phase(phase, explicit):
    x = np.random.default_rng(43).normal(3, 1, (4, 2)).astype(np.float32)
    layer, bottom, top = make_layer(text(explicit), [x], phase=phase)
    (y,) = run_forward(layer, bottom, top)
    batch_stats = phase == TEST
    assert layer.use_global_stats is not batch_stats
    assert bool(abs(y.mean()) < 1e-5) is batch_stats


@pytest.mark.parametrize("phase", [TRAIN, TEST])
def test_in_place_matches_out_of_place(phase):
    x = np.random.default_rng(44).normal(0, 1, (3, 2, 4)).astype(np.float32)
    forward_backward_both_ways(text(), x, phase=phase)


NET = """
layer { name: "in" type: "Input" top: "x" top: "t"
        input_param { shape { dim: 4 dim: 2 } shape { dim: 4 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }
layer { name: "bn" type: "BatchNorm" bottom: "h" top: "h" BN_PARAMS }
layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "t" }
"""


def build_net(bn_params=""):
    param = text_format.Parse(NET.replace("BN_PARAMS", bn_params), caffe_pb2.NetParameter())
    param.state.phase = TRAIN
    return caffe.Net(param)


def test_net_sees_lr_mult_zero_and_statistics_stay_out_of_gradients():
    net = build_net()
    bn = net.layer_by_name("bn")
    assert [spec.lr_mult for spec in bn.layer_param.param] == [0, 0, 0]
    assert bn.param_propagate_down == [False, False, False]
    assert net.params_lr[-3:] == [0, 0, 0]
    net.blobs["x"].data[...] = np.random.default_rng(45).normal(0, 1, (4, 2))
    net.forward()
    net.backward()
    assert np.all(net.params["bn"][2].data == 1.0)  # updated in place in the flat buffer
    for blob in net.params["bn"]:
        np.testing.assert_array_equal(blob.diff, 0)
    assert np.abs(net.params["ip"][0].diff).sum() > 0


def test_explicit_lr_mult_zero_is_kept_and_nonzero_is_refused():
    net = build_net("param { lr_mult: 0 decay_mult: 0 }")
    specs = net.layer_by_name("bn").layer_param.param
    assert [(s.lr_mult, s.decay_mult) for s in specs] == [(0, 0), (0, 1), (0, 1)]
    with pytest.raises(LayerError, match=r"'bn'.*lr_mult"):
        build_net("param { lr_mult: 0 } param { lr_mult: 1 }")


def test_channel_change_names_the_layer():
    layer, bottom, top = make_layer(text(), [np.ones((2, 3), np.float32)])
    bottom[0].reshape(2, 4)
    with pytest.raises(LayerError, match=r"under_test.*channels"):
        layer.run_forward(bottom, top)
