import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda

D, N = 7, 3  # hidden size and streams, as BVLC's LSTMUnit tests
TEXT = 'type: "LSTMUnit"'


def inputs(cont, seed=0):
    """c_prev (1×N×D), gate inputs (1×N×4D) uniform in [-1, 1], cont (1×N)."""
    rng = np.random.default_rng(seed)
    c_prev = rng.uniform(-1, 1, (1, N, D)).astype(np.float32)
    gates = rng.uniform(-1, 1, (1, N, 4 * D)).astype(np.float32)
    return [c_prev, gates, np.array([cont], np.float32)]


def reference(c_prev, gates, cont):
    """Gate blocks in BVLC's order i, f, o, g; f scaled by cont; no clipping."""
    c_prev, gates = (
        torch.tensor(c_prev, dtype=torch.float64),
        torch.tensor(gates, dtype=torch.float64),
    )
    i, f, o, g = (gates[..., k * D : (k + 1) * D] for k in range(4))
    f = torch.sigmoid(f) * torch.tensor(cont, dtype=torch.float64)[..., None]
    c = f * c_prev + torch.sigmoid(i) * torch.tanh(g)
    return c.numpy(), (torch.sigmoid(o) * torch.tanh(c)).numpy()


@pytest.mark.parametrize("cont", [[0, 0, 0], [1, 0, 1], [0.3, 1, 2]])
def test_forward_matches_reference(cont):
    bottoms = inputs(cont)
    bottoms[1] *= 4  # large gate inputs: saturating gates, no clipping of c
    layer, bottom, top = make_layer(TEXT, bottoms, 2)
    assert [t.shape for t in top] == [[1, N, D], [1, N, D]]
    c, h = run_forward(layer, bottom, top)
    want_c, want_h = reference(*bottoms)
    np.testing.assert_allclose(c, want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)


def test_cont_0_drops_the_previous_cell():
    bottoms = inputs([0, 0, 0], seed=1)
    layer, bottom, top = make_layer(TEXT, bottoms, 2)
    c, _ = run_forward(layer, bottom, top)
    bottom[0].data[...] = 100.0
    np.testing.assert_array_equal(run_forward(layer, bottom, top)[0], c)


# BVLC's TestLSTMUnitGradient and ...NonZeroCont, and a cont that is neither 0 nor 1
# (the exact gradient, as BVLC's CUDA kernel).
@pytest.mark.parametrize("cont", [[0, 0, 0], [1, 0, 1], [0.5, 1, 0.25]])
def test_gradient(cont):
    layer, bottom, top = make_layer(TEXT, inputs(cont, seed=2), 2)
    assert check_gradient(layer, bottom, top, check_bottom=[0, 1]) > 0


def test_cont_gets_no_gradient():
    layer, bottom, top = make_layer(TEXT, inputs([1, 1, 1]), 2)
    assert layer.allow_force_backward(1) and not layer.allow_force_backward(2)
    run_forward(layer, bottom, top)
    with pytest.raises(LayerError, match="sequence indicators"):
        layer.run_backward(top, [True, True, True], bottom)


@pytest.mark.parametrize("shapes,match", [
    ([(1, N, D), (1, N, 3 * D), (1, N)], "4 x 7"),
    ([(2, N, D), (2, N, 4 * D), (2, N)], r"bottom\[0\]"),
    ([(1, N, D), (1, N, 4 * D), (1, N, 1)], r"bottom\[2\]"),
    ([(1, N, D), (1, N + 1, 4 * D), (1, N)], r"bottom\[1\]"),
])  # fmt: skip
def test_bad_shapes_are_errors_naming_the_layer(shapes, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(TEXT, [np.zeros(s, np.float32) for s in shapes], 2)


@needs_cuda
def test_cuda_matches_cpu():
    assert_cuda_matches_cpu(TEXT, inputs([0, 1, 0.5], seed=3), 2, propagate=[True, True, False])


@pytest.mark.parametrize("cont", [[1, 0, 1], [0.3, 1, 2]])
def test_backward_reads_the_cell_a_later_in_place_layer_rewrote(cont):
    # BVLC's backward takes c_t from the top as it is when backward runs (and the gates'
    # activations from the forward): a later in-place layer (here c_t halved, as a Power
    # layer in place would) changes tanh(c_t) in the gradient. Hand-computed in float64.
    c_prev, gates, cont_t = inputs(cont, seed=4)
    layer, bottom, top = make_layer(TEXT, [c_prev, gates, cont_t], num_tops=2)
    layer.bottom_need_backward = [True, True, False]
    run_forward(layer, bottom, top)
    top[0].data[...] *= 0.5
    rng = np.random.default_rng(6)
    dc, dh = (rng.standard_normal((1, N, D)).astype(np.float32) for _ in range(2))
    top[0].diff[...], top[1].diff[...] = dc, dh
    layer.run_backward(top, [True, True, False], bottom)

    x = gates.astype(np.float64)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, o, g = (
        sig(x[..., :D]),
        sig(x[..., D : 2 * D]),
        sig(x[..., 2 * D : 3 * D]),
        np.tanh(x[..., 3 * D :]),
    )
    k = np.asarray(cont, np.float64)[None, :, None]
    tanh_c = np.tanh(top[0].data.astype(np.float64))  # the rewritten cell
    c_term = dc + dh * o * (1 - tanh_c**2)
    blocks = [c_term * g * i * (1 - i), c_term * k * c_prev * f * (1 - f),
              dh * tanh_c * o * (1 - o), c_term * i * (1 - g**2)]  # fmt: skip
    expected_gates = np.concatenate(blocks, axis=-1)
    np.testing.assert_allclose(bottom[1].diff, expected_gates, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bottom[0].diff, c_term * k * f, rtol=1e-5, atol=1e-6)
