import numpy as np
import pytest
import torch
import torch.nn.functional as F

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda

FILLERS = 'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.5 }'


def deconv_text(params: str, with_fillers: bool = True) -> str:
    return (
        f'type: "Deconvolution" convolution_param {{ {params} {FILLERS if with_fillers else ""} }}'
    )


def torch_deconv(x, layer, stride, pad, dilation, group):
    weight = torch.from_numpy(layer.blobs[0].data.copy())
    bias = torch.from_numpy(layer.blobs[1].data.copy()) if len(layer.blobs) > 1 else None
    t = torch.from_numpy(x)
    op = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[t.dim() - 2]
    return op(t, weight, bias, stride, pad, 0, group, dilation).numpy()


def deconv_size(size, k, s, p, d):
    return s * (size - 1) + d * (k - 1) + 1 - 2 * p


# (input shape, convolution_param text, stride, pad, dilation, group)
CASES = [
    ((2, 2, 3, 4), "num_output: 2 kernel_size: 3", 1, 0, 1, 1),
    ((1, 2, 3, 4), "num_output: 3 kernel_size: 4 stride: 2 pad: 1", 2, 1, 1, 1),
    ((2, 4, 3, 3), "num_output: 2 kernel_size: 3 group: 2 dilation: 2 bias_term: false",
     1, 0, 2, 2),
    ((1, 2, 3, 4), "num_output: 2 kernel_h: 1 kernel_w: 3 stride_h: 1 stride_w: 2 pad_h: 0 "
                   "pad_w: 1", (1, 2), (0, 1), 1, 1),
    ((2, 2, 5), "num_output: 3 kernel_size: 3 stride: 3", 3, 0, 1, 1),
    ((1, 2, 2, 3, 2), "num_output: 2 kernel_size: 2 stride: 2", 2, 0, 1, 1),
]  # fmt: skip


@pytest.mark.parametrize("shape,params,stride,pad,dilation,group", CASES)
def test_forward_matches_torch_and_gradient_matches_finite_differences(
    shape, params, stride, pad, dilation, group
):
    x = np.random.default_rng(len(params)).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(deconv_text(params), [x])
    (y,) = run_forward(layer, bottom, top)
    ref = torch_deconv(x, layer, stride, pad, dilation, group)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    check_gradient(layer, bottom, top)


def test_output_shape_and_weight_layout():
    layer, _, top = make_layer(deconv_text("num_output: 4 kernel_size: 3 stride: 2 pad: 1 "
                                           "dilation: 2 group: 2"),
                               [np.zeros((2, 6, 5, 4), np.float32)])  # fmt: skip
    assert top[0].shape == [2, 4, deconv_size(5, 3, 2, 1, 2), deconv_size(4, 3, 2, 1, 2)]
    assert [b.shape for b in layer.blobs] == [[6, 2, 3, 3], [4]]


def test_deconvolution_is_the_adjoint_of_convolution():
    # <conv(x), y> == <x, deconv(y)> when both use the same weights and no bias.
    rng = np.random.default_rng(2)
    params = "num_output: 3 kernel_size: 3 stride: 2 pad: 1 group: 1 bias_term: false"
    x = rng.standard_normal((2, 2, 7, 7)).astype(np.float32)
    conv, cb, ct = make_layer(f'type: "Convolution" convolution_param {{ {params} '
                              f'weight_filler {{ type: "gaussian" }} }}', [x])  # fmt: skip
    (cx,) = run_forward(conv, cb, ct)
    y = rng.standard_normal(cx.shape).astype(np.float32)
    deconv, db, dt = make_layer(deconv_text(params.replace("num_output: 3", "num_output: 2"),
                                            with_fillers=False), [y])  # fmt: skip
    deconv.blobs[0].data[...] = conv.blobs[0].data
    (dy,) = run_forward(deconv, db, dt)
    assert dy.shape == x.shape
    np.testing.assert_allclose((cx * y).sum(), (x * dy).sum(), rtol=1e-4)


@pytest.mark.parametrize(
    "params,match",
    [
        ("num_output: 3 kernel_size: 3 group: 2", "multiples of group"),
        ("num_output: 2 kernel_size: 3 group: 3", "input channels"),
        ("num_output: 2 kernel_size: 1 pad: 1", "output would be empty"),
    ],
)
def test_invalid_parameters_name_the_layer(params, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(deconv_text(params), [np.zeros((1, 4, 2, 2), np.float32)])


@needs_cuda
@pytest.mark.parametrize("shape,params,stride,pad,dilation,group", CASES)
def test_cuda_matches_cpu(shape, params, stride, pad, dilation, group):
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    assert_cuda_matches_cpu(deconv_text(params), [x])
