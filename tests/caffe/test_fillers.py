"""Weight fillers: each kind's values, drawing in place, and a net's deferred fills (Note
[deferred fills] in caffe/fillers.py): the same weights, in the same order of draws, as
filling each blob when its layer is set up, and the parameters resident once while building."""

import contextlib
import math
import re
import sys
import types

import numpy as np
import pytest
import torch
from google.protobuf import text_format

import caffe
import caffe.fillers
import caffe.net
from caffe.blob import Blob
from caffe.errors import NetError
from caffe.fillers import filler_values
from caffe.layer import Layer, layer_class
from caffe.proto import caffe_pb2


def filler(text: str) -> caffe_pb2.FillerParameter:
    return text_format.Parse(text, caffe_pb2.FillerParameter())


def test_constant_uniform_and_gaussian():
    np.testing.assert_array_equal(filler_values(filler("value: 2.5"), (3, 4)), np.full((3, 4), 2.5))
    torch.manual_seed(0)
    u = filler_values(filler('type: "uniform" min: -0.5 max: 2'), (200, 100))
    assert float(u.min()) >= -0.5 and float(u.max()) <= 2 and abs(float(u.mean()) - 0.75) < 0.02
    g = filler_values(filler('type: "gaussian" mean: 1 std: 0.5'), (200, 100))
    assert abs(float(g.mean()) - 1) < 0.01 and abs(float(g.std()) - 0.5) < 0.01


def test_xavier_and_msra_scale_by_the_fans():
    torch.manual_seed(0)
    shape = (64, 32, 3, 3)  # fan_in 288, fan_out 576
    x = filler_values(filler('type: "xavier"'), shape)
    assert float(x.abs().max()) <= math.sqrt(3 / 288)
    x = filler_values(filler('type: "xavier" variance_norm: AVERAGE'), shape)
    assert float(x.abs().max()) <= math.sqrt(3 / 432) and float(x.abs().max()) > 0.9 * math.sqrt(
        3 / 432
    )
    m = filler_values(filler('type: "msra" variance_norm: FAN_OUT'), shape)
    assert abs(float(m.std()) - math.sqrt(2 / 576)) < 0.002


def test_positive_unitball_rows_sum_to_one_and_sparse_gaussian_keeps_a_share():
    torch.manual_seed(0)
    p = filler_values(filler('type: "positive_unitball"'), (5, 3, 2))
    np.testing.assert_allclose(p.view(5, -1).sum(1), np.ones(5), rtol=1e-6)
    assert float(p.min()) >= 0
    s = filler_values(filler('type: "gaussian" sparse: 25'), (100, 400))
    assert abs(float((s != 0).float().mean()) - 0.25) < 0.01


def test_bilinear_is_the_upsampling_kernel():
    # k = 4: f = ceil(k/2) = 2, c = (k - 1)/(2f) = 0.75; the axis weights 1 - |i/f - c| for
    # i = 0..3 are 0.25, 0.75, 0.75, 0.25 (upsampling by 2).
    b = filler_values(filler('type: "bilinear"'), (2, 1, 4, 4))
    axis = np.array([0.25, 0.75, 0.75, 0.25], np.float32)
    np.testing.assert_allclose(b[1, 0], np.outer(axis, axis), rtol=1e-6)


@pytest.mark.parametrize("text", ['type: "gaussian" std: 0.1', 'type: "uniform"',
                                  'type: "xavier"', 'type: "msra"', 'type: "positive_unitball"',
                                  'type: "gaussian" sparse: 3', 'type: "bilinear"',
                                  "value: 3"])  # fmt: skip
def test_drawing_in_place_draws_what_a_fresh_tensor_gets(text):
    shape = (6, 5, 3, 3)
    torch.manual_seed(7)
    fresh = filler_values(filler(text), shape)
    memory = torch.full((fresh.numel() + 10,), -1.0)
    out = memory[: fresh.numel()].view(shape)
    torch.manual_seed(7)
    assert filler_values(filler(text), shape, out=out) is out
    torch.testing.assert_close(out, fresh, rtol=0, atol=0)
    assert float(memory[-1]) == -1  # nothing past it


# ----- deferred fills inside a net's build -------------------------------------------------
class DrawsAtSetup(Layer):
    """A user's Python layer that draws from torch's global generator at setup."""

    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        self.drawn = torch.rand(3)

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data


@pytest.fixture
def python_layer_module(monkeypatch):
    module = types.ModuleType("fill_order_layers")
    module.DrawsAtSetup = DrawsAtSetup
    monkeypatch.setitem(sys.modules, "fill_order_layers", module)


def write_h5(tmp_path) -> str:
    import h5py

    path = tmp_path / "rows.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(40, dtype=np.float32).reshape(10, 4)
    (tmp_path / "list.txt").write_text(f"{path}\n")
    return str(tmp_path / "list.txt")


NET = """
layer {{ name: "in" type: "Input" top: "x" input_param {{ shape {{ dim: 2 dim: 4 }} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "x" top: "h"
        inner_product_param {{ num_output: 3 weight_filler {{ type: "gaussian" std: 1 }}
                               bias_filler {{ type: "uniform" }} }} }}
layer {{ name: "user" type: "Python" bottom: "h" top: "h2"
        python_param {{ module: "fill_order_layers" layer: "DrawsAtSetup" }} }}
layer {{ name: "rows" type: "HDF5Data" top: "data"
        hdf5_data_param {{ source: "{source}" batch_size: 2 shuffle: true }} }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "h2" top: "out"
        inner_product_param {{ num_output: 5 weight_filler {{ type: "xavier" }} }} }}
"""


def build(source: str) -> caffe.Net:
    param = text_format.Parse(NET.format(source=source), caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    caffe.set_random_seed(11)
    return caffe.Net(param)


def test_deferred_fills_draw_what_immediate_fills_draw(tmp_path, monkeypatch, python_layer_module):
    """Fills waiting for the parameter buffer, a user's layer and a data layer drawing in
    between: every value is the one that filling at setup gives."""
    source = write_h5(tmp_path)
    deferred = build(source)
    with monkeypatch.context() as patch:
        patch.setattr(caffe.net, "deferred_fills", lambda: contextlib.nullcontext([]))
        immediate = build(source)
    for name in ("ip1", "ip2"):
        for ours, theirs in zip(deferred.params[name], immediate.params[name]):
            np.testing.assert_array_equal(ours.data, theirs.data, err_msg=name)
    user = deferred.layers[list(deferred._layer_names).index("user")]
    user_immediate = immediate.layers[list(immediate._layer_names).index("user")]
    torch.testing.assert_close(user.drawn, user_immediate.drawn, rtol=0, atol=0)
    rows = deferred.layer_dict["rows"].generator.initial_seed()
    assert rows == immediate.layer_dict["rows"].generator.initial_seed()
    # And the parameters are views of the net's flat buffer, filled there.
    w = deferred.params["ip2"][0]
    assert np.shares_memory(w.data, deferred.param_data.numpy())


def test_a_layer_class_registered_from_outside_may_draw_at_setup(monkeypatch):
    """A class a user registers under a type of its own (not a Python layer) is user code
    too: the fills pending before it draw first, as they would have at once."""
    import caffe.layer

    monkeypatch.setitem(caffe.layer._REGISTRY._classes, "DrawsAtSetup", DrawsAtSetup)
    text = """layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 4 } } }
        layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h"
                inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }
        layer { name: "user" type: "DrawsAtSetup" bottom: "h" top: "h2" }"""
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    caffe.set_random_seed(9)
    weights = filler_values(filler('type: "gaussian"'), (3, 4))
    drawn = torch.rand(3)
    caffe.set_random_seed(9)
    net = caffe.Net(param)
    np.testing.assert_array_equal(net.params["ip"][0].data, weights)
    torch.testing.assert_close(net.layer_dict["user"].drawn, drawn, rtol=0, atol=0)


def test_a_built_in_layer_drawing_unannounced_is_named(monkeypatch):
    relu = layer_class("ReLU")
    plain_setup = relu.setup

    def drawing_setup(self, bottom, top):
        torch.rand(1)
        plain_setup(self, bottom, top)

    monkeypatch.setattr(relu, "setup", drawing_setup)
    param = text_format.Parse(
        """layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 4 } } }
        layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h"
                inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }
        layer { name: "act" type: "ReLU" bottom: "h" top: "h" }""",
        caffe_pb2.NetParameter(),
    )
    with pytest.raises(NetError, match=re.escape("Layer 'act' (type ReLU) drew")):
        caffe.Net(param)


def test_a_layer_reading_its_weights_at_setup_sees_them_filled(monkeypatch):
    ip = layer_class("InnerProduct")
    plain_setup = ip.setup
    seen = []

    def reading_setup(self, bottom, top):
        plain_setup(self, bottom, top)
        seen.append(self.blobs[0].data.copy())

    monkeypatch.setattr(ip, "setup", reading_setup)
    param = text_format.Parse(
        """layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 4 } } }
        layer { name: "a" type: "InnerProduct" bottom: "x" top: "h"
                inner_product_param { num_output: 3 weight_filler { type: "constant" value: 2 } } }
        layer { name: "b" type: "InnerProduct" bottom: "h" top: "o"
                inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }""",
        caffe_pb2.NetParameter(),
    )
    caffe.set_random_seed(3)
    net = caffe.Net(param)
    np.testing.assert_array_equal(seen[0], np.full((3, 4), 2, np.float32))
    np.testing.assert_array_equal(seen[1], net.params["b"][0].data)
    assert np.abs(seen[1]).sum() > 0


def test_a_net_built_inside_a_build_keeps_both_orders():
    """Nested builds (a layer whose setup builds a net): the outer fills pending before the
    inner build draw first, and each net gets the weights that filling at once gives."""
    text = """layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 4 } } }
        layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h"
                inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }"""
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    caffe.set_random_seed(5)
    expected_outer = filler_values(filler('type: "gaussian"'), (3, 4)).numpy()
    expected_inner = filler_values(filler('type: "gaussian"'), (3, 4)).numpy()
    with caffe.fillers.deferred_fills() as outer_pending:
        caffe.set_random_seed(5)
        outer = Blob((3, 4))
        caffe.fillers.fill(outer, filler('type: "gaussian"'))
        assert len(outer_pending) == 1 and outer.awaits_fill
        inner = caffe.Net(param)  # its own scope: the outer fill draws first
        assert not outer_pending
    np.testing.assert_array_equal(outer.data, expected_outer)
    np.testing.assert_array_equal(inner.params["ip"][0].data, expected_inner)
