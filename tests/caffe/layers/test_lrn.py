import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda


def lrn_text(size=5, alpha=1.0, beta=0.75, k=1.0, region="ACROSS_CHANNELS"):
    return (f'type: "LRN" lrn_param {{ local_size: {size} alpha: {alpha} beta: {beta} k: {k} '
            f"norm_region: {region} }}")  # fmt: skip


def across_reference(x, size, alpha, beta, k):
    """scale_c = k + α/n · Σ_{|c'-c| <= (n-1)/2} x_{c'}², loop over channels."""
    half = (size - 1) // 2
    channels = x.shape[1]
    y = np.empty_like(x)
    for c in range(channels):
        lo, hi = max(0, c - half), min(channels, c + half + 1)
        scale = k + alpha / size * (x[:, lo:hi] ** 2).sum(axis=1)
        y[:, c] = x[:, c] * scale**-beta
    return y


def within_reference(x, size, alpha, beta):
    """scale = 1 + α/n² · Σ x² over the zero-padded n×n window; loop over positions."""
    half = (size - 1) // 2
    h, w = x.shape[2:]
    padded = np.pad(x**2, ((0, 0), (0, 0), (half, half), (half, half)))
    y = np.empty_like(x)
    for i in range(h):
        for j in range(w):
            total = padded[:, :, i : i + size, j : j + size].sum(axis=(2, 3))
            y[:, :, i, j] = x[:, :, i, j] * (1 + alpha / size**2 * total) ** -beta
    return y


ACROSS = [((2, 7, 3, 3), 5, 1.0, 0.75, 1.0), ((1, 3, 2, 5), 3, 2.0, 0.5, 2.0),
          ((2, 2, 3, 2), 5, 1e-1, 0.75, 1.0)]  # fmt: skip


@pytest.mark.parametrize("shape,size,alpha,beta,k", ACROSS)
def test_across_channels_matches_references_and_finite_differences(shape, size, alpha, beta, k):
    x = np.random.default_rng(size).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(lrn_text(size, alpha, beta, k), [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, across_reference(x.astype(np.float64), size, alpha, beta, k),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    torch_ref = torch.nn.functional.local_response_norm(torch.from_numpy(x), size, alpha, beta, k)
    np.testing.assert_allclose(y, torch_ref.numpy(), rtol=1e-5, atol=1e-6)
    check_gradient(layer, bottom, top)


WITHIN = [((2, 2, 4, 5), 3, 1.0, 0.75), ((1, 3, 5, 3), 5, 2.0, 0.5), ((1, 1, 1, 2), 3, 5e-1, 1.0)]


@pytest.mark.parametrize("shape,size,alpha,beta", WITHIN)
def test_within_channel_matches_reference_and_finite_differences(shape, size, alpha, beta):
    x = np.random.default_rng(size).standard_normal(shape).astype(np.float32)
    # k is ignored by WITHIN_CHANNEL: Caffe's composite shifts by exactly 1.
    layer, bottom, top = make_layer(lrn_text(size, alpha, beta, 7.0, "WITHIN_CHANNEL"), [x])
    (y,) = run_forward(layer, bottom, top)
    ref = within_reference(x.astype(np.float64), size, alpha, beta)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    check_gradient(layer, bottom, top)


def test_in_place_backward_uses_the_input_not_the_output():
    x = np.random.default_rng(9).standard_normal((1, 4, 2, 2)).astype(np.float32)
    layer, bottom, top = make_layer(lrn_text(3), [x])
    run_forward(layer, bottom, top)
    top[0].diff[...] = 1
    layer.run_backward(top, [True], bottom)
    expected = bottom[0].diff.copy()
    # The same layer used in place: top and bottom are one blob.
    blob = bottom[0]
    blob.data[...] = x
    layer.run_forward([blob], [blob])
    blob.diff[...] = 1
    layer.run_backward([blob], [True], [blob])
    np.testing.assert_allclose(blob.diff, expected, rtol=1e-6)


def test_backward_without_saved_terms_recomputes_them():
    x = np.random.default_rng(10).standard_normal((1, 5, 2, 3)).astype(np.float32)
    layer, bottom, top = make_layer(lrn_text(3, 0.5), [x])
    run_forward(layer, bottom, top)
    top[0].diff[...] = 1
    layer.run_backward(top, [True], bottom)
    expected = bottom[0].diff.copy()
    layer.need_backward = False  # a net that did not plan a backward pass keeps nothing
    run_forward(layer, bottom, top)
    layer.run_backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff, expected, rtol=1e-6)


@pytest.mark.parametrize("size", [4, 0])
def test_even_local_size_is_an_error_naming_the_layer(size):
    with pytest.raises(LayerError, match=r"under_test.*odd values for local_size"):
        make_layer(lrn_text(size), [np.zeros((1, 4, 2, 2), np.float32)])


def test_input_must_be_4d():
    with pytest.raises(LayerError, match=r"under_test.*4 axes"):
        make_layer(lrn_text(3), [np.zeros((2, 4), np.float32)])


@needs_cuda
@pytest.mark.parametrize("region", ["ACROSS_CHANNELS", "WITHIN_CHANNEL"])
def test_cuda_matches_cpu(region):
    x = np.random.default_rng(8).standard_normal((2, 6, 5, 4)).astype(np.float32)
    assert_cuda_matches_cpu(lrn_text(5, 1e-1, 0.75, 2.0, region), [x])
