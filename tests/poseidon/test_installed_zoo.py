"""The zoo travels with the package: the wheel, installed into a fresh virtual environment
(its own site-packages, no source checkout on its path), runs the documented commands from
an empty folder — `poseidon models` lists the zoo and its profiles, `poseidon predict
--model vgg19_22k --profile titanx-maxwell …` (docs/experiments.md) finds both — and
POSEIDON_MODELS or a ./models still wins over the installed copy.

The wheel is built from this checkout with the Makefile's CMake settings, so scikit-build-core
reuses build/py (seconds, not a compile). The fresh environment takes its third-party
packages (torch, numpy, protobuf, …) from this one through a .pth line: a line of a .pth
file adds a folder to the path without running that folder's own .pth files, so this
checkout's editable install stays out.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CMAKE_SETTINGS = ["--config-settings=cmake.define.POSEIDON_BUILD_TESTS=ON",
                  "--config-settings=cmake.define.POSEIDON_WERROR=ON"]  # fmt: skip


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory) -> Path:
    if not (REPO / "pyproject.toml").is_file():
        pytest.skip("needs the source checkout to build the wheel")
    root = tmp_path_factory.mktemp("installed")
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                    "--no-deps", "-w", str(wheels), *CMAKE_SETTINGS, str(REPO)],
                   check=True, timeout=900)  # fmt: skip
    env = root / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(env)], check=True, timeout=300)
    python = env / "bin" / "python"
    ask = "import site; print(site.getsitepackages()[0])"
    own_site = subprocess.run([str(python), "-c", ask], check=True, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip
    (Path(own_site) / "third_party.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    wheel = next(wheels.glob("poseidon_caffe-*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, timeout=300)  # fmt: skip
    return env


def poseidon(env: Path, *args: str, cwd: Path, extra: dict[str, str] | None = None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("POSEIDON_", "PYTHON"))}
    return subprocess.run([str(env / "bin" / "poseidon"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**clean, **(extra or {})})  # fmt: skip


def test_the_installed_package_is_the_wheels(fresh_env, tmp_path):
    ask = "import poseidon, caffe; print(poseidon.__file__, caffe.__file__)"
    where = subprocess.run([str(fresh_env / "bin" / "python"), "-c", ask], cwd=tmp_path,
                           check=True, capture_output=True, text=True).stdout  # fmt: skip
    assert str(REPO) not in where and all(p.startswith(str(fresh_env)) for p in where.split())


def test_models_lists_the_zoo_and_its_profiles_from_an_empty_folder(fresh_env, tmp_path):
    result = poseidon(fresh_env, "models", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"zoo: {fresh_env}/share/poseidon/models" in result.stdout
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[2:]}
    assert "titanx-maxwell" in rows["vgg19_22k"] and "h100" in rows["vgg19_22k"]
    assert {"lenet", "cifar10_quick", "inception_v3", "resnet50"} <= set(rows)


def test_the_documented_predict_command_runs_from_an_empty_folder(fresh_env, tmp_path):
    result = poseidon(fresh_env, "predict", "--model", "vgg19_22k", "--profile",
                      "titanx-maxwell", "--bandwidth", "10gbit", "--nodes", "1,8",
                      cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vgg19_22k" in result.stdout and "poseidon" in result.stdout


def test_a_local_zoo_or_the_setting_wins(fresh_env, tmp_path):
    local = tmp_path / "models" / "mynet"
    local.mkdir(parents=True)
    shutil.copy(REPO / "models" / "lenet" / "train_val_dummy.prototxt", local)
    listed = poseidon(fresh_env, "models", cwd=tmp_path).stdout
    assert f"zoo: {tmp_path}/models (then {fresh_env}/share/poseidon/models)" in listed
    assert "mynet" in listed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    setting = poseidon(fresh_env, "models", cwd=elsewhere,
                       extra={"POSEIDON_MODELS": str(tmp_path / "models")}).stdout  # fmt: skip
    assert f"zoo: {tmp_path}/models" in setting and "mynet" in setting
