import numpy as np
import pytest
import torch

from caffe.errors import LayerError, NetError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda
from tests.caffe.layers.recurrent_checks import lstm_reference, recurrent_text

H = 7  # num_output, as BVLC's LSTM tests


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
    layer, _, top = make_layer(recurrent_text("LSTM", H), bottoms)
    assert top[0].shape == [2, 3, H]
    # W_xc, b_c, (W_xc_static), W_hc: the owned params of BVLC's unrolled net, in order.
    expected = [[4 * H, 6], [4 * H]] + ([[4 * H, 24]] if static else []) + [[4 * H, H]]
    assert [b.shape for b in layer.blobs] == expected


@pytest.mark.parametrize("static", [False, True])
def test_forward_matches_reference_with_sequence_resets(static):
    steps, streams = 4, 3
    x, x_static = inputs(steps, streams, seed=1, static=True)
    # Sequences start where cont is 0; 0.5 scales the carried state (cont is not only 0/1).
    cont = np.array([[0, 0, 1], [1, 0, 1], [1, 1, 0], [0, 0.5, 1]], np.float32)
    bottoms = [x, cont] + ([x_static] if static else [])
    layer, bottom, top = make_layer(recurrent_text("LSTM", H), bottoms)
    (h,) = run_forward(layer, bottom, top)
    want, _, _ = lstm_reference(x, cont, params(layer), x_static if static else None)
    np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-6)


def test_forward_with_cont_1_matches_torch_nn_lstm():
    steps, streams = 5, 2
    x = inputs(steps, streams, seed=2)
    layer, bottom, top = make_layer(
        recurrent_text("LSTM", H), [x, np.ones((steps, streams), np.float32)]
    )
    (h,) = run_forward(layer, bottom, top)  # a fresh layer starts from zero state
    w_xc, b_c, w_hc = (torch.from_numpy(p) for p in params(layer))
    order = torch.cat([torch.arange(k * H, (k + 1) * H) for k in (0, 1, 3, 2)])  # ifog -> ifgo
    reference = torch.nn.LSTM(6, H)
    with torch.no_grad():
        reference.weight_ih_l0.copy_(w_xc[order])
        reference.weight_hh_l0.copy_(w_hc[order])
        reference.bias_ih_l0.copy_(b_c[order])
        reference.bias_hh_l0.zero_()
        want, _ = reference(torch.from_numpy(x).reshape(steps, streams, 6))
    np.testing.assert_allclose(h, want.numpy(), rtol=1e-5, atol=1e-6)


def test_one_timestep_per_forward_carries_the_state_and_cont_0_resets_it():
    # BVLC's TestForward: cont <0, 1, 1>; a whole sequence in one batch equals the same
    # sequence fed one timestep per forward (the state carries over between batches).
    steps, streams = 3, 3
    x = inputs(steps, streams, seed=3)
    cont = np.array([[t > 0] * streams for t in range(steps)], np.float32)
    torch.manual_seed(1701)
    layer, bottom, top = make_layer(recurrent_text("LSTM", H), [x, cont])
    (full,) = run_forward(layer, bottom, top)
    weights = params(layer)

    def stepwise(cont_value):
        stepper, bottom, top = make_layer(recurrent_text("LSTM", H), [x[:1], cont[:1]])
        for blob, value in zip(stepper.blobs, weights):
            blob.data[...] = value
        outputs = []
        for t in range(steps):
            bottom[0].data[...] = x[t : t + 1]
            bottom[1].data[...] = cont_value(t)
            outputs.append(run_forward(stepper, bottom, top)[0][0])
        return np.stack(outputs)

    np.testing.assert_allclose(stepwise(lambda t: t > 0), full, rtol=1e-5, atol=1e-6)
    reset = stepwise(lambda t: 0)  # every step starts a new sequence
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
    layer, bottom, top = make_layer(recurrent_text("LSTM", H), bottoms)
    assert check_gradient(layer, bottom, top, check_bottom=check) > 0


def test_gradient_from_a_nonzero_exposed_state():
    steps, streams = 2, 2
    rng = np.random.default_rng(5)
    x = inputs(steps, streams, seed=5)
    cont = np.array([[1, 0], [1, 1]], np.float32)
    h0, c0 = rng.uniform(-1, 1, (2, 1, streams, H)).astype(np.float32)
    layer, bottom, top = make_layer(recurrent_text("LSTM", H, True), [x, cont, h0, c0], 3)
    assert check_gradient(layer, bottom, top, check_bottom=[0], top_ids=[0]) > 0


def test_expose_hidden_takes_and_gives_the_states_without_gradients_across_batches():
    steps, streams = 3, 2
    rng = np.random.default_rng(6)
    x, x_static = inputs(steps, streams, seed=6, static=True)
    cont = np.array([[1, 1], [0, 1], [1, 1]], np.float32)
    h0, c0 = rng.uniform(-1, 1, (2, 1, streams, H)).astype(np.float32)
    layer, bottom, top = make_layer(recurrent_text("LSTM", H, True), [x, cont, x_static, h0, c0], 3)
    assert [t.shape for t in top] == [[steps, streams, H], [1, streams, H], [1, streams, H]]
    h, h_t, c_t = run_forward(layer, bottom, top)
    want = lstm_reference(x, cont, params(layer), x_static, h0, c0)
    for got, expected in zip((h, h_t[0], c_t[0]), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # No state carried: the same inputs give the same outputs.
    np.testing.assert_array_equal(run_forward(layer, bottom, top)[0], h)

    def backward(final_state_diff):
        top[0].diff[...] = 1
        top[1].diff[...] = final_state_diff
        top[2].diff[...] = final_state_diff
        for blob in bottom:
            blob.diff[...] = 7
        layer.run_backward(top, [True, False, True, True, True], bottom)
        return [b.diff.copy() for b in bottom]

    first = backward(0.0)
    assert np.all(first[3] == 0) and np.all(first[4] == 0)  # h_0, c_0: no gradient, as BVLC
    run_forward(layer, bottom, top)
    second = backward(5.0)  # the final states' diffs are ignored, as BVLC
    np.testing.assert_array_equal(second[0], first[0])
    np.testing.assert_array_equal(second[2], first[2])


def test_exposed_state_of_the_wrong_shape_is_an_error_naming_the_layer():
    x = inputs(2, 3)
    bad = np.zeros((1, 2, H), np.float32)
    with pytest.raises(LayerError, match=r"under_test.*c_0"):
        make_layer(recurrent_text("LSTM", H, True), [x, np.zeros((2, 3), np.float32),
                   np.zeros((1, 3, H), np.float32), bad], 3)  # fmt: skip


def test_reshape_keeps_timesteps_and_carries_the_first_streams_state():
    steps = 2
    x = inputs(steps, 4, seed=7)
    ones = np.ones((steps, 4), np.float32)
    layer, bottom, top = make_layer(recurrent_text("LSTM", H), [x[:, :3], ones[:, :3]])
    weights = params(layer)
    _, h_t, c_t = lstm_reference(x[:, :3], ones[:, :3], weights)
    run_forward(layer, bottom, top)
    # Fewer streams: the first two streams' final states carry on (Caffe's Blob memory).
    bottom[0].reshape(steps, 2, 3, 2)
    bottom[1].reshape(steps, 2)
    bottom[0].data[...], bottom[1].data[...] = x[:, :2], ones[:, :2]
    (h,) = run_forward(layer, bottom, top)
    want, _, _ = lstm_reference(x[:, :2], ones[:, :2], weights, None, h_t[:2], c_t[:2])
    np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-6)
    # More streams than ever before: the state starts from zeros.
    bottom[0].reshape(steps, 4, 3, 2)
    bottom[1].reshape(steps, 4)
    bottom[0].data[...], bottom[1].data[...] = x, ones
    (h,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(h, lstm_reference(x, ones, weights)[0], rtol=1e-5, atol=1e-6)
    layer.reset()
    np.testing.assert_allclose(run_forward(layer, bottom, top)[0], h, rtol=1e-6, atol=1e-7)
    bottom[0].reshape(3, 4, 3, 2)
    bottom[1].reshape(3, 4)
    with pytest.raises(LayerError, match="number of timesteps changed"):
        run_forward(layer, bottom, top)


def test_cont_gets_no_gradient():
    layer, bottom, top = make_layer(
        recurrent_text("LSTM", H), [inputs(1, 2), np.zeros((1, 2), np.float32)]
    )
    assert layer.allow_force_backward(0) and not layer.allow_force_backward(1)
    run_forward(layer, bottom, top)
    with pytest.raises(LayerError, match="sequence indicators"):
        layer.run_backward(top, [True, True], bottom)


@pytest.mark.parametrize("text,bottoms,tops,error,match", [
    (recurrent_text("LSTM", 0), [(2, 3, 4), (2, 3)], 1, LayerError, "num_output"),
    (recurrent_text("LSTM", H), [(2,), (2, 1)], 1, LayerError, "at least 2 axes"),
    (recurrent_text("LSTM", H), [(2, 3, 4), (3, 2)], 1, LayerError, "cont"),
    (recurrent_text("LSTM", H), [(2, 3, 4), (2, 3), (2, 5)], 1, LayerError, "x_static"),
    (recurrent_text("LSTM", H, True), [(2, 3, 4), (2, 3)], 3, NetError, "at least 4 bottom"),
    (recurrent_text("LSTM", H, True), [(2, 3, 4), (2, 3), (1, 3, H), (1, 3, H)], 1, NetError,
     "produces 3 top"),
])  # fmt: skip
def test_bad_configurations_are_errors_naming_the_layer(text, bottoms, tops, error, match):
    with pytest.raises(error, match=rf"under_test.*{match}"):
        make_layer(text, [np.zeros(s, np.float32) for s in bottoms], tops)


@pytest.mark.parametrize("device", [
    "cpu",  # the harness alone: each side runs forward once (a carried state would differ)
    pytest.param("cuda", marks=needs_cuda),
])  # fmt: skip
def test_cuda_matches_cpu(device):
    x, x_static = inputs(3, 2, seed=8, static=True)
    cont = np.array([[0, 1], [1, 1], [1, 0]], np.float32)
    assert_cuda_matches_cpu(recurrent_text("LSTM", H), [x, cont, x_static], 1,
                            propagate=[True, False, True], device=device)  # fmt: skip
