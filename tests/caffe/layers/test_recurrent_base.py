"""RNN and LSTM inside nets from prototxt: a small language model in the form of BVLC's
LSTM examples (Embed → LSTM → InnerProduct over axis 2 → SoftmaxWithLoss over axis 2)
trains, its weights round-trip through a .caffemodel in BVLC's layout, and a net
gradient equals PyTorch autograd through the plain reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import caffe
from caffe.errors import WeightsError
from tests.caffe.layers.recurrent_checks import lstm_reference
from tests.caffe.net_fixtures import build_net

T, N, VOCAB, HIDDEN = 8, 4, 4, 10


def language_model(recurrent: str = "LSTM") -> str:
    return f"""
name: "tiny_{recurrent.lower()}_lm"
layer {{ name: "data" type: "Input" top: "input_sentence" top: "cont_sentence"
         top: "target_sentence"
         input_param {{ shape {{ dim: {T} dim: {N} }} shape {{ dim: {T} dim: {N} }}
                        shape {{ dim: {T} dim: {N} }} }} }}
layer {{ name: "embedding" type: "Embed" bottom: "input_sentence" top: "embedded_input"
         embed_param {{ input_dim: {VOCAB} num_output: 6 bias_term: false
                        weight_filler {{ type: "uniform" min: -0.5 max: 0.5 }} }} }}
layer {{ name: "rec1" type: "{recurrent}" bottom: "embedded_input" bottom: "cont_sentence"
         top: "rec1"
         recurrent_param {{ num_output: {HIDDEN}
                            weight_filler {{ type: "uniform" min: -0.3 max: 0.3 }}
                            bias_filler {{ type: "constant" value: 0 }} }} }}
layer {{ name: "predict" type: "InnerProduct" bottom: "rec1" top: "predict"
         inner_product_param {{ num_output: {VOCAB} axis: 2
                                weight_filler {{ type: "uniform" min: -0.3 max: 0.3 }} }} }}
layer {{ name: "cross_entropy_loss" type: "SoftmaxWithLoss" bottom: "predict"
         bottom: "target_sentence" top: "cross_entropy_loss"
         loss_param {{ ignore_label: -1 }} softmax_param {{ axis: 2 }} }}
"""


def sentences(seed: int = 0):
    """Each stream repeats every token twice (a a b b ...): the next token depends on
    whether the current one was already seen, so predicting it needs the state."""
    rng = np.random.default_rng(seed)
    tokens = np.repeat(rng.integers(0, VOCAB, (T // 2 + 1, N)), 2, axis=0)
    cont = np.ones((T, N), np.float32)
    cont[0] = 0
    return tokens[:T].astype(np.float32), cont, tokens[1 : T + 1].astype(np.float32)


def fill(net, seed: int = 0) -> None:
    for name, value in zip(("input_sentence", "cont_sentence", "target_sentence"), sentences(seed)):
        net.blobs[name].data[...] = value


@pytest.mark.parametrize("recurrent", ["LSTM", "RNN"])
def test_language_model_trains_from_prototxt(tmp_path, recurrent):
    (tmp_path / "net.prototxt").write_text(language_model(recurrent))
    (tmp_path / "solver.prototxt").write_text(f"""
net: "{tmp_path / "net.prototxt"}"
type: "Adam" base_lr: 0.05 lr_policy: "fixed" momentum: 0.9 momentum2: 0.999
max_iter: 100 display: 0 random_seed: 1701 snapshot_after_train: false
""")
    solver = caffe.get_solver(str(tmp_path / "solver.prototxt"))
    fill(solver.net)
    assert [b.shape for b in solver.net.params["rec1"]] == (
        [[4 * HIDDEN, 6], [4 * HIDDEN], [4 * HIDDEN, HIDDEN]] if recurrent == "LSTM"
        else [[HIDDEN, 6], [HIDDEN], [HIDDEN, HIDDEN], [HIDDEN, HIDDEN], [HIDDEN]]
    )  # fmt: skip
    first = solver.net.forward()["cross_entropy_loss"].item()
    solver.step(100)
    last = solver.net.forward()["cross_entropy_loss"].item()
    assert first > 1.2 and last < 0.5 * first, (first, last)

    # The trained weights round-trip through a .caffemodel, layer blobs in BVLC's order.
    path = str(tmp_path / "trained.caffemodel")
    solver.net.save(path)
    deploy = caffe.Net(str(tmp_path / "net.prototxt"), caffe.TEST, weights=path)
    fill(deploy)
    for want, got in zip(solver.net.params["rec1"], deploy.params["rec1"]):
        np.testing.assert_array_equal(got.data, want.data)
    np.testing.assert_allclose(deploy.forward()["cross_entropy_loss"], last, rtol=1e-5)


def test_caffemodel_with_wrong_recurrent_blob_shapes_is_refused(tmp_path):
    net = build_net(language_model())
    proto = net.to_proto()
    layer = next(lp for lp in proto.layer if lp.name == "rec1")
    layer.blobs[2].shape.dim[1] = HIDDEN + 1  # W_hc of a wider LSTM
    del layer.blobs[2].data[:]
    layer.blobs[2].data.extend([0.0] * (4 * HIDDEN * (HIDDEN + 1)))
    path = tmp_path / "wrong.caffemodel"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(WeightsError, match="rec1"):
        net.copy_from(str(path))


def test_net_gradient_equals_autograd_through_the_reference():
    """force_backward: d(sum of the LSTM top · R)/d(x, params) vs torch autograd."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (3, 2, 5)).astype(np.float32)
    cont = np.array([[0, 0], [1, 0], [1, 1]], np.float32)
    net = build_net("""
force_backward: true
layer { name: "data" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 5 } shape { dim: 3 dim: 2 } } }
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 4 weight_filler { type: "gaussian" std: 0.5 }
                          bias_filler { type: "gaussian" std: 0.5 } } }
""")
    net.blobs["x"].data[...] = x
    net.blobs["cont"].data[...] = cont
    net.forward()
    r = rng.uniform(-1, 1, (3, 2, 4))
    net.blobs["h"].diff[...] = r
    net.backward()
    assert net.layers[1].type == "LSTM"
    xs = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ps = [torch.tensor(b.data, dtype=torch.float64, requires_grad=True) for b in net.params["lstm"]]
    h = _lstm_autograd(xs, torch.tensor(cont, dtype=torch.float64), ps)
    (h * torch.from_numpy(r)).sum().backward()
    np.testing.assert_allclose(net.blobs["x"].diff, xs.grad.numpy(), rtol=1e-4, atol=1e-6)
    for blob, p in zip(net.params["lstm"], ps):
        np.testing.assert_allclose(blob.diff, p.grad.numpy(), rtol=1e-4, atol=1e-6)
    want, _, _ = lstm_reference(x, cont, [p.detach() for p in ps])
    np.testing.assert_allclose(net.blobs["h"].data, want, rtol=1e-5, atol=1e-6)
    assert np.all(net.blobs["cont"].diff == 0)  # never written: cont gets no gradient


def _lstm_autograd(x, cont, params):
    w_xc, b_c, w_hc = params
    hidden = w_hc.shape[1]
    h = c = torch.zeros(x.shape[1], hidden, dtype=torch.float64)
    outputs = []
    for t in range(x.shape[0]):
        a = x[t] @ w_xc.T + b_c + (cont[t, :, None] * h) @ w_hc.T
        i, f, o, g = a.split(hidden, dim=1)
        c = cont[t, :, None] * torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs)
