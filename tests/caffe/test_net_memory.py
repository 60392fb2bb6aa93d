"""Blob memory stays put, as in BVLC: a numpy view taken from net.blobs[name].data (or
.diff, or a parameter) before forward, backward or a solver step is that blob's memory
afterwards and shows the new values (BVLC's net_surgery notebook and many user scripts
rely on it); reshaping to the same or a smaller shape keeps the memory too."""

import os

import numpy as np
from google.protobuf import text_format

import caffe
from caffe.proto import caffe_pb2
from tests.caffe.layers.cuda_compare import needs_cuda
from tests.caffe.solver_harness import write_solver

NET = """
name: "memory"
force_backward: true
layer { name: "in" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 dim: 8 dim: 8 } shape { dim: 4 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 5 kernel_size: 3 weight_filler { type: "gaussian" } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "norm" type: "LRN" bottom: "conv" top: "norm" lrn_param { local_size: 3 } }
layer { name: "pool" type: "Pooling" bottom: "norm" top: "pool"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "flat" type: "Flatten" bottom: "pool" top: "flat" }
layer { name: "ip" type: "InnerProduct" bottom: "flat" top: "ip"
        inner_product_param { num_output: 6 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "drop" type: "Dropout" bottom: "ip" top: "ip" }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def build() -> caffe.Net:
    param = text_format.Parse(NET, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    return caffe.Net(param)


def feed(net: caffe.Net, seed: int) -> None:
    rng = np.random.default_rng(seed)
    net.blobs["data"].data[...] = rng.normal(0, 1, net.blobs["data"].shape)
    net.blobs["label"].data[...] = rng.integers(0, 6, net.blobs["label"].shape)


def views(net: caffe.Net) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {name: (blob.data, blob.diff) for name, blob in net.blobs.items()}


def assert_live(net: caffe.Net, taken: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    for name, blob in net.blobs.items():
        data, diff = taken[name]
        assert np.shares_memory(data, blob.data), f"{name} data moved"
        assert np.shares_memory(diff, blob.diff), f"{name} diff moved"
        np.testing.assert_array_equal(data, blob.data, err_msg=name)
        np.testing.assert_array_equal(diff, blob.diff, err_msg=name)


def test_views_taken_before_forward_and_backward_see_the_results():
    caffe.set_random_seed(1)
    net = build()
    feed(net, 0)
    taken = views(net)
    assert "ip_drop_0_split_0" in taken  # split tops are covered too
    net.forward()
    assert_live(net, taken)
    conv_data, conv_diff = taken["conv"]
    assert np.abs(conv_data).sum() > 0 and np.all(conv_data >= 0)  # ReLU'd, in place
    net.backward()
    assert_live(net, taken)
    assert np.abs(conv_diff).sum() > 0
    before = taken["prob"][0].copy()
    feed(net, 1)
    net.forward()
    assert_live(net, taken)
    assert not np.allclose(taken["prob"][0], before)


def test_the_same_values_whether_or_not_views_pin_the_memory():
    """Unwatched, a convolution's top adopts its kernel's output (Note [taking fresh
    tensors]); watched, it is written in place: the values are the same."""
    results = []
    for watch in (False, True):
        caffe.set_random_seed(7)
        net = build()
        taken = views(net) if watch else None
        for seed in (8, 9):
            feed(net, seed)
            net.clear_param_diffs()
            net.forward()
            net.backward()
        assert taken is None or np.shares_memory(taken["conv"][0], net.blobs["conv"].data)
        results.append({name: (b.data.copy(), b.diff.copy()) for name, b in net.blobs.items()})
        results[-1].update({f"{n}/{i}": (p.data.copy(), p.diff.copy())
                            for n, ps in net.params.items() for i, p in enumerate(ps)})  # fmt: skip
    for name, (data, diff) in results[0].items():
        np.testing.assert_array_equal(data, results[1][name][0], err_msg=name)
        np.testing.assert_array_equal(diff, results[1][name][1], err_msg=name)


def test_shared_tops_are_their_bottoms_memory():
    net = build()
    feed(net, 2)
    net.forward()
    net.backward()
    for top, bottom in (("flat", "pool"), ("ip_drop_0_split_0", "ip"), ("ip_drop_0_split_1", "ip")):
        assert np.shares_memory(net.blobs[top].data, net.blobs[bottom].data), top
    assert np.shares_memory(net.blobs["flat"].diff, net.blobs["pool"].diff)


def test_solver_steps_keep_blob_and_parameter_memory(tmp_path):
    caffe.set_random_seed(3)
    solver = caffe.get_solver(
        write_solver(tmp_path, "base_lr: 0.1\nmomentum: 0.9\nlr_policy: 'fixed'\n", NET)
    )
    net = solver.net
    feed(net, 3)
    taken = views(net)
    weight = net.params["ip"][0]
    weight_data, weight_diff = weight.data, weight.diff
    start = weight_data.copy()
    solver.step(2)
    assert_live(net, taken)
    assert np.shares_memory(weight_data, weight.data) and np.shares_memory(weight_diff, weight.diff)
    assert not np.allclose(weight_data, start)


def test_reshape_to_the_same_or_a_smaller_shape_keeps_the_memory():
    net = build()
    feed(net, 4)
    net.forward()
    taken = views(net)
    net.blobs["data"].reshape(4, 3, 8, 8)
    net.reshape()
    net.forward()
    assert_live(net, taken)
    conv = taken["conv"][0]
    net.blobs["data"].reshape(2, 3, 8, 8)  # a smaller batch: the first items' memory
    net.blobs["label"].reshape(2)
    net.reshape()
    net.forward()
    assert np.shares_memory(conv, net.blobs["conv"].data)
    np.testing.assert_array_equal(conv[:2], net.blobs["conv"].data)


@needs_cuda
def test_cuda_host_mirrors_stay_put_and_coherent():
    caffe.set_mode_gpu()
    try:
        net = build()
        feed(net, 5)
        net.forward()
        first = net.blobs["prob"].data
        before = first.copy()
        feed(net, 6)
        net.forward()
        again = net.blobs["prob"].data  # re-reading syncs the same host memory
        assert np.shares_memory(first, again) and not np.allclose(before, again)
        # Host mirrors read between backward and update must not undo the update.
        net.clear_param_diffs()
        net.backward()
        weight = net.params["ip"][0]
        value, grad = weight.data.copy(), weight.diff.copy()
        net.update()
        np.testing.assert_allclose(weight.data, value - grad, rtol=1e-6, atol=1e-7)
        net.clear_param_diffs()
        net.backward()  # from zero: the mirror read above must not come back as a gradient
        np.testing.assert_allclose(weight.diff, grad, rtol=1e-4, atol=1e-6)
    finally:
        caffe.set_mode_cpu()


# Every top of this net by (data count, whether it holds a diff after a training step):
# Caffe's memory and no more. The inputs and labels get no diff (no layer sends one), split
# tops share their bottom's data, in-place tops are their bottom, the split top that feeds
# Accuracy gets no diff (Accuracy sends none), and the loss's diff holds its weight.
TRAIN_NET = """
name: "closed_form"
layer { name: "in" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 4 dim: 3 dim: 8 dim: 8 } shape { dim: 4 }
                           data_filler { type: "gaussian" } data_filler { type: "constant" } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 5 kernel_size: 3 weight_filler { type: "gaussian" } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
        inner_product_param { num_output: 6 weight_filler { type: "gaussian" } } }
layer { name: "drop" type: "Dropout" bottom: "ip" top: "ip" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" }
"""
TOPS = {  # blob: (elements, has a diff)
    "data": (4 * 3 * 8 * 8, False),
    "label": (4, False),
    "conv": (4 * 5 * 6 * 6, True),
    "pool": (4 * 5 * 3 * 3, True),
    "ip": (4 * 6, True),
    "ip_drop_0_split_0": (0, True),  # shares ip's data
    "ip_drop_0_split_1": (0, False),
    "label_in_1_split_0": (0, False),
    "label_in_1_split_1": (0, False),
    "loss": (1, True),
    "acc": (1, False),
}


def test_after_a_training_step_the_blobs_hold_caffes_memory_and_no_more(tmp_path):
    solver = caffe.get_solver(
        write_solver(tmp_path, "base_lr: 0.1\nmomentum: 0.9\nlr_policy: 'fixed'\n", TRAIN_NET)
    )
    solver.step(1)
    net = solver.net
    assert set(net.blobs) == set(TOPS)
    for name, (_, has_diff) in TOPS.items():
        assert net.blobs[name].has_diff == has_diff, name
    diff_elements = sum(net.blobs[name].count for name, (_, has) in TOPS.items() if has)
    params = sum(blob.count for blobs in net.params.values() for blob in blobs)
    assert net.memory_report() == {
        "data": 4 * sum(count for count, _ in TOPS.values()),
        "diff": 4 * diff_elements,
        "params": 4 * 2 * params,
    }


BUILD_PEAK = r"""
import re, sys
import caffe
from caffe.proto import caffe_pb2
from google.protobuf import text_format

def mib(field):
    status = open("/proc/self/status").read()
    return int(re.search(field + r":\s+(\d+)", status).group(1)) / 1024

def solver_param(outputs):
    net = text_format.Parse('''
    layer { name: "in" type: "DummyData" top: "x" top: "label"
            dummy_data_param { shape { dim: 64 dim: 4096 } shape { dim: 64 }
                               data_filler { type: "gaussian" } data_filler { value: 1 } } }
    layer { name: "fc" type: "InnerProduct" bottom: "x" top: "fc"
            inner_product_param { num_output: %d weight_filler { type: "gaussian" std: 0.01 } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
    ''' % outputs, caffe_pb2.NetParameter())
    return caffe_pb2.SolverParameter(net_param=net, base_lr=0.01, momentum=0.9,
                                     lr_policy="fixed", max_iter=1, display=0,
                                     snapshot_after_train=False)

caffe.set_random_seed(1)
# A small build and step first: the first net imports every layer module and sets up the
# allocator; what is measured below is the big net's own memory.
caffe.SGDSolver(solver_param(2)).step(1)
param = solver_param(6400)
open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS: the build's own peak
before = mib("VmRSS")
solver = caffe.SGDSolver(param)
built = mib("VmHWM") - before
open("/proc/self/clear_refs", "w").write("5")
solver.step(1)
print(built, mib("VmHWM") - before)
"""


def test_building_holds_the_weights_once(tmp_path):
    """Building a net and its solver makes the weights resident once: they are drawn into the
    net's parameter buffer (Note [deferred fills]), and the parameter diffs, the solver's
    history and the activations stay untouched zeros until a step writes them (Note [zeros
    untouched until written]). Before, this build held the 100 MiB of weights about 3x
    (319 MiB)."""
    import subprocess
    import sys

    weights_mib = 4096 * 6400 * 4 / 2**20  # 100 MiB
    out = subprocess.run([sys.executable, "-c", BUILD_PEAK], capture_output=True, text=True,
                         env={**os.environ, "GLOG_minloglevel": "2"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    built, trained = map(float, out.stdout.split()[-2:])
    assert built <= 1.15 * weights_mib, f"build peak {built:.0f} MiB over {weights_mib:.0f}"
    # The step writes the diff and the history: resident now, so the zeros were real.
    assert trained >= 2 * weights_mib
