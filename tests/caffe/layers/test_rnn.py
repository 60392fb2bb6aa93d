import numpy as np
import pytest
import torch

from caffe.errors import LayerError, NetError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda
from tests.caffe.layers.recurrent_checks import recurrent_text, rnn_reference

H = 7  # num_output, as BVLC's RNN tests


def inputs(steps, streams, seed=0, static=False):
    """x (T×N×3×2), and x_static (N×2×3×4) when asked, uniform in [-1, 1] as BVLC's tests."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (steps, streams, 3, 2)).astype(np.float32)
    if not static:
        return x
    return x, rng.uniform(-1, 1, (streams, 2, 3, 4)).astype(np.float32)


def params(layer):
    return [b.data.copy() for b in layer.blobs]


@pytest.mark.parametrize("static", [False, True])
def test_setup_gives_bvlc_top_shape_and_parameter_layout(static):
    bottoms = list(inputs(2, 3, static=True)) if static else [inputs(2, 3)]
    bottoms.insert(1, np.zeros((2, 3), np.float32))
    layer, _, top = make_layer(recurrent_text("RNN", H), bottoms)
    assert top[0].shape == [2, 3, H]
    # W_xh, b_h, (W_xh_static), W_hh, W_ho, b_o: the owned params of BVLC's unrolled net.
    expected = [[H, 6], [H]] + ([[H, 24]] if static else []) + [[H, H], [H, H], [H]]
    assert [b.shape for b in layer.blobs] == expected


@pytest.mark.parametrize("static", [False, True])
def test_forward_matches_reference_with_sequence_resets(static):
    steps, streams = 4, 3
    x, x_static = inputs(steps, streams, seed=1, static=True)
    cont = np.array([[0, 0, 1], [1, 0, 1], [1, 1, 0], [0, 0.5, 1]], np.float32)
    bottoms = [x, cont] + ([x_static] if static else [])
    layer, bottom, top = make_layer(recurrent_text("RNN", H), bottoms)
    (o,) = run_forward(layer, bottom, top)
    want, _ = rnn_reference(x, cont, params(layer), x_static if static else None)
    np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-6)


def test_forward_with_cont_1_matches_torch_nn_rnn():
    steps, streams = 5, 2
    x = inputs(steps, streams, seed=2)
    layer, bottom, top = make_layer(
        recurrent_text("RNN", H), [x, np.ones((steps, streams), np.float32)]
    )
    (o,) = run_forward(layer, bottom, top)
    w_xh, b_h, w_hh, w_ho, b_o = (torch.from_numpy(p) for p in params(layer))
    reference = torch.nn.RNN(6, H, nonlinearity="tanh")
    with torch.no_grad():
        reference.weight_ih_l0.copy_(w_xh)
        reference.weight_hh_l0.copy_(w_hh)
        reference.bias_ih_l0.copy_(b_h)
        reference.bias_hh_l0.zero_()
        hidden, _ = reference(torch.from_numpy(x).reshape(steps, streams, 6))
        want = torch.tanh(hidden @ w_ho.T + b_o)
    np.testing.assert_allclose(o, want.numpy(), rtol=1e-5, atol=1e-6)


def test_one_timestep_per_forward_carries_the_state_and_cont_0_resets_it():
    steps, streams = 3, 3
    x = inputs(steps, streams, seed=3)
    cont = np.array([[t > 0] * streams for t in range(steps)], np.float32)
    layer, bottom, top = make_layer(recurrent_text("RNN", H), [x, cont])
    (full,) = run_forward(layer, bottom, top)
    weights = params(layer)

    def stepwise(cont_value):
        stepper, bottom, top = make_layer(recurrent_text("RNN", H), [x[:1], cont[:1]])
        for blob, value in zip(stepper.blobs, weights):
            blob.data[...] = value
        outputs = []
        for t in range(steps):
            bottom[0].data[...] = x[t : t + 1]
            bottom[1].data[...] = cont_value(t)
            outputs.append(run_forward(stepper, bottom, top)[0][0])
        return np.stack(outputs)

    np.testing.assert_allclose(stepwise(lambda t: t > 0), full, rtol=1e-5, atol=1e-6)
    reset = stepwise(lambda t: 0)
    np.testing.assert_allclose(reset[0], full[0], rtol=1e-5, atol=1e-6)
    assert np.all(reset[1:] != full[1:])


# BVLC's gradient tests: (T, N, cont, static, bottoms checked).
GRADIENT_CASES = {
    "zero-cont": (1, 3, [0, 0, 0], False, [0]),
    "nonzero-cont": (3, 1, [0, 1, 1], False, [0]),
    "buffer-size-2": (2, 2, [0, 0, 0, 1], False, [0]),
    "buffer-size-2-static": (2, 2, [0, 0, 0, 1], True, [0, 2]),
}


@pytest.mark.parametrize("case", list(GRADIENT_CASES))
def test_gradient(case):
    steps, streams, cont, static, check = GRADIENT_CASES[case]
    cont = np.array(cont, np.float32).reshape(steps, streams)
    data = inputs(steps, streams, seed=4, static=static)
    bottoms = [data[0], cont, data[1]] if static else [data, cont]
    layer, bottom, top = make_layer(recurrent_text("RNN", H), bottoms)
    assert check_gradient(layer, bottom, top, check_bottom=check) > 0


def test_expose_hidden_takes_and_gives_the_state_without_gradients_across_batches():
    steps, streams = 3, 2
    x = inputs(steps, streams, seed=6)
    cont = np.array([[1, 1], [0, 1], [1, 1]], np.float32)
    h0 = np.random.default_rng(6).uniform(-1, 1, (1, streams, H)).astype(np.float32)
    layer, bottom, top = make_layer(recurrent_text("RNN", H, True), [x, cont, h0], 2)
    o, h_t = run_forward(layer, bottom, top)
    want_o, want_h = rnn_reference(x, cont, params(layer), None, h0)
    np.testing.assert_allclose(o, want_o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_t[0], want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(run_forward(layer, bottom, top)[0], o)
    assert check_gradient(layer, bottom, top, check_bottom=[0], top_ids=[0]) > 0
    top[1].diff[...] = 3
    bottom[2].diff[...] = 7
    layer.run_backward(top, [True, False, True], bottom)
    assert np.all(bottom[2].diff == 0)  # h_0: no gradient, as BVLC


def test_reshape_keeps_timesteps():
    layer, bottom, top = make_layer(
        recurrent_text("RNN", H), [inputs(2, 3), np.ones((2, 3), np.float32)]
    )
    bottom[0].reshape(2, 5, 3, 2)
    bottom[1].reshape(2, 5)
    run_forward(layer, bottom, top)
    assert top[0].shape == [2, 5, H]
    bottom[0].reshape(2, 5, 4)
    with pytest.raises(LayerError, match="features"):
        run_forward(layer, bottom, top)
    bottom[0].reshape(1, 5, 3, 2)
    bottom[1].reshape(1, 5)
    with pytest.raises(LayerError, match="number of timesteps changed"):
        run_forward(layer, bottom, top)


def test_blob_counts_follow_expose_hidden():
    x, cont = inputs(2, 3), np.ones((2, 3), np.float32)
    with pytest.raises(NetError, match="at least 3 bottom"):
        make_layer(recurrent_text("RNN", H, True), [x, cont], 2)
    with pytest.raises(NetError, match="at most 3 bottom"):
        make_layer(recurrent_text("RNN", H), [x, cont, x[0], x[0]])


@needs_cuda
def test_cuda_matches_cpu():
    x, x_static = inputs(3, 2, seed=8, static=True)
    cont = np.array([[0, 1], [1, 1], [1, 0]], np.float32)
    assert_cuda_matches_cpu(recurrent_text("RNN", H), [x, cont, x_static], 1,
                            propagate=[True, False, True])  # fmt: skip
