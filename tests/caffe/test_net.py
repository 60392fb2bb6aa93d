import numpy as np
import pytest
import torch

import caffe
from caffe.errors import NetError
from tests.caffe.net_fixtures import MLP, build_net


def fill_inputs(net, seed=0):
    rng = np.random.default_rng(seed)
    net.blobs["data"].data[...] = rng.standard_normal(net.blobs["data"].shape)
    net.blobs["label"].data[...] = rng.integers(0, 3, net.blobs["label"].shape)


def test_names_inputs_outputs():
    net = build_net(MLP)
    assert net.inputs == ["data", "label"]
    assert net.outputs == ["loss"]
    assert list(net.layer_dict) == ["input", "ip1", "relu1", "ip2", "loss"]
    assert list(net.params) == ["ip1", "ip2"]
    assert [b.shape for b in net.params["ip1"]] == [[6, 5], [6]]
    assert net.top_names["relu1"] == ["ip1"] and net.bottom_names["relu1"] == ["ip1"]
    assert net.blob_loss_weights["loss"] == 1.0 and net.blob_loss_weights["ip2"] == 0.0


def test_whole_net_gradients_match_torch_autograd():
    net = build_net(MLP)
    fill_inputs(net)
    loss = net.forward()["loss"]
    net.clear_param_diffs()
    net.backward()
    x = torch.from_numpy(net.blobs["data"].data.copy())
    y = torch.from_numpy(net.blobs["label"].data.copy()).long()
    w1, b1 = (torch.from_numpy(b.data.copy()).requires_grad_() for b in net.params["ip1"])
    w2, b2 = (torch.from_numpy(b.data.copy()).requires_grad_() for b in net.params["ip2"])
    logits = torch.relu(x @ w1.t() + b1) @ w2.t() + b2
    ref = torch.nn.functional.cross_entropy(logits, y)
    ref.backward()
    np.testing.assert_allclose(loss, ref.item(), rtol=1e-5)
    for blob, tensor in zip(net.params["ip1"] + net.params["ip2"], (w1, b1, w2, b2)):
        np.testing.assert_allclose(blob.diff, tensor.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_parameters_live_in_one_contiguous_buffer_per_net():
    net = build_net(MLP)
    ranges = net.layer_param_range
    assert ranges[1] == (0, 36) and ranges[3] == (36, 57)
    assert all(ranges[i] == (ranges[i][0], ranges[i][0]) for i in (0, 2, 4))
    net.param_diff.fill_(0.5)
    assert np.all(net.params["ip2"][0].diff == 0.5)
    before = net.params["ip1"][0].data.copy()
    net.update()
    np.testing.assert_allclose(net.params["ip1"][0].data, before - 0.5)
    ptr = net.param_data.data_ptr()
    assert net.params["ip1"][0].data_tensor.data_ptr() == ptr


def test_state_filtering_by_phase_level_and_stage():
    text = """
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }
    layer { name: "train_only" type: "ReLU" bottom: "x" top: "a" include { phase: TRAIN } }
    layer { name: "test_only" type: "ReLU" bottom: "x" top: "b" include { phase: TEST } }
    layer { name: "level2" type: "ReLU" bottom: "x" top: "c" include { min_level: 2 } }
    layer { name: "staged" type: "ReLU" bottom: "x" top: "d" include { stage: "s1" stage: "s2" } }
    layer { name: "not_s1" type: "ReLU" bottom: "x" top: "e" exclude { stage: "s1" } }
    layer { name: "max1" type: "ReLU" bottom: "x" top: "f" include { max_level: 1 } }
    """
    names = lambda net: list(net.layer_dict)  # noqa: E731
    assert "train_only" in names(build_net(text, caffe.TRAIN))
    assert "test_only" not in names(build_net(text, caffe.TRAIN))
    assert "test_only" in names(build_net(text, caffe.TEST))
    assert "level2" not in names(build_net(text, level=1))
    assert "level2" in names(build_net(text, level=2)) and "max1" not in names(
        build_net(text, level=2)
    )
    assert "staged" not in names(build_net(text, stages=["s1"]))
    staged = names(build_net(text, stages=["s1", "s2"]))
    assert "staged" in staged and "not_s1" not in staged
    assert "not_s1" in names(build_net(text))


def test_include_and_exclude_together_is_an_error():
    text = """layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } }
              include { phase: TRAIN } exclude { phase: TEST } }"""
    with pytest.raises(NetError, match=r"'in'.*include and exclude"):
        build_net(text)


def test_split_layers_are_inserted_with_caffe_names():
    second_loss = (
        'layer { name: "loss2" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "l2" }'
    )
    net = build_net(MLP + second_loss)
    layers = list(net.layer_dict)
    assert "label_input_1_split" in layers and "ip2_ip2_0_split" in layers
    assert layers.index("ip2_ip2_0_split") == layers.index("ip2") + 1
    assert net.top_names["ip2_ip2_0_split"] == ["ip2_ip2_0_split_0", "ip2_ip2_0_split_1"]
    assert net.bottom_names["loss"][0] == "ip2_ip2_0_split_0"
    assert net.bottom_names["loss2"][0] == "ip2_ip2_0_split_1"
    assert net.outputs == ["l2", "loss"]  # sorted by name


def test_loss_weight_moves_to_split_top_zero():
    text = MLP.replace('bottom: "ip1" top: "ip2"', 'bottom: "ip1" top: "ip2" loss_weight: 2')
    net = build_net(text)
    split = net.layer_dict["ip2_ip2_0_split"]
    assert list(split.layer_param.loss_weight) == [2.0, 0.0]
    assert list(net.layer_dict["ip2"].layer_param.loss_weight) == []
    fill_inputs(net)
    out = net.forward()
    expected = out["loss"] + 2 * net.blobs["ip2_ip2_0_split_0"].data.sum()
    assert net._forward(0, len(net.layers) - 1) == pytest.approx(float(expected), rel=1e-5)


def test_anonymous_loss_top_and_explicit_loss_weight():
    text = MLP.replace('top: "loss" }', "loss_weight: 0.5 }")
    net = build_net(text)
    assert "(automatic)" in net.blobs and net.outputs == []
    fill_inputs(net)
    total = net._forward(0, len(net.layers) - 1)
    assert net.blobs["(automatic)"].diff == 0.5
    assert total == pytest.approx(0.5 * float(net.blobs["(automatic)"].data), rel=1e-6)


def test_weight_sharing_aliases_data_and_accumulates_gradients():
    text = """
    layer { name: "in" type: "Input" top: "x" top: "label"
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
    layer { name: "a" type: "InnerProduct" bottom: "x" top: "a" param { name: "w" }
            inner_product_param { num_output: 3 bias_term: false
                                  weight_filler { type: "xavier" } } }
    layer { name: "b" type: "InnerProduct" bottom: "a" top: "b" param { name: "w" }
            inner_product_param { num_output: 3 bias_term: false
                                  weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "b" bottom: "label" }
    """
    net = build_net(text)
    wa, wb = net.params["a"][0], net.params["b"][0]
    np.testing.assert_array_equal(wa.data, wb.data)
    assert len(net.learnable_params) == 1
    wa.data[...] = np.eye(3) * 0.7
    np.testing.assert_array_equal(wb.data, wa.data)
    net.blobs["x"].data[...] = [[1, 2, 3], [0, -1, 2]]
    net.blobs["label"].data[...] = [0, 2]
    net.forward()
    net.clear_param_diffs()
    net.backward()
    x = torch.tensor([[1.0, 2, 3], [0, -1, 2]])
    w = torch.tensor(np.eye(3) * 0.7, dtype=torch.float32, requires_grad=True)
    torch.nn.functional.cross_entropy(x @ w.t() @ w.t(), torch.tensor([0, 2])).backward()
    np.testing.assert_allclose(wa.diff, w.grad.numpy(), rtol=1e-5)
    assert net.layer_param_range[net.layer_index("b")] == (9, 9)  # owns nothing


SHARED_OWNER = """
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "x" top: "a" param { name: "w" lr_mult: 1 }
        inner_product_param { num_output: 3 bias_term: false } }
"""


@pytest.mark.parametrize(
    "sharer,error",
    [
        ('param { name: "w" } inner_product_param { num_output: 2 bias_term: false }',
         "'w'.*layer 'b'.*shapes differ"),
        ('param { name: "w" lr_mult: 2 } inner_product_param { num_output: 3 bias_term: false }',
         "Shared param 'w' has mismatched lr_mult"),
    ],
)  # fmt: skip
def test_weight_sharing_errors(sharer, error):
    text = (
        SHARED_OWNER + f'layer {{ name: "b" type: "InnerProduct" bottom: "x" top: "b" {sharer} }}'
    )
    with pytest.raises(NetError, match=error):
        build_net(text)


def test_permissive_sharing_allows_equal_counts():
    text = """
    layer { name: "in" type: "Input" top: "x" top: "y"
            input_param { shape { dim: 2 dim: 6 } shape { dim: 2 dim: 3 } } }
    layer { name: "a" type: "InnerProduct" bottom: "x" top: "a" param { name: "w" }
            inner_product_param { num_output: 2 bias_term: false } }
    layer { name: "b" type: "InnerProduct" bottom: "y" top: "b"
            param { name: "w" share_mode: PERMISSIVE }
            inner_product_param { num_output: 4 bias_term: false } }
    """
    net = build_net(text)
    assert net.params["a"][0].shape == [2, 6] and net.params["b"][0].shape == [4, 3]
    net.params["a"][0].data[...] = np.arange(12).reshape(2, 6)
    np.testing.assert_array_equal(net.params["b"][0].data, np.arange(12).reshape(4, 3))


def test_backward_pruning_propagate_down_and_force_backward():
    text = """
    layer { name: "in" type: "Input" top: "x" top: "label"
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
    layer { name: "frozen" type: "InnerProduct" bottom: "x" top: "h" param { lr_mult: 0 }
            inner_product_param { num_output: 3 bias_term: false } }
    layer { name: "side" type: "InnerProduct" bottom: "h" top: "side"
            inner_product_param { num_output: 2 } }
    layer { name: "head" type: "InnerProduct" bottom: "h" top: "head"
            inner_product_param { num_output: 3 } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "head" bottom: "label" }
    """
    net = build_net(text)
    need = dict(zip(net._layer_names, net.layer_need_backward))
    assert not need["frozen"] and not need["side"] and need["head"] and need["loss"]
    assert not need["in"]
    forced = build_net("force_backward: true\n" + text)
    assert all(forced.layer_need_backward)
    loss_index = forced.layer_index("loss")
    assert forced._bottom_need_backward[loss_index] == [True, False]  # never into labels
    blocked = build_net(text.replace('bottom: "h" top: "head"',
                                     'bottom: "h" top: "head" propagate_down: false'))  # fmt: skip
    head = blocked.layer_index("head")
    assert blocked._bottom_need_backward[head] == [False]


def test_callbacks_run_in_order_and_after_backward_fires_for_every_layer():
    net = build_net(MLP)
    fill_inputs(net)
    events = []
    net.before_forward(lambda i: events.append(("bf", i)))
    net.after_forward(lambda i: events.append(("af", i)))
    net.before_backward(lambda i: events.append(("bb", i)))
    net.after_backward(lambda i: events.append(("ab", i)))
    net.forward()
    net.backward()
    n = len(net.layers)
    forward = [e for i in range(n) for e in (("bf", i), ("af", i))]
    backward = [e for i in reversed(range(n)) for e in (("bb", i), ("ab", i))]
    assert events == forward + backward


@pytest.mark.parametrize(
    "text,message",
    [
        ('layer { name: "r" type: "ReLU" bottom: "nope" top: "y" }',
         r"Unknown bottom blob 'nope' \(layer 'r', bottom index 0\)"),
        ('layer { name: "i" type: "Input" top: "x" input_param { shape { dim: 1 } } }\n'
         'layer { name: "j" type: "Input" top: "x" input_param { shape { dim: 1 } } }',
         "Top blob 'x' produced by multiple sources"),
        ('layer { name: "w" type: "Wobble" }', "Unknown layer type: 'Wobble'.*InnerProduct"),
        ('layer { name: "i" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 } } }\n'
         'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" param {} param {} param {}'
         ' inner_product_param { num_output: 1 } }', "Too many params specified for layer ip"),
        ('layer { name: "r" type: "ReLU" }', "Layer 'r' \\(type ReLU\\) takes 1 bottom"),
    ],
)  # fmt: skip
def test_construction_errors_name_layer_and_blob(text, message):
    with pytest.raises(NetError, match=message):
        build_net(text)


def test_forward_and_backward_with_keywords_and_ranges():
    net = build_net(MLP)
    rng = np.random.default_rng(1)
    data = rng.standard_normal((4, 5)).astype(np.float32)
    label = np.array([0, 1, 2, 0], np.float32)
    out = net.forward(data=data, label=label)
    assert set(out) == {"loss"}
    partial = net.forward(end="ip1", data=data, label=label)
    assert set(partial) == {"ip1"}
    with pytest.raises(caffe.errors.CaffeError, match="do not match net inputs"):
        net.forward(data=data)
    with pytest.raises(caffe.errors.CaffeError, match="not batch sized"):
        net.forward(data=data[:2], label=label[:2])
    net.forward(data=data, label=label)
    grads = net.backward()
    assert set(grads) == {"data", "label"} and grads["data"].shape == (4, 5)
    assert np.abs(grads["data"]).sum() == 0  # nothing needs the input gradient here


def test_forward_all_batches_and_strips_padding():
    text = """
    layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 3 dim: 2 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "data" top: "out"
            inner_product_param { num_output: 1 bias_term: false
                                  weight_filler { type: "constant" value: 1 } } }
    """
    net = build_net(text, caffe.TEST)
    data = np.arange(14, dtype=np.float32).reshape(7, 2)
    out = net.forward_all(data=data)
    np.testing.assert_allclose(out["out"][:, 0], data.sum(axis=1))
