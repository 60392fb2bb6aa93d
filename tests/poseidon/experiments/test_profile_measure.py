"""measure_profile on a small real net: round trip through the file, what every layer holds,
the batch override and its errors."""

from __future__ import annotations

import pytest

from caffe.formats.proto_io import parse_net_text
from caffe.parallel.layout import sync_layout
from caffe.proto import caffe_pb2
from poseidon.experiments.measure import measure_profile
from poseidon.experiments.netspec import set_batch
from poseidon.experiments.profile import SyncShape, load_profile
from poseidon.experiments.profile_measure import build_net, gpu_tag, host_seconds
from poseidon.experiments.resolve import model_label, resolve_model
from tests.poseidon.experiments.nets import CIFAR10_QUICK, SMALL


@pytest.fixture(scope="module")
def cifar_profile():
    return measure_profile(str(CIFAR10_QUICK), batch=2, iterations=2)


def test_round_trip_and_contents(cifar_profile, tmp_path):
    profile = cifar_profile
    path = tmp_path / "cifar10_quick.cpu.json"
    profile.save(str(path))
    loaded = load_profile(str(path))
    loaded.path = ""
    assert loaded == profile

    net = build_net(str(CIFAR10_QUICK), 2)
    assert [layer.name for layer in profile.layers] == net._layer_names
    assert [layer.type for layer in profile.layers] == [layer.type for layer in net.layers]
    assert profile.model == "cifar10_quick" and profile.batch == 2
    assert profile.method == "measured"
    assert profile.device["kind"] == "cpu" and profile.device["tag"] == "cpu"
    assert profile.device["threads"] >= 1 and profile.device["name"]
    assert {"poseidon", "torch", "python"} <= set(profile.software)
    assert profile.measurement["iterations"] == 2 and profile.measurement["copies"] == 1
    assert profile.measurement["statistic"] == "median"
    assert profile.iteration_s > 0
    # A CPU's host work (Note [host work]) was measured; on this tiny net it is a fraction
    # of a millisecond, so only its bounds are checked here (its measure: below).
    assert 0 <= profile.host_s < profile.iteration_s
    for layer in profile.layers:
        assert layer.forward_s > 0 and layer.backward_s > 0, layer.name
    # The sync shapes are sync_layout's, layer for layer.
    expected = {
        s.name: SyncShape(
            s.shape.kind, s.shape.m, s.shape.n, s.shape.rows, s.num_floats, s.late, s.start
        )
        for s in sync_layout(net)
    }
    assert {layer.name: layer.sync for layer in profile.layers if layer.sync} == expected
    assert {layer.name: layer.blobs for layer in profile.layers if layer.blobs} == {
        name: [int(b.count) for b in net.params[name]] for name in expected
    }
    inner_products = [layer for layer in profile.layers if layer.type == "InnerProduct"]
    assert [layer.name for layer in inner_products] == ["ip1", "ip2"]
    for layer in inner_products:
        assert layer.sfb is not None and layer.sfb.weight_grad_s > 0
        assert min(layer.sfb.gemm_flops_per_s) == 2  # rows = batch x 1 worker
        assert all(rows % 2 == 0 and rate > 0 for rows, rate in layer.sfb.gemm_flops_per_s.items())
    assert all(layer.sfb is None for layer in profile.layers if layer.type != "InnerProduct")
    conv1 = profile.layer("conv1")
    assert conv1.flops_forward > 0 and conv1.bytes > 0


def test_batch_override_sets_every_data_layer():
    param = parse_net_text(
        """
        layer { name: "a" type: "DummyData" top: "a" top: "b"
                dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
        layer { name: "old" type: "DummyData" top: "c" dummy_data_param { num: 2 channels: 1
                height: 1 width: 1 } }
        layer { name: "i" type: "Input" top: "i" input_param { shape { dim: 5 dim: 1 } } }
        layer { name: "d" type: "Data" top: "d" data_param { batch_size: 5 } }
        layer { name: "h" type: "HDF5Data" top: "h" hdf5_data_param { batch_size: 5 } }
        """
    )
    set_batch(param, 7, "net.prototxt")
    layers = {layer.name: layer for layer in param.layer}
    assert [list(s.dim) for s in layers["a"].dummy_data_param.shape] == [[7, 3], [7]]
    assert list(layers["old"].dummy_data_param.num) == [7]
    assert list(layers["i"].input_param.shape[0].dim) == [7, 1]
    assert layers["d"].data_param.batch_size == 7
    assert layers["h"].hdf5_data_param.batch_size == 7


def test_batch_override_errors_name_the_file():
    param = caffe_pb2.NetParameter()
    param.layer.add(name="relu", type="ReLU")
    with pytest.raises(ValueError, match=r"^net\.prototxt: no data layer .* to set the batch of"):
        set_batch(param, 4, "net.prototxt")
    with pytest.raises(ValueError, match=r"net\.prototxt: batch 0 \(want >= 1\)"):
        set_batch(param, 0, "net.prototxt")


def test_batch_override_builds(tmp_path):
    path = tmp_path / "small.prototxt"
    path.write_text(SMALL)
    net = build_net(str(path), 3)
    assert net.blobs["data"].shape[0] == 3 and net.blobs["label"].shape == [3]


def test_names_and_tags():
    label, path = resolve_model("cifar10_quick")
    assert label == "cifar10_quick"
    assert path.endswith("models/cifar10_quick/train_val_dummy.prototxt")
    assert model_label("models/vgg19_22k/train_val_dummy.prototxt") == "vgg19_22k"
    assert model_label("/tmp/tiny.prototxt") == "tiny"
    with pytest.raises(ValueError, match=r"unknown model 'nope'.*resnet152"):
        resolve_model("nope")
    assert gpu_tag("NVIDIA H200") == "h200"
    assert gpu_tag("NVIDIA GeForce RTX 4090") == "rtx4090"
    assert gpu_tag("Tesla V100-SXM2-16GB") == "v100"
    assert gpu_tag("NVIDIA A100-SXM4-80GB") == "a100"


def test_host_work_is_what_a_solver_step_spends_besides_its_parts(monkeypatch, tmp_path):
    """Note [host work]: 5 ms of extra work in each solver step, outside every layer and
    update, reads as host work; each round pairs a step with its parts."""
    import time

    from poseidon.experiments import profile_host

    real_solver = profile_host._solver

    def solver_with_host_work(path, batch):
        solver = real_solver(path, batch)
        step = solver.step

        def slow_step(iterations):
            step(iterations)
            until = time.perf_counter() + 0.005 * iterations
            while time.perf_counter() < until:
                pass

        solver.step = slow_step
        return solver

    net = tmp_path / "small.prototxt"
    net.write_text(SMALL)
    plain = profile_host.host_samples(str(net), 2, 5, 1)
    monkeypatch.setattr(profile_host, "_solver", solver_with_host_work)
    slowed = profile_host.host_samples(str(net), 2, 5, 1)
    assert len(plain) == len(slowed) == 5
    extra = host_seconds(slowed) - host_seconds(plain)
    assert extra == pytest.approx(0.005, abs=0.003)
    assert host_seconds([-0.001, -0.002, 0.0005]) == 0.0  # parts outweigh
