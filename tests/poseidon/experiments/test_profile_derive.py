"""derive_profile: a published total shared out by a roofline, with its provenance."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from poseidon.experiments.profile import (
    LayerProfile,
    Profile,
    SfbTiming,
    SyncShape,
    load_profile,
    rebuild_flops,
)
from poseidon.experiments.profile_derive import (
    PUBLISHED_TIMES,
    REBUILD_WORKERS,
    TARGETS,
    UPDATE_ACCESSES,
    derive_profile,
    reference_flops,
)
from poseidon.experiments.profile_measure import build_net
from tests.poseidon.experiments.nets import CIFAR10_QUICK, REPO_ROOT

PEAK, BANDWIDTH = 3072 * 2 * 1.0e9, 336.5e9
M, N, ROWS = 100, 200, 32  # the InnerProduct: outputs, inputs, batch rows
FC_FORWARD = rebuild_flops(M, N, ROWS)
FC_BACKWARD = 2 * M * N * ROWS + FC_FORWARD  # dX + dW + bias


def base_profile(model: str = "vgg19_22k", batch: int = 32) -> Profile:
    layers = [
        LayerProfile("data", "DummyData", 0.5, 0.001, 0.0, 0.0, 4e6),
        LayerProfile("conv", "Convolution", 2.0, 4.0, 1e12, 2e12, 1e9, [10],
                     SyncShape("conv", 10, 1, batch, 10)),
        LayerProfile("relu", "ReLU", 0.1, 0.1, 1e6, 1e6, 1e9),
        LayerProfile("concat", "Concat", 1.0, 3.0, 0.0, 0.0, 1e8),
        LayerProfile("fc", "InnerProduct", 0.2, 0.4, FC_FORWARD, FC_BACKWARD, 1e8, [M * N, M],
                     SyncShape("FC", M, N, ROWS, M * N + M), SfbTiming(0.1, {ROWS: 1e9})),
    ]  # fmt: skip
    return Profile(
        model=model,
        net=f"models/{model}/train_val_dummy.prototxt",
        batch=batch,
        device={"kind": "cpu", "name": "a CPU", "threads": 2, "tag": "cpu"},
        software={"poseidon": "0"},
        method="measured",
        layers=layers,
        iteration_s=11.0,
        measurement={"iterations": 1},
        path=f"models/profiles/{model}.cpu.json",
    )


def roofline(layer: LayerProfile) -> float:
    return max((layer.flops_forward + layer.flops_backward) / PEAK, layer.bytes / BANDWIDTH)


def test_total_is_the_published_time_and_shares_follow_the_roofline():
    base = base_profile()
    derived = derive_profile(base, "titanx-maxwell")
    assert derived.iteration_s == 0.93
    assert derived.forward_s + derived.backward_s == pytest.approx(0.93, rel=1e-12)
    estimates = [roofline(layer) for layer in base.layers]
    factor = 0.93 / sum(estimates)
    for layer, estimate in zip(derived.layers, estimates):
        assert layer.forward_s + layer.backward_s == pytest.approx(estimate * factor, rel=1e-12)
    conv, relu, concat, data = (derived.layer(n) for n in ("conv", "relu", "concat", "data"))
    assert conv.backward_s == pytest.approx(2 * conv.forward_s)  # split by FLOPs
    assert relu.backward_s == pytest.approx(relu.forward_s)
    assert concat.backward_s == pytest.approx(3 * concat.forward_s)  # no FLOPs: measured split
    assert data.backward_s == 0  # a data layer has no backward
    # Everything but the times is the base's.
    for mine, theirs in zip(derived.layers, base.layers):
        assert (mine.name, mine.type, mine.blobs, mine.sync) == (
            theirs.name, theirs.type, theirs.blobs, theirs.sync)  # fmt: skip
        assert (mine.flops_forward, mine.flops_backward, mine.bytes) == (
            theirs.flops_forward, theirs.flops_backward, theirs.bytes)  # fmt: skip
    assert derived.batch == 32 and derived.model == "vgg19_22k" and derived.net == base.net


def test_sfb_rebuild_rates_follow_the_same_roofline_and_factor():
    base = base_profile()
    derived = derive_profile(base, "titanx-maxwell")
    factor = 0.93 / sum(roofline(layer) for layer in base.layers)
    fc = derived.layer("fc")
    assert sorted(fc.sfb.gemm_flops_per_s) == [ROWS * p for p in REBUILD_WORKERS]
    for rows, rate in fc.sfb.gemm_flops_per_s.items():
        flops = rebuild_flops(M, N, rows)
        data = 4.0 * (2 * M * N + rows * (2 * M + N) + 2 * M)
        assert flops / rate == pytest.approx(max(flops / PEAK, data / BANDWIDTH) * factor)
    # The rebuild at K rows is what SFB skips of backward (capped by the backward itself).
    at_k = fc.sfb.rebuild_s(M, N, ROWS)
    assert fc.sfb.weight_grad_s == pytest.approx(min(fc.backward_s, at_k), rel=1e-12)
    assert all(layer.sfb is None for layer in derived.layers if layer.name != "fc")


def test_a_solver_update_shares_the_total():
    base = base_profile()
    base.layers[1].update_s = 0.5  # measured on the base device: the conv owns parameters
    derived = derive_profile(base, "titanx-maxwell")
    update = UPDATE_ACCESSES * 4.0 * 10 / BANDWIDTH
    factor = 0.93 / (sum(roofline(layer) for layer in base.layers) + update)
    assert derived.layer("conv").update_s == pytest.approx(update * factor)
    total = derived.forward_s + derived.backward_s + sum(x.update_s for x in derived.layers)
    assert total == pytest.approx(0.93)


def test_provenance():
    derived = derive_profile(base_profile(), "titanx-maxwell")
    assert derived.method == "derived" and derived.measurement is None
    assert derived.device == {"kind": "derived", "threads": None, "tag": "titanx-maxwell",
                              "name": "NVIDIA GeForce GTX Titan X (Maxwell), derived"}  # fmt: skip
    d = derived.derivation
    assert d["shares"] == "roofline (FLOPs, bytes)"
    assert d["total_s"] == 0.93
    assert d["source"].startswith("docs/published_times.md §1: | Poseidon's Caffe")
    assert "VGG19-22K, batch 32 | ≈ 0.93 s" in d["source"]
    assert d["base_profile"] == "models/profiles/vgg19_22k.cpu.json"
    assert d["notes"] and derived.software["published"]
    assert d["target"]["peak_flops_per_s"] == PEAK
    assert d["target"]["memory_bytes_per_s"] == BANDWIDTH


@pytest.mark.parametrize(
    "model, batch, total",
    [("vgg19", 32, 0.45), ("resnet152", 32, 0.69), ("googlenet", 128, 0.496),
     ("inception_v3", 32, 0.250 * 1.535)],
)  # fmt: skip
def test_published_times_map_linearly_in_batch(model, batch, total):
    derived = derive_profile(base_profile(model, batch), "titanx-maxwell")
    assert derived.iteration_s == pytest.approx(total, rel=1e-12)
    if model != "inception_v3":
        assert "scaled linearly in batch" in derived.derivation["notes"]


def test_wrong_batch_or_model_or_target_fails_clearly():
    with pytest.raises(ValueError, match=r"vgg19\.cpu\.json was measured at batch 16; .* batch 32"):
        derive_profile(base_profile("vgg19", 16), "titanx-maxwell")
    with pytest.raises(ValueError, match="no published titanx-maxwell time for model 'lenet'"):
        derive_profile(base_profile("lenet", 64), "titanx-maxwell")
    with pytest.raises(ValueError, match="unknown target 'k80'; known: titanx-maxwell, v100, "
                       "a100, h100"):  # fmt: skip
        derive_profile(base_profile(), "k80")


def test_cifar10_quick_borrows_googlenets_flop_rate():
    base = base_profile("cifar10_quick", 100)
    derived = derive_profile(base, "titanx-maxwell")
    googlenet = reference_flops("googlenet", 16)
    assert 1.0e11 < googlenet < 2.0e11  # ~9.4 GFLOP per image for training, batch 16
    flops = sum(layer.flops_forward + layer.flops_backward for layer in base.layers)
    assert derived.iteration_s == pytest.approx(flops / (googlenet / 0.062), rel=1e-12)
    assert "No published time" in derived.derivation["notes"]


@pytest.mark.parametrize(
    "target, total",
    [("v100", 32 * 192 / 273.17 / 192), ("a100", 32 / 627.35),
     ("h100", 32 / 627.35 * 1066 / 1895)],
)  # fmt: skip
def test_todays_gpus_take_their_published_throughput(target, total):
    # Inception-V3: the V100's and A100's own runs; the H100 the A100's x the one H100/A100
    # ratio published on one benchmark (ResNet-50, docs/published_times.md §1b).
    derived = derive_profile(base_profile("inception_v3", 32), target)
    assert derived.iteration_s == pytest.approx(total, rel=1e-12)
    assert derived.device["tag"] == target


def test_vgg19_22k_on_todays_gpus_borrows_vgg16s_flop_rate():
    base = base_profile("vgg19_22k", 32)
    flops = sum(layer.flops_forward + layer.flops_backward for layer in base.layers)
    for target, vgg16_s in (("v100", 192 / 249.19), ("a100", 224 / 503.61),
                            ("h100", 224 / 503.61 * 1066 / 1895)):  # fmt: skip
        row = PUBLISHED_TIMES[(target, "vgg16")]
        rate = reference_flops("vgg16", row.batch) / vgg16_s
        derived = derive_profile(base, target)
        assert derived.iteration_s == pytest.approx(flops / rate, rel=1e-12), target


def test_every_table_row_is_consistent():
    for (target, model), row in PUBLISHED_TIMES.items():
        assert target in TARGETS
        assert row.rate_of or (row.seconds > 0 and row.batch > 0), model
    # That each quoted row is a row of docs/published_times.md §1: test_profile_sources.py.


def test_shipped_cifar10_quick_profiles():
    profiles = REPO_ROOT / "models" / "profiles"
    measured = load_profile(str(profiles / "cifar10_quick.cpu.json"))
    net = build_net(str(CIFAR10_QUICK), 100)
    measured.check_matches(net._layer_names, 100, "cifar10_quick")
    derived = load_profile(str(profiles / "cifar10_quick.titanx-maxwell.json"))
    again = derive_profile(measured, "titanx-maxwell")
    assert derived.derivation["base_profile"] == "models/profiles/cifar10_quick.cpu.json"
    for mine, shipped in zip(again.layers, derived.layers, strict=True):
        assert mine.name == shipped.name
        assert math.isclose(mine.forward_s, shipped.forward_s, rel_tol=1e-12), mine.name
        assert math.isclose(mine.backward_s, shipped.backward_s, rel_tol=1e-12), mine.name
    assert Path(measured.net) == Path("models/cifar10_quick/train_val_dummy.prototxt")
