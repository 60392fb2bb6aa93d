"""Running the `caffe` command in tests: in-process (fast, log captured as glog text) or as
a real subprocess (exit status, stderr, signals)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import caffe
from caffe.log import GlogFormatter
from caffe.tools.cli import main

REPO_ROOT = Path(__file__).resolve().parents[3]
CAFFE_SCRIPT = [sys.executable, "-m", "caffe.tools.cli"]


@contextmanager
def captured_log():
    """Collect every "caffe" log record, glog-formatted, into a StringIO."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(GlogFormatter())
    logger = logging.getLogger("caffe")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def run_caffe(*args: str) -> tuple[int, str]:
    """`caffe args...` in this process: (exit status, glog text)."""
    with captured_log() as stream:
        status = main(list(args))
    return status, stream.getvalue()


def messages(log: str) -> list[str]:
    """The message part of every glog line (after `] `)."""
    return [line.split("] ", 1)[1] for line in log.splitlines() if "] " in line]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["GLOG_minloglevel"] = "0"
    env.pop("CAFFE_DEBUG", None)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_caffe_subprocess(
    *args: str, cwd: Path | None = None, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CAFFE_SCRIPT, *args],
        cwd=cwd or REPO_ROOT,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for_text(path: Path, text: str, process: subprocess.Popen, timeout: float = 120) -> str:
    """Poll the file until it contains `text`; fail if the process ends or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        if process.poll() is not None:
            pytest.fail(f"caffe exited ({process.returncode}) before logging {text!r}:\n{content}")
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"no {text!r} in the log after {timeout} s:\n{path.read_text()}")


def require_layers(*types: str) -> None:
    missing = sorted(set(types) - set(caffe.layer_type_list()))
    if missing:
        pytest.skip(f"layer types not registered yet: {', '.join(missing)}")


# A small classifier on random data: fast to build and train, with a TEST-only Accuracy.
TINY_NET = """
name: "tiny"
layer {
  name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param {
    shape { dim: 8 dim: 3 dim: 4 dim: 4 } shape { dim: 8 }
    data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 }
  }
}
layer {
  name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } }
}
layer {
  name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy"
  include { phase: TEST }
}
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def write_tiny_solver(directory: Path, max_iter: int = 6, **fields: object) -> Path:
    """A solver for TINY_NET in `directory` (snapshots there too); `fields` override, and a
    field given as None is left out."""
    (directory / "tiny_net.prototxt").write_text(TINY_NET)
    settings: dict[str, object] = dict(
        net=str(directory / "tiny_net.prototxt"),
        test_iter=2,
        test_interval=3,
        base_lr=0.1,
        lr_policy="fixed",
        momentum=0.9,
        display=1,
        max_iter=max_iter,
        snapshot=max_iter,
        snapshot_prefix=str(directory / "tiny"),
        random_seed=3,
    )
    settings.update(fields)
    lines = []
    for key, value in settings.items():
        if value is None:
            continue
        quoted = f'"{value}"' if key in ("net", "lr_policy", "snapshot_prefix") else value
        lines.append(f"{key}: {quoted}")
    path = directory / "solver.prototxt"
    path.write_text(textwrap.dedent("\n".join(lines)) + "\n")
    return path
