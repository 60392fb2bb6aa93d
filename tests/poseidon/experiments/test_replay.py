"""The compute replay: the replayed net is the profiled net's twin (names, DAG, parameter
specs, loss weights), its blobs are byte-scaled, the plan is decided on the real shapes,
its layers spend the profile's times on the dilated device clock, and a profile that does
not describe the net is refused by name."""

from __future__ import annotations

import os
import time

import pytest

import caffe
from caffe.formats.proto_io import parse_net_text
from caffe.parallel.layout import sync_layout
from poseidon import _C
from poseidon.experiments import clock
from poseidon.experiments.profile import ProfileError, SfbTiming
from poseidon.experiments.profile_measure import skeleton
from poseidon.experiments.replay import ReplayLayer, replay_net_param
from poseidon.plan import layer_spec
from tests.poseidon.experiments.nets import SMALL, build


@pytest.fixture
def profile(tmp_path):
    net = build(tmp_path)
    p = skeleton(net, str(tmp_path / "net.prototxt"), "cpu")
    for i, layer in enumerate(p.layers):
        layer.forward_s = 0.001 * (i + 1)
        layer.backward_s = 0.002 * (i + 1)
        if layer.type == "InnerProduct" and layer.sync is not None:
            layer.sfb = SfbTiming(0.0005, {4: 1e9})
    return p


def replay_net(profile, byte_scale=1, text=SMALL):
    param = replay_net_param(parse_net_text(text), profile, byte_scale, "net.prototxt")
    return caffe.Net(param)


def test_the_replay_is_the_profiled_nets_twin(tmp_path, profile):
    real = build(tmp_path)
    replay = replay_net(profile)
    assert replay._layer_names == real._layer_names
    assert [type(layer) for layer in replay.layers] == [ReplayLayer] * len(real.layers)
    assert [layer.type for layer in replay.layers] == [layer.type for layer in real.layers]
    assert replay.layer_need_backward == real.layer_need_backward
    assert replay.params_lr == real.params_lr
    assert replay._blob_loss_weights[replay._blob_name_to_idx["loss"]] == 1.0


def test_blobs_shrink_by_the_byte_scale_and_the_plan_stays_the_real_one(tmp_path, profile):
    real = build(tmp_path)
    replay = replay_net(profile, byte_scale=8)
    for a, b in zip(real.layers, replay.layers):
        assert [blob.count for blob in b.blobs] == [-(-blob.count // 8) for blob in a.blobs]

    def specs(net):
        return [
            layer_spec(
                s.index, s.name, s.shape.kind, s.shape.m, s.shape.n, s.shape.rows, s.num_floats
            )
            for s in sync_layout(net)
        ]

    for a, b in zip(specs(real), specs(replay)):
        assert (a.layer_id, a.kind, a.m, a.n, a.k) == (b.layer_id, b.kind, b.m, b.n, b.k)
        assert b.num_floats == -(-a.num_floats // 8)
    plans = [_C.make_plan(specs(n), 4, 4) for n in (real, replay)]
    assert [lp.scheme for lp in plans[0].layers] == [lp.scheme for lp in plans[1].layers]
    fc, real_fc = replay.layer_by_name("fc"), real.layer_by_name("fc")
    assert fc.factor_widths() == (-(-real_fc.num_output // 8), -(-real_fc.K // 8))


def test_layers_spend_the_profiles_time_on_the_dilated_clock(profile):
    clock.configure(dilation=2.0)
    profile.host_s = 0.003  # a CPU's host work: a share with each forward
    net = replay_net(profile)
    started = time.perf_counter()
    net.forward_backward()
    elapsed = time.perf_counter() - started
    wanted = sum(x.forward_s for x in profile.layers) + profile.host_s
    wanted += sum(x.backward_s for x, need in zip(profile.layers, net.layer_need_backward) if need)
    assert elapsed == pytest.approx(2.0 * wanted, rel=0.15)
    assert clock.device_clock().stats.charged_s == pytest.approx(wanted, rel=1e-9)
    clock.configure(dilation=1.0)


class FakeTime:
    """perf_counter and sleep of a machine with no other load: a sleep wakes 0.2 ms late."""

    def __init__(self):
        self.now = 100.0
        self.cpu = 0.0  # the thread's CPU time: its work, not its sleeps

    def perf_counter(self) -> float:
        return self.now

    def thread_time(self) -> float:
        return self.cpu

    def sleep(self, seconds: float) -> None:
        self.now += seconds + 0.0002

    def work(self, seconds: float) -> None:
        self.now += seconds
        self.cpu += seconds


def ten_steps_with_work(device: clock.ReplayClock, fake: FakeTime) -> float:
    """Seconds for 10 steps of 4 ms, each followed by 1 ms of the thread's own work."""
    started = fake.perf_counter()
    for _ in range(10):
        device.spend(0.004)
        fake.work(0.001)
    return fake.perf_counter() - started


def test_the_clock_absorbs_its_own_lateness(monkeypatch):
    # The clock's rule on a fake time (on the wall clock of a loaded machine the same
    # sequence drifts by the scheduler's whims).
    fake = FakeTime()
    monkeypatch.setattr(clock, "time", fake)
    device = clock.ReplayClock(dilation=1.0, slack_s=0.005)
    elapsed = ten_steps_with_work(device, fake)
    # 10 x (4 ms + 1 ms of the thread's own work) would be 50 ms; the device ran its
    # 40 ms back to back, plus the last 1 ms and the last sleep's lateness.
    assert elapsed == pytest.approx(0.0412, abs=1e-9)
    assert device.stats.restarts == 1  # the first spend: the device was idle
    assert device.stats.late_s == pytest.approx(10 * 0.0002)
    assert device.stats.idle_s == 0.0  # the first start is not an idle gap
    device.spend(0.0)
    fake.sleep(0.02)  # a real wait (a gradient in flight): the device idles
    device.spend(0.001)
    assert device.stats.restarts == 2
    # From the last step's end: its lateness, the thread's 1 ms and the 20 ms wait.
    assert device.stats.idle_s == pytest.approx(0.0002 + 0.001 + 0.0202)


def test_a_profile_of_another_net_is_refused(profile):
    other = SMALL.replace('"fc"', '"fc_other"')
    with pytest.raises(
        ProfileError,
        match=r"does not match the net net.prototxt: no times for "
        r"fc_other",
    ):
        replay_net(profile, text=other)
    profile.batch = 8
    with pytest.raises(
        ProfileError,
        match=r"measured at batch 8, the net net.prototxt runs "
        r"batch 4",
    ):
        replay_net(profile)


def test_layers_that_pin_their_own_lr_mult_stay_frozen_in_the_replay(tmp_path):
    # BatchNorm pins its statistics' lr_mult to 0 at setup, whatever the prototxt says; the
    # replay's layers pin nothing, so the profile's lr_mults must carry it.
    text = SMALL.replace(
        'layer { name: "relu1"',
        'layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }\n'
        'layer { name: "relu1"',
    )
    real = build(tmp_path, text)
    profile = skeleton(real, str(tmp_path / "net.prototxt"), "cpu")
    assert profile.layer("bn1").lr_mults == [0.0, 0.0, 0.0]
    replay = replay_net(profile, text=text)
    assert [s.index for s in sync_layout(replay)] == [s.index for s in sync_layout(real)]
    assert replay.params_lr == real.params_lr


def test_a_cpu_profile_replays_on_the_hosts_clock(tmp_path, profile, monkeypatch):
    # The worker replays a CPU profile on the host's clock (waits count, its own work does
    # not), any other device's with the default slack (a GPU's queue hides host work).
    import argparse
    import json

    from poseidon.experiments.worker import build_net_param

    path = str(tmp_path / "p.json")
    for kind, host_is_device in (("cpu", True), ("derived", False)):
        profile.device = {**profile.device, "kind": kind}
        profile.save(path)
        with open(path, encoding="utf-8") as f:
            assert json.load(f)["device"]["kind"] == kind
        args = argparse.Namespace(
            model=str(tmp_path / "net.prototxt"), batch=None, profile=path, dilation=1.0,
            byte_scale=1,
        )  # fmt: skip
        build_net_param(args)
        assert clock.device_clock().host_is_device == host_is_device
    clock.configure(dilation=1.0)

    fake = FakeTime()
    monkeypatch.setattr(clock, "time", fake)
    # Work the profile already charged (untimed: the update's data -= diff) counts as
    # nothing, its wall time included: the second step ends 4 ms after the first.
    device = clock.ReplayClock(dilation=1.0, host_is_device=True)
    device.spend(0.004)
    started = fake.perf_counter()
    fake.work(0.001)
    with device.untimed():
        fake.work(0.002)
    device.spend(0.004)
    assert fake.perf_counter() - started == pytest.approx(0.0040, abs=1e-9)


def test_a_replayed_powersgd_layer_moves_a_scaled_wire_and_spends_the_plans_compute(
    tmp_path, profile
):
    # Two replay workers on loopback, byte scale 4, fc forced to PowerSGD (and, beside it, to
    # PS): the workers end with the same weights, and the PowerSGD run's device spent
    # exactly the plan's estimate of its encodings and decode more per iteration.
    import json
    import subprocess
    import sys

    from poseidon.experiments.run import RESULT_MARK
    from poseidon.plan import layer_specs

    (tmp_path / "net.prototxt").write_text(SMALL)
    path = str(tmp_path / "p.json")
    profile.save(path)
    compute = {}
    for scheme in ("ps", "powersgd"):
        env = {**os.environ, "POSEIDON_COMPRESSION": "powersgd", "POSEIDON_POWERSGD_RANK": "4",
               "POSEIDON_LINK_RATE": "100mbit", "POSEIDON_GEMM_RATE": "1e6",
               "POSEIDON_LAYER_SCHEMES": f"conv1=ps,conv2=ps,fc={scheme}",
               "GLOG_minloglevel": "1"}  # fmt: skip
        command = [sys.executable, "-m", "poseidon.cli", "launch", "-n", "2", "--",
                   sys.executable, "-m", "poseidon.experiments.worker", "--model",
                   str(tmp_path / "net.prototxt"), "--profile", path, "--byte-scale", "4",
                   "--warmup", "1", "--iterations", "2"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        results = [json.loads(line.partition(RESULT_MARK)[2])
                   for line in done.stdout.splitlines() if RESULT_MARK in line]  # fmt: skip
        assert len(results) == 2
        assert results[0]["checksum"] == results[1]["checksum"]
        assert results[0]["schemes"] == ({"fc": "PowerSGD"} if scheme == "powersgd" else {})
        compute[scheme] = results[0]["compute_s"]
    replay = replay_net(profile, byte_scale=4)
    forced = {"conv1": "ps", "conv2": "ps", "fc": "powersgd"}
    specs = layer_specs(sync_layout(replay), 1, "poseidon", "auto", forced)
    plan = _C.make_plan(specs, 2, 2, rates=_C.Rates(0.0, 1e6, 0.0))
    fc = next(lp for lp in plan.layers if lp.name == "fc")
    assert (fc.matrix_m, fc.matrix_n) == (4, 6)  # 5 x 24 at 1/4: rows and columns up to r
    e = fc.estimate
    assert e.encode_s + e.between_s + e.finish_s > 1e-3
    assert compute["powersgd"] - compute["ps"] == pytest.approx(
        e.encode_s + e.between_s + e.finish_s, rel=1e-6
    )


@pytest.mark.parametrize("dilation", [1.0, 4.0])
def test_a_cpu_replay_counts_its_waits_and_none_of_its_own_work(monkeypatch, dilation):
    # The thread's own work between steps counts as nothing, whatever the dilation (the
    # profile's host_s, spent with each forward, stands for the node's: Note [host work]);
    # a wait off the CPU (a gradient in flight) counts in full: 20 ms here are 20/d ms of
    # the cluster's, as the links are dilated too.
    import threading

    fake = FakeTime()
    monkeypatch.setattr(clock, "time", fake)
    device = clock.ReplayClock(dilation=dilation, host_is_device=True)
    # 10 steps back to back, the last 1 ms of work and the last sleep's lateness.
    assert ten_steps_with_work(device, fake) == pytest.approx(
        10 * 0.004 * dilation + 0.0012, abs=1e-9
    )
    device.spend(0.004)
    started = fake.perf_counter()
    fake.sleep(0.02)  # woken 0.2 ms late: 20.2 ms off the CPU
    fake.work(0.001)
    device.spend(0.004)
    assert fake.perf_counter() - started == pytest.approx(0.0202 + 0.004 * dilation, abs=1e-9)

    # A step spent from another thread (PowerSGD's continuation) cannot tell the training
    # thread's work from a wait: that gap counts in full, 1 ms here.
    device.spend(0.004)
    fake.work(0.001)
    started = fake.perf_counter()
    other = threading.Thread(target=device.spend, args=(0.004,))
    other.start()
    other.join()
    assert fake.perf_counter() - started == pytest.approx(0.004 * dilation, abs=1e-9)
