import sys
import textwrap
import uuid

import numpy as np
import pytest
from google.protobuf import text_format

import caffe
from caffe.errors import NetError
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward

USER_MODULE = '''
import numpy as np
import caffe


class TimesFactor(caffe.Layer):
    """y = factor * x, factor from param_str; records what it saw at setup."""

    def setup(self, bottom, top):
        self.factor = float(self.param_str)
        self.phase_at_setup = self.phase

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self.factor * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = self.factor * top[0].diff


class LearnedScale(caffe.Layer):
    """y = w * x with one learnable weight per feature, initialised to 1."""

    def setup(self, bottom, top):
        if not self.blobs:
            self.blobs.add_blob(bottom[0].shape[1])
            self.blobs[0].data[...] = 1.0

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data * self.blobs[0].data

    def backward(self, top, propagate_down, bottom):
        self.blobs[0].diff[...] += (top[0].diff * bottom[0].data).sum(axis=0)
        if propagate_down[0]:
            bottom[0].diff[...] = top[0].diff * self.blobs[0].data


class HalfSquaredDistance(caffe.Layer):
    """A loss written the BVLC way: the batch size is bottom[0].num (Caffe's legacy
    accessor, the first axis for blobs of up to 4 axes)."""

    def reshape(self, bottom, top):
        self.delta = np.zeros(bottom[0].data.shape, dtype=np.float32)
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.delta[...] = bottom[0].data - bottom[1].data
        top[0].data[...] = np.square(self.delta).sum() / bottom[0].num / 2

    def backward(self, top, propagate_down, bottom):
        for i, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[i]:
                bottom[i].diff[...] = sign * self.delta / bottom[i].num


class FailsInSetup(caffe.Layer):
    def setup(self, bottom, top):
        raise KeyError("user setup failed")

    def reshape(self, bottom, top):
        pass


class FailsInForward(TimesFactor):
    def forward(self, bottom, top):
        raise ValueError("user forward failed")


class NotALayer:
    pass
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A fresh importable module holding the user layers above; returns its name."""
    name = f"user_layers_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def python_text(module, layer, param_str=""):
    return (
        f'type: "Python" python_param {{ module: "{module}" layer: "{layer}" '
        f'param_str: "{param_str}" }}'
    )


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (2, 3, 4)])
@pytest.mark.parametrize("phase", [caffe.TRAIN, caffe.TEST])
def test_user_layer_runs_with_param_str_and_phase(user_module, shape, phase):
    x = np.random.default_rng(90).normal(0, 1, shape).astype(np.float32)
    layer, bottom, top = make_layer(
        python_text(user_module, "TimesFactor", "2.5"), [x], phase=phase
    )
    assert layer.phase_at_setup == phase and layer.param_str == "2.5"
    assert layer.type == "Python"
    np.testing.assert_allclose(run_forward(layer, bottom, top)[0], 2.5 * x, rtol=1e-6)
    check_gradient(layer, bottom, top)


NET = """
name: "python_net"
layer { name: "data" type: "Input" top: "x" top: "target"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 3 } } }
layer { name: "scale" type: "Python" bottom: "x" top: "y" param { name: "w" }
        python_param { module: "MODULE" layer: "LearnedScale" } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "target" top: "loss" }
"""


def build_net(module, text=NET):
    param = text_format.Parse(text.replace("MODULE", module), caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    return caffe.Net(param)


def test_learnable_blobs_train_through_a_net(user_module, tmp_path):
    net = build_net(user_module)
    rng = np.random.default_rng(91)
    x = rng.normal(0, 1, (4, 3)).astype(np.float32)
    true_w = np.array([0.5, -2.0, 3.0], np.float32)
    net.blobs["x"].data[...] = x
    net.blobs["target"].data[...] = x * true_w
    weight = net.params["scale"][0]
    losses = []
    for _ in range(200):
        net.clear_param_diffs()
        losses.append(float(net.forward()["loss"]))
        net.backward()
        if not losses[1:]:  # the first gradient, by hand: Σ_n (w·x − t)·x / N
            expected = ((x * 1.0 - x * true_w) * x).sum(0) / 4
            np.testing.assert_allclose(weight.diff, expected, rtol=1e-5)
        weight.data[...] -= 0.5 * weight.diff
    assert losses[-1] < 1e-6 * losses[0]
    np.testing.assert_allclose(weight.data, true_w, rtol=1e-3)
    # Saved and loaded like any parameter.
    path = str(tmp_path / "python.caffemodel")
    net.save(path)
    fresh = build_net(user_module)
    np.testing.assert_array_equal(fresh.params["scale"][0].data, 1.0)
    fresh.copy_from(path)
    np.testing.assert_array_equal(fresh.params["scale"][0].data, weight.data)


def test_learnable_blobs_are_shared_by_name(user_module):
    text = NET.replace(
        'layer { name: "loss"',
        'layer { name: "scale2" type: "Python" bottom: "y" top: "z" param { name: "w" } '
        'python_param { module: "MODULE" layer: "LearnedScale" } }\nlayer { name: "loss"',
    ).replace('bottom: "y" bottom: "target"', 'bottom: "z" bottom: "target"')
    net = build_net(user_module, text)
    assert len(net.learnable_params) == 1
    net.params["scale"][0].data[...] = [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(net.params["scale2"][0].data, [1.0, 2.0, 3.0])
    x = np.ones((4, 3), np.float32)
    net.blobs["x"].data[...] = x
    net.forward()
    np.testing.assert_array_equal(net.blobs["z"].data, x * [1.0, 4.0, 9.0])


LOSS_NET = """
name: "python_loss"
force_backward: true
layer { name: "data" type: "Input" top: "x" top: "target"
        input_param { shape { dim: 10 dim: 4 } shape { dim: 10 dim: 4 } } }
layer { name: "loss" LOSS bottom: "x" bottom: "target" top: "loss" loss_weight: 1 }
"""
PYTHON_LOSS = 'type: "Python" python_param { module: "MODULE" layer: "HalfSquaredDistance" }'


def test_a_loss_using_num_as_the_batch_size_matches_euclidean_loss(user_module):
    # A 10×4 blob has num 10 (BVLC's LegacyShape pads missing axes at the end).
    rng = np.random.default_rng(92)
    x, target = rng.normal(0, 1, (2, 10, 4)).astype(np.float32)
    results = []
    for loss in (PYTHON_LOSS, 'type: "EuclideanLoss"'):
        net = build_net(user_module, LOSS_NET.replace("LOSS", loss))
        value = net.forward(x=x, target=target)["loss"].item()
        results.append((value, net.backward()["x"].copy()))
    (py_loss, py_dx), (ref_loss, ref_dx) = results
    np.testing.assert_allclose(py_loss, np.square(x - target).sum() / 20, rtol=1e-5)
    np.testing.assert_allclose(py_loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(py_dx, ref_dx, rtol=1e-5, atol=1e-7)


def test_user_exceptions_keep_their_type(user_module):
    with pytest.raises(KeyError, match="user setup failed"):
        make_layer(python_text(user_module, "FailsInSetup"), [np.ones((1, 2))])
    layer, bottom, top = make_layer(python_text(user_module, "FailsInForward", "1"), [np.ones(2)])
    with pytest.raises(ValueError, match="user forward failed"):
        layer.run_forward(bottom, top)


def test_bad_python_param_is_explained(user_module):
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        make_layer(python_text("no_such_module_here", "X"), [np.ones(2)])
    with pytest.raises(AttributeError, match=r"under_test.*NoSuchLayer"):
        make_layer(python_text(user_module, "NoSuchLayer"), [np.ones(2)])
    with pytest.raises(NetError, match=r"under_test.*not a subclass of caffe.Layer"):
        make_layer(python_text(user_module, "NotALayer"), [np.ones(2)])
    with pytest.raises(NetError, match=r"under_test.*python_param.module"):
        make_layer('type: "Python"', [np.ones(2)])
