"""load_profile refuses what it cannot use, naming the file and the field."""

from __future__ import annotations

import json

import pytest

from poseidon.experiments.profile import (
    LayerProfile,
    Profile,
    ProfileError,
    SfbTiming,
    SyncShape,
    load_profile,
)


def small_profile() -> Profile:
    return Profile(
        model="tiny",
        net="tiny.prototxt",
        batch=4,
        device={"kind": "cpu", "name": "a CPU", "threads": 2, "tag": "cpu"},
        software={"poseidon": "0", "torch": "0", "python": "3"},
        method="measured",
        layers=[
            LayerProfile("data", "DummyData", 0.001, 0.0),
            LayerProfile(
                "fc",
                "InnerProduct",
                0.002,
                0.004,
                160.0,
                320.0,
                1000.0,
                [20, 4],
                SyncShape("FC", 4, 5, 4, 24),
                SfbTiming(0.001, {4: 1e9, 8: 2e9}),
            ),
        ],
        iteration_s=0.007,
        measurement={
            "iterations": 2,
            "warmup": 1,
            "statistic": "median",
            "copies": 1,
            "date": "2024-01-01",
        },
    )


def write(tmp_path, data) -> str:
    path = tmp_path / "p.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=1))
    return str(path)


def test_round_trip(tmp_path):
    profile = small_profile()
    path = str(tmp_path / "p.json")
    profile.save(path)
    loaded = load_profile(path)
    assert loaded.path == path
    loaded.path = ""
    assert loaded == profile
    assert loaded.layer("fc").sfb.rebuild_s(4, 5, 8) == pytest.approx((2 * 4 * 5 * 8 + 32) / 2e9)
    # A CPU's host work round-trips; a profile written before the field has none.
    profile.host_s = 0.0015
    profile.save(path)
    assert load_profile(path).host_s == 0.0015
    data = profile.to_json()
    del data["host_s"]
    assert load_profile(write(tmp_path, data)).host_s == 0.0


def test_not_json_names_the_line(tmp_path):
    path = write(tmp_path, '{"schema": "poseidon-profile/1",\n "model": oops}\n')
    with pytest.raises(ProfileError, match=rf"^{path}:2: not JSON"):
        load_profile(path)


def test_missing_file(tmp_path):
    with pytest.raises(ProfileError, match=r"cannot read profile .*missing\.json"):
        load_profile(str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("batch"), r": missing field 'batch'"),
        (lambda d: d.update(schema="poseidon-profile/0"), r": schema 'poseidon-profile/0'"),
        (lambda d: d.update(method="guessed"), r": field 'method' is 'guessed'"),
        (lambda d: d["layers"][1].update(backward_s=-1.0),
         r": layers\[1\] \(fc\): field 'backward_s' is negative"),
        (lambda d: d["layers"][1]["sfb"].update(gemm_flops_per_s={"4": 0}),
         r": layers\[1\] \(fc\): sfb.gemm_flops_per_s needs positive rates"),
        (lambda d: d["layers"][1]["sync"].update(kind="ring"),
         r": layers\[1\] \(fc\): field 'kind' is 'ring'"),
        (lambda d: d.update(layers=[]), r": field 'layers' is empty"),
        (lambda d: d.update(host_s=-0.001), r": field 'host_s' is negative"),
        (lambda d: d.update(host_s="1 ms"), r": field 'host_s' wants a finite number"),
    ],
)  # fmt: skip
def test_bad_fields_name_file_and_field(tmp_path, edit, message):
    data = small_profile().to_json()
    edit(data)
    path = write(tmp_path, data)
    with pytest.raises(ProfileError, match=f"^{path}{message}"):
        load_profile(path)
