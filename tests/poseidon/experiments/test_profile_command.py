"""`poseidon profile`: a measured and a derived profile written, and bad input refused with
one line on stderr and exit status 2."""

from __future__ import annotations

import re

import pytest
import torch

from poseidon.cli import main
from poseidon.experiments.profile import load_profile
from tests.poseidon.experiments.nets import REPO_ROOT, SMALL

CIFAR_CPU = REPO_ROOT / "models" / "profiles" / "cifar10_quick.cpu.json"


def refused(capsys, *argv: str) -> str:
    assert main(["profile", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("poseidon profile: "), err
    return err


def test_measure_and_derive(tmp_path, capsys):
    net = tmp_path / "small.prototxt"
    net.write_text(SMALL)
    out = tmp_path / "small.cpu.json"
    argv = ["--model", str(net), "--batch", "2", "--iterations", "1", "--warmup", "0"]
    assert main(["profile", *argv, "--threads", "1", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "small (measured), batch 2" in printed and f"wrote {out}" in printed
    assert re.search(r"^conv2 +Convolution +[\d.]+ +[\d.]+", printed, re.M)
    assert "total: forward" in printed
    profile = load_profile(str(out))
    assert profile.batch == 2 and profile.device["threads"] == 1
    assert profile.measurement["iterations"] == 1 and profile.measurement["warmup"] == 0

    derived = tmp_path / "cifar10_quick.titanx-maxwell.json"
    assert main(["profile", "--derive", "titanx-maxwell", "--from", str(CIFAR_CPU),
                 "-o", str(derived)]) == 0  # fmt: skip
    assert load_profile(str(derived)).device["tag"] == "titanx-maxwell"
    assert load_profile(str(derived)).host_s == 0.0  # a GPU hides it (Note [host work])


def test_bad_input(tmp_path, capsys):
    out = str(tmp_path / "p.json")
    err = refused(capsys, "--model", "nosuch", "-o", out)
    assert "unknown model 'nosuch'" in err and "vgg19_22k" in err
    assert "no such file" in refused(capsys, "--model", str(tmp_path / "x.prototxt"), "-o", out)
    garbage = tmp_path / "garbage.prototxt"
    garbage.write_text("layer { name: \n")
    assert str(garbage) in refused(capsys, "--model", str(garbage), "-o", out)
    no_data = tmp_path / "no_data.prototxt"
    no_data.write_text('layer { name: "r" type: "ReLU" bottom: "x" top: "x" }\n')
    err = refused(capsys, "--model", str(no_data), "--batch", "4", "-o", out)
    assert f"{no_data}: no data layer" in err
    assert "--iterations must be >= 1" in refused(capsys, "--model", "lenet", "--iterations",
                                                  "0", "-o", out)  # fmt: skip
    assert "no directory" in refused(capsys, "--model", "lenet", "-o", str(tmp_path / "a/b.json"))
    assert "needs --from" in refused(capsys, "--derive", "titanx-maxwell", "-o", out)
    assert "not both" in refused(capsys, "--model", "lenet", "--derive", "x", "--from", out,
                                 "-o", out)  # fmt: skip
    assert "--model is required" in refused(capsys, "-o", out)


def test_bad_derivations(tmp_path, capsys):
    out = str(tmp_path / "p.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{\n oops\n")
    assert f"{bad}:2: not JSON" in refused(capsys, "--derive", "titanx-maxwell", "--from",
                                            str(bad), "-o", out)  # fmt: skip
    err = refused(capsys, "--derive", "k80", "--from", str(CIFAR_CPU), "-o", out)
    assert "unknown target 'k80'" in err
    # A known target without a published time for the model.
    err = refused(capsys, "--derive", "a100", "--from", str(CIFAR_CPU), "-o", out)
    assert "no published a100 time for model 'cifar10_quick'" in err
    # A profile at another batch than the published time's.
    small = load_profile(str(CIFAR_CPU))
    small.batch = 16
    other = tmp_path / "cifar10_quick.b16.json"
    small.save(str(other))
    err = refused(capsys, "--derive", "titanx-maxwell", "--from", str(other), "-o", out)
    assert "measured at batch 16" in err and "batch 100" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_device(tmp_path, capsys):
    err = refused(capsys, "--model", "lenet", "--device", "cuda", "-o", str(tmp_path / "p.json"))
    assert "no CUDA device" in err
