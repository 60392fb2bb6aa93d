"""caffe.coord_map: each layer's map by hand, their composition, and crops checked on real
nets (a hot pixel must land where the computed crop says)."""

import math

import numpy as np
import pytest

import caffe
from caffe import layers as L
from caffe import params as P
from caffe.coord_map import (
    AxisMismatchException,
    CropError,
    UndefinedMapException,
    compose,
    coord_map,
    coord_map_from_to,
    crop,
    inverse,
)
from caffe.errors import LayerError


def data(shape=(1, 1, 16, 16)):
    return L.Input(shape=dict(dim=list(shape)))


def apply(coord_map_, x):
    _, a, b = coord_map_
    return a * x + b


# --- one layer at a time -------------------------------------------------------------


def test_convolution_map_is_window_centre_over_stride():
    # kernel 5 dilated by 2 spans 9 pixels; output y's window starts at 2y - 1, centre 2y + 3.
    fn = L.Convolution(data(), kernel_size=5, dilation=2, stride=2, pad=1, num_output=1).fn
    assert coord_map(fn) == (1, 0.5, (1 - 4) / 2)
    for y in range(4):
        assert apply(coord_map(fn), 2 * y - 1 + 4) == y


def test_convolution_axis_and_h_w_forms():
    fn = L.Convolution(data(), kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, num_output=1).fn
    assert coord_map(fn) == (1, 0.5, -0.5)
    fn = L.Convolution(data(), kernel_size=[3, 3, 3], pad=[1, 1, 1], axis=2, num_output=1).fn
    assert coord_map(fn) == (2, 1.0, 0.0)


def test_spatial_axes_may_differ_and_then_map_one_by_one():
    # pycaffe's test_rect: a 3x5 kernel maps like a 3x3 on H and a 5x5 on W.
    fn = L.Convolution(data(), num_output=1, kernel_size=[3, 5], stride=[1, 2], pad=[0, 10]).fn
    axis, a, b = coord_map(fn)
    assert axis == 1
    np.testing.assert_array_equal(a, [1.0, 0.5])
    np.testing.assert_array_equal(b, [-1.0, 4.0])
    square = L.Convolution(data(), num_output=1, kernel_size=5, stride=2, pad=10).fn
    assert coord_map(square) == (1, 0.5, 4.0)
    # One axis differing in b alone still gives one entry per axis for a and b.
    _, a, b = coord_map(L.Convolution(data(), kernel_size=3, pad_h=1, pad_w=0, num_output=1).fn)
    np.testing.assert_array_equal(a, [1.0, 1.0])
    np.testing.assert_array_equal(b, [0.0, -1.0])


def test_three_spatial_axes():
    # pycaffe's test_nd_conv: per-axis pads survive a pooling and a deconvolution.
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[2, 3, 20, 20, 20]))
    n.conv = L.Convolution(n.data, num_output=1, kernel_size=[3, 3, 3], pad=[0, 1, 2])
    n.pool = L.Pooling(n.conv, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.deconv = L.Deconvolution(n.pool, num_output=1, kernel_size=4, stride=2)
    # conv: xc = x + p - 1; pool then deconv: xd = 2 (xc/2 - 1/4) + 3/2 = xc + 1 = x + p.
    axis, a, b = coord_map_from_to(n.deconv, n.data)
    assert axis == 1 and len(a) == len(b) == 3
    np.testing.assert_array_equal(a, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(b, [0.0, -1.0, -2.0])


def test_spatial_axis_counts_must_agree():
    fn = L.Convolution(data(), num_output=1, name="conv7", kernel_size=[3, 5, 7], stride=[1, 2]).fn
    with pytest.raises(LayerError, match=r"'conv7': kernel_size \[3, 5, 7\], stride \[1, 2\]"):
        coord_map(fn)
    with pytest.raises(AxisMismatchException, match="over 2 and 3 spatial axes"):
        compose((1, np.array([1.0, 2.0]), 0.0), (1, 1.0, np.array([0.0, 1.0, 2.0])))


def test_pooling_map():
    fn = L.Pooling(data(), pool=P.Pooling.MAX, kernel_size=3, stride=2, pad=1).fn
    assert coord_map(fn) == (1, 0.5, 0.0)
    fn = L.Pooling(data(), pool=P.Pooling.AVE, kernel_size=2, stride=2).fn
    assert coord_map(fn) == (1, 0.5, -0.25)
    with pytest.raises(UndefinedMapException, match="global pooling"):
        coord_map(L.Pooling(data(), global_pooling=True).fn)


def test_deconvolution_is_the_inverse_of_the_same_convolution():
    settings = dict(num_output=1, kernel_size=4, stride=2, pad=1)
    deconv = coord_map(L.Deconvolution(data(), convolution_param=settings).fn)
    conv = coord_map(L.Convolution(data(), **settings).fn)
    assert deconv == (1, 2.0, 0.5)
    assert deconv == inverse(conv)
    # pycaffe writes the convolution fields flat, as for a Convolution.
    assert coord_map(L.Deconvolution(data(), **settings).fn) == deconv


def test_crop_map_and_offsets():
    a, b = data(), data((1, 1, 8, 8))
    assert coord_map(L.Crop(a, b, axis=2, offset=[3]).fn) == (1, 1.0, -3.0)
    assert coord_map(L.Crop(a, b, offset=[2, 2]).fn) == (1, 1.0, -2.0)  # default axis 2
    assert coord_map(L.Crop(a, b, axis=3).fn) == (2, 1.0, 0.0)
    axis, scale, shift = coord_map(L.Crop(a, b, offset=[1, 2]).fn)
    assert axis == 1
    np.testing.assert_array_equal(scale, [1.0, 1.0])
    np.testing.assert_array_equal(shift, [-1.0, -2.0])


@pytest.mark.parametrize(
    "make",
    [
        lambda x: L.ReLU(x),
        lambda x: L.BatchNorm(x),
        lambda x: L.Scale(x, bias_term=True),
        lambda x: L.Dropout(x, dropout_ratio=0.5),
        lambda x: L.LRN(x, local_size=5),
        lambda x: L.Eltwise(x, x),
        lambda x: L.Concat(x, x),
        lambda x: L.Softmax(x),
        lambda x: L.Split(x, ntop=2)[1],
    ],
)
def test_pass_through_layers_keep_coordinates(make):
    assert coord_map(make(data()).fn) == (None, 1.0, 0.0)


def test_other_layers_have_no_map():
    with pytest.raises(UndefinedMapException, match="InnerProduct"):
        coord_map(L.InnerProduct(data(), num_output=3).fn)
    with pytest.raises(UndefinedMapException, match="Concat along axis 2"):
        coord_map(L.Concat(data(), data(), axis=2).fn)
    # pycaffe's coord_map_from_to raises RuntimeError for tops no spatial chain connects.
    assert issubclass(UndefinedMapException, RuntimeError)
    with pytest.raises(RuntimeError, match="InnerProduct"):
        coord_map_from_to(L.InnerProduct(fcn().up, num_output=3), fcn().data)


# --- composition ---------------------------------------------------------------------


def test_compose_is_base_after_next_and_inverse_undoes_it():
    base, nxt = (1, 0.5, -0.25), (1, 2.0, 1.5)
    composed = compose(base, nxt)
    for x in (-3.0, 0.0, 7.5):
        assert apply(composed, x) == apply(base, apply(nxt, x))
        assert math.isclose(apply(inverse(composed), apply(composed, x)), x)
    assert compose((None, 1.0, 0.0), (2, 0.5, 1.0)) == (2, 0.5, 1.0)
    assert compose((2, 0.5, 1.0), (None, 1.0, 0.0)) == (2, 0.5, 1.0)
    with pytest.raises(AxisMismatchException):
        compose((1, 1.0, 0.0), (2, 1.0, 0.0))


def fcn(pad=4):
    """data -> conv(3, pad) -> relu (in place) -> max pool(2, 2) -> deconv(4, 2)."""
    n = caffe.NetSpec()
    n.data = data()
    n.conv1 = L.Convolution(n.data, kernel_size=3, pad=pad, num_output=1, bias_term=False)
    n.relu1 = L.ReLU(n.conv1, in_place=True)
    n.pool1 = L.Pooling(n.relu1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.up = L.Deconvolution(
        n.pool1, convolution_param=dict(num_output=1, kernel_size=4, stride=2, bias_term=False)
    )
    return n


def test_coord_map_from_to_composes_the_chain_by_hand():
    n = fcn()
    # conv: x1 = x + 3; pool: xp = x1/2 - 1/4; deconv: xu = 2 xp + 3/2 = x + 4.
    assert coord_map_from_to(n.up, n.data) == (1, 1.0, -4.0)
    assert coord_map_from_to(n.data, n.up) == (1, 1.0, 4.0)
    assert coord_map_from_to(n.pool1, n.data) == (1, 2.0, -2.5)
    assert coord_map_from_to(n.relu1, n.conv1) == (None, 1.0, 0.0)


def test_common_ancestor_may_be_a_middle_top():
    n = fcn()
    n.skip = L.Convolution(n.pool1, kernel_size=1, num_output=1)
    # up and skip meet at pool1: xu = 2 xp + 3/2 and xs = xp.
    assert coord_map_from_to(n.up, n.skip) == (1, 0.5, -0.75)


def test_layers_beyond_the_common_ancestor_need_no_map():
    d = data()
    flat = L.Reshape(L.InnerProduct(d, num_output=64), shape=dict(dim=[1, 1, 8, 8]))
    padded = L.Convolution(flat, kernel_size=3, pad=2, num_output=1)
    assert coord_map_from_to(padded, flat) == (1, 1.0, -1.0)
    with pytest.raises(UndefinedMapException, match="Reshape"):
        coord_map_from_to(padded, d)


def test_no_common_ancestor_names_both_tops():
    message = "top 0 of Input layer and top 0 of ReLU layer have no common ancestor"
    with pytest.raises(RuntimeError, match=message):
        coord_map_from_to(data(), L.ReLU(data()))


def test_crop_builds_the_aligning_crop_layer():
    n = fcn()
    n.score = crop(n.up, n.data)
    layer = n.to_proto().layer[-1]
    assert layer.type == "Crop" and list(layer.bottom) == ["up", "data"]
    assert layer.crop_param.axis == 2 and list(layer.crop_param.offset) == [4]


def test_crop_refuses_scales_and_positive_offsets():
    n = fcn()
    with pytest.raises(ValueError, match=r"x_to = 2 \* x_from - 2.5; .* differ in scale"):
        crop(n.pool1, n.data)
    with pytest.raises(ValueError, match=r"x_to = 1 \* x_from \+ 4; .* b <= 0"):
        crop(n.data, n.up)
    odd = L.Convolution(n.data, kernel_size=2, num_output=1)  # centre at +1/2
    with pytest.raises(ValueError, match="integral"):
        crop(odd, n.data)
    # pycaffe states these as asserts; its callers catch AssertionError.
    with pytest.raises(AssertionError, match="differ in scale"):
        crop(n.pool1, n.data)
    rect = L.Convolution(n.data, kernel_size=[3, 5], pad=[2, 0], num_output=1)
    with pytest.raises(CropError, match=r"x_to = \[1, 1\] \* x_from \+ \[-1, 2\]; .* b <= 0"):
        crop(rect, n.data)


# --- crops on real nets --------------------------------------------------------------


def instantiate(n, tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(str(n.to_proto()))
    return caffe.Net(str(path), caffe.TEST)


def centre_tap(blob):
    """Weights that copy the input pixel under the kernel's centre (an identity filter)."""
    weights = np.zeros(blob.data.shape, np.float32)
    weights[..., blob.data.shape[-2] // 2, blob.data.shape[-1] // 2] = 1
    blob.data[...] = weights


def respond(net, y, x, out="score"):
    image = np.zeros(net.blobs["data"].data.shape, np.float32)
    image[0, 0, y, x] = 1
    return {tuple(p) for p in np.argwhere(net.forward(data=image)[out][0, 0] > 0)}


def pool_window(x, shift=3, size=16):
    """Data pixels pooled with x: conv shifts by `shift`, pool pairs 2k and 2k+1."""
    start = 2 * ((x + shift) // 2) - shift
    return {p for p in (start, start + 1) if 0 <= p < size}


def test_fcn_crop_puts_the_hot_pixel_back_in_place(tmp_path):
    n = fcn()
    n.score = crop(n.up, n.data)
    net = instantiate(n, tmp_path)
    assert net.blobs["score"].data.shape == net.blobs["data"].data.shape
    centre_tap(net.params["conv1"][0])
    # Deconv taps [0, 1, 1, 0] spread pooled cell k to up pixels 2k+1, 2k+2: exactly the
    # cell's two conv pixels, so the output must be the hot pixel's pooling window.
    taps = np.array([0, 1, 1, 0], np.float32)
    net.params["up"][0].data[...] = np.outer(taps, taps)
    for y, x in [(0, 0), (5, 7), (8, 3), (15, 15), (10, 12)]:
        expected = {(r, c) for r in pool_window(y) for c in pool_window(x)}
        assert respond(net, y, x) == expected, (y, x)


@pytest.mark.parametrize("wrong", [3, 5])
def test_an_offset_off_by_one_would_be_caught(tmp_path, wrong):
    n = fcn()
    n.score = L.Crop(n.up, n.data, crop_param=dict(axis=2, offset=[wrong]))
    net = instantiate(n, tmp_path)
    centre_tap(net.params["conv1"][0])
    net.params["up"][0].data[...] = np.outer([0, 1, 1, 0], [0, 1, 1, 0])
    expected = {(r, c) for r in pool_window(5) for c in pool_window(7)}
    assert respond(net, 5, 7) != expected


def test_strided_conv_and_deconv_round_trip_exactly(tmp_path):
    n = caffe.NetSpec()
    n.data = data()
    n.down = L.Convolution(n.data, kernel_size=3, stride=2, pad=1, num_output=1, bias_term=False)
    n.up = L.Deconvolution(
        n.down, convolution_param=dict(num_output=1, kernel_size=3, stride=2, bias_term=False)
    )
    assert coord_map_from_to(n.up, n.data) == (1, 1.0, -1.0)
    n.score = crop(n.up, n.data)
    net = instantiate(n, tmp_path)
    centre_tap(net.params["down"][0])
    centre_tap(net.params["up"][0])
    for y, x in [(0, 0), (4, 10), (14, 2)]:  # even pixels: the strided conv samples them
        assert respond(net, y, x) == {(y, x)}


def test_crop_of_the_input_to_a_dilated_conv(tmp_path):
    n = caffe.NetSpec()
    n.data = data()
    n.conv = L.Convolution(n.data, kernel_size=3, dilation=3, num_output=1, bias_term=False)
    n.score = crop(n.data, n.conv)  # the other direction: the data cropped to the conv
    assert list(n.to_proto().layer[-1].crop_param.offset) == [3]
    net = instantiate(n, tmp_path)
    centre_tap(net.params["conv"][0])
    image = np.random.default_rng(0).random(net.blobs["data"].data.shape).astype(np.float32)
    out = net.forward(data=image)
    np.testing.assert_array_equal(out["score"], net.blobs["conv"].data)


def test_crop_to_an_anisotropic_conv_has_one_offset_per_axis(tmp_path):
    n = caffe.NetSpec()
    n.data = data()
    n.conv = L.Convolution(n.data, kernel_size=[3, 5], num_output=1, bias_term=False)
    n.score = crop(n.data, n.conv)
    assert list(n.to_proto().layer[-1].crop_param.offset) == [1, 2]
    net = instantiate(n, tmp_path)
    centre_tap(net.params["conv"][0])
    image = np.random.default_rng(1).random(net.blobs["data"].data.shape).astype(np.float32)
    out = net.forward(data=image)
    np.testing.assert_array_equal(out["score"], net.blobs["conv"].data)
