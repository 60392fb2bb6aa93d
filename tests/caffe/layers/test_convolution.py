import numpy as np
import pytest
import torch
import torch.nn.functional as F

from caffe.errors import LayerError
from caffe.layers._base_conv import prefers_channels_last
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda

FILLERS = 'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.5 }'


def conv_text(params: str, kind: str = "Convolution") -> str:
    return f'type: "{kind}" convolution_param {{ {params} {FILLERS} }}'


def torch_conv(x, layer, stride, pad, dilation, group, channel_axis=1):
    """PyTorch's convolution of x (batch axes before channel_axis) with the layer's weights."""
    weight = torch.from_numpy(layer.blobs[0].data.copy())
    bias = torch.from_numpy(layer.blobs[1].data.copy()) if len(layer.blobs) > 1 else None
    t = torch.from_numpy(x)
    lead = t.shape[:channel_axis]
    t = t.reshape(-1, *t.shape[channel_axis:])
    op = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[t.dim() - 2]
    y = op(t, weight, bias, stride, pad, dilation, group)
    return y.reshape(*lead, *y.shape[1:]).numpy()


# (input shape, convolution_param text, stride, pad, dilation, group, channel axis)
CASES = [
    ((2, 3, 6, 5), "num_output: 4 kernel_size: 3 pad: 1", 1, 1, 1, 1, 1),
    ((1, 3, 7, 6), "num_output: 2 kernel_size: 3 stride: 2 bias_term: false", 2, 0, 1, 1, 1),
    ((2, 4, 5, 5), "num_output: 6 kernel_size: 3 group: 2 dilation: 2 pad: 1", 1, 1, 2, 2, 1),
    ((1, 2, 5, 9), "num_output: 3 kernel_h: 1 kernel_w: 7 pad_h: 0 pad_w: 3", 1, (0, 3), 1, 1, 1),
    ((1, 2, 9, 4), "num_output: 2 kernel_h: 7 kernel_w: 1 pad_h: 3 pad_w: 0", 1, (3, 0), 1, 1, 1),
    ((2, 2, 7, 8), "num_output: 2 kernel_size: 3 stride_h: 2 stride_w: 3", (2, 3), 0, 1, 1, 1),
    ((1, 2, 5, 6), "num_output: 3 kernel_size: 2 kernel_size: 3 stride: 1 stride: 2 pad: 0 "
                   "pad: 1 dilation: 2 dilation: 1", (1, 2), (0, 1), (2, 1), 1, 1),
    ((2, 3, 9), "num_output: 3 kernel_size: 3 stride: 2 dilation: 2", 2, 0, 2, 1, 1),
    ((1, 2, 4, 5, 3), "num_output: 2 kernel_size: 2 kernel_size: 3 kernel_size: 1 pad: 1",
     1, 1, 1, 1, 1),
    ((2, 1, 3, 4, 4), "num_output: 3 kernel_size: 3 pad: 1 axis: 2", 1, 1, 1, 1, 2),
    ((1, 6, 5, 5), "num_output: 3 kernel_size: 3 group: 3 stride: 2 pad: 2", 2, 2, 1, 3, 1),
    # Input channels above 8, not a multiple of 16: channels-last on CPU (Note
    # [channels-last convolution on CPU]).
    ((2, 10, 5, 5), "num_output: 3 kernel_size: 3 pad: 1", 1, 1, 1, 1, 1),
    ((1, 12, 6, 5), "num_output: 2 kernel_size: 2 stride: 2 bias_term: false", 2, 0, 1, 1, 1),
]  # fmt: skip


@pytest.mark.parametrize("shape,params,stride,pad,dilation,group,axis", CASES)
def test_forward_matches_torch_and_gradient_matches_finite_differences(
    shape, params, stride, pad, dilation, group, axis
):
    x = np.random.default_rng(len(params)).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(conv_text(params), [x])
    (y,) = run_forward(layer, bottom, top)
    ref = torch_conv(x, layer, stride, pad, dilation, group, axis)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize(
    "channels,spatial,group,transposed,expected",
    [(20, 2, 1, False, True), (24, 2, 1, False, True), (9, 2, 1, False, True),
     (8, 2, 1, False, False), (3, 2, 1, False, False), (32, 2, 1, False, False),
     (48, 2, 1, False, False), (20, 3, 1, False, False), (20, 1, 1, False, False),
     (20, 2, 2, False, False), (20, 2, 1, True, False)],
)  # fmt: skip
def test_channels_last_is_chosen_by_the_shapes_alone(
    channels, spatial, group, transposed, expected
):
    assert prefers_channels_last(channels, spatial, group, transposed) is expected


def test_a_channels_last_layer_computes_what_nchw_computes(monkeypatch):
    # LeNet's conv2 shape; the same layer forced back to NCHW is the reference.
    x = np.random.default_rng(4).standard_normal((4, 20, 12, 12)).astype(np.float32)
    results = []
    for chosen in (True, False):
        monkeypatch.setattr(
            "caffe.layers._base_conv.prefers_channels_last", lambda *args, chosen=chosen: chosen
        )
        torch.manual_seed(0)
        layer, bottom, top = make_layer(conv_text("num_output: 50 kernel_size: 5"), [x])
        assert layer._channels_last is chosen
        (y,) = run_forward(layer, bottom, top)
        top[0].diff[...] = np.random.default_rng(5).standard_normal(top[0].shape)
        layer.run_backward(top, [True], bottom)
        results.append([y, bottom[0].diff.copy(), *(b.diff.copy() for b in layer.blobs)])
    for ours, nchw in zip(*results):
        np.testing.assert_allclose(ours, nchw, rtol=1e-4, atol=1e-4 * np.abs(nchw).max())


def test_forward_matches_a_direct_loop_with_groups_stride_pad_and_dilation():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6, 7))
    params = "num_output: 4 kernel_size: 2 group: 2 stride: 2 pad: 1 dilation: 2"
    layer, bottom, top = make_layer(conv_text(params), [x.astype(np.float32)])
    (y,) = run_forward(layer, bottom, top)
    w, b = layer.blobs[0].data.astype(np.float64), layer.blobs[1].data.astype(np.float64)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out_h, out_w = (6 + 2 - 3) // 2 + 1, (7 + 2 - 3) // 2 + 1
    ref = np.zeros((2, 4, out_h, out_w))
    for o in range(4):
        g = o // 2  # output channels 0-1 see input channels 0-1; 2-3 see 2-3
        for i in range(out_h):
            for j in range(out_w):
                patch = padded[:, 2 * g : 2 * g + 2, 2 * i : 2 * i + 3 : 2, 2 * j : 2 * j + 3 : 2]
                ref[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3)) + b[o]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_weight_and_bias_shapes():
    layer, _, _ = make_layer(conv_text("num_output: 6 kernel_h: 3 kernel_w: 5 group: 3"),
                             [np.zeros((1, 9, 8, 8), np.float32)])  # fmt: skip
    assert [b.shape for b in layer.blobs] == [[6, 3, 3, 5], [6]]


def test_bottoms_share_weights_and_param_gradients_add_up():
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((1, 2, 4, 5)).astype(np.float32) for _ in range(2)]
    layer, bottom, top = make_layer(conv_text("num_output: 2 kernel_size: 3"), xs, num_tops=2)
    ys = run_forward(layer, bottom, top)
    for x, y in zip(xs, ys):
        np.testing.assert_allclose(y, torch_conv(x, layer, 1, 0, 1, 1), rtol=1e-5, atol=1e-5)
    check_gradient(layer, bottom, top)


def test_param_gradients_accumulate_and_bottom_gradients_overwrite():
    x = np.random.default_rng(5).standard_normal((2, 2, 4, 4)).astype(np.float32)
    layer, bottom, top = make_layer(conv_text("num_output: 3 kernel_size: 3"), [x])
    run_forward(layer, bottom, top)
    top[0].diff[...] = 1
    layer.run_backward(top, [True], bottom)
    once = [b.diff.copy() for b in layer.blobs]
    first_dx = bottom[0].diff.copy()
    layer.run_backward(top, [True], bottom)
    for blob, value in zip(layer.blobs, once):
        np.testing.assert_allclose(blob.diff, 2 * value, rtol=1e-6)
    np.testing.assert_allclose(bottom[0].diff, first_dx)


def test_only_the_requested_gradients_are_computed():
    x = np.random.default_rng(6).standard_normal((1, 2, 4, 4)).astype(np.float32)
    layer, bottom, top = make_layer(conv_text("num_output: 2 kernel_size: 3"), [x])
    run_forward(layer, bottom, top)
    top[0].diff[...] = 1
    bottom[0].diff[...] = 7
    layer.param_propagate_down = [False, True]
    layer.run_backward(top, [False], bottom)
    assert not layer.blobs[0].diff.any()
    assert layer.blobs[1].diff.tolist() == [4.0, 4.0]  # 2×2 outputs, each with dy = 1
    assert (bottom[0].diff == 7).all()


@pytest.mark.parametrize(
    "params,shape,match",
    [
        ("num_output: 3 kernel_size: 3 group: 2", (1, 4, 5, 5), "multiples of group"),
        ("num_output: 4 kernel_size: 3 group: 3", (1, 4, 5, 5), "input channels .4."),
        ("num_output: 2 kernel_size: 3 kernel_h: 3 kernel_w: 3", (1, 1, 5, 5), "not both"),
        ("num_output: 2 kernel_h: 3 kernel_w: 3", (1, 1, 5), "only be used for 2D"),
        ("num_output: 2 stride: 2", (1, 1, 5, 5), "kernel_size must be specified"),
        ("num_output: 2 kernel_size: 1 kernel_size: 2", (1, 1, 5, 5, 5), "once per spatial"),
        ("num_output: 2 kernel_h: 3", (1, 1, 5, 5), "Filter dimensions must be nonzero"),
        ("kernel_size: 3", (1, 1, 5, 5), "num_output must be positive"),
        ("num_output: 2 kernel_size: 7", (1, 1, 5, 5), "output would be empty"),
        ("num_output: 2 kernel_size: 1", (1, 1), "spatial axes"),
        ("num_output: 2 kernel_size: 1 axis: 4", (1, 1, 5, 5), "axis"),
    ],
)
def test_invalid_parameters_name_the_layer(params, shape, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(conv_text(params), [np.zeros(shape, np.float32)])


def test_input_changes_that_break_the_weights_name_the_layer():
    xs = [np.zeros((1, 2, 5, 5), np.float32)] * 2
    layer, bottom, top = make_layer(conv_text("num_output: 2 kernel_size: 3"), xs, num_tops=2)
    bottom[1].reshape(1, 2, 6, 5)
    with pytest.raises(LayerError, match=r"under_test.*shape mismatch"):
        layer.run_forward(bottom, top)
    bottom[0].reshape(1, 3, 6, 5)
    bottom[1].reshape(1, 3, 6, 5)
    with pytest.raises(LayerError, match=r"under_test.*incompatible with convolution kernel"):
        layer.run_forward(bottom, top)


def test_weights_given_with_the_wrong_shape_name_the_layer():
    text = conv_text("num_output: 2 kernel_size: 3 bias_term: false")
    text += " blobs { shape { dim: 2 dim: 1 dim: 3 dim: 3 } " + "data: 0 " * 18 + "}"
    with pytest.raises(LayerError, match=r"under_test.*Incorrect weight shape"):
        make_layer(text, [np.zeros((1, 2, 5, 5), np.float32)])


@needs_cuda
@pytest.mark.parametrize("shape,params,stride,pad,dilation,group,axis", CASES)
def test_cuda_matches_cpu(shape, params, stride, pad, dilation, group, axis):
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    assert_cuda_matches_cpu(conv_text(params), [x])
