"""The plan printer: its core on a list of layer shapes (the worked table of
reference §4), the prototxt loader through the engine, and the CLI."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from poseidon.cli import COMMANDS, build_parser, main
from poseidon.plan import LayerShape, format_plan, plan_rows

NET = """
name: "tiny"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 8 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "fc1" type: "InnerProduct" bottom: "conv1" top: "fc1"
        inner_product_param { num_output: 512 } }
layer { name: "fc2" type: "InnerProduct" bottom: "fc1" top: "fc2"
        inner_product_param { num_output: 2 } }
"""


def test_worked_table_rows() -> None:
    layers = [
        LayerShape("fc6", "FC", 4096, 25088, 32, 4096 * 25088 + 4096),
        LayerShape("fc7", "FC", 4096, 4096, 32, 4096 * 4096 + 4096),
        LayerShape("fc8", "FC", 21841, 4096, 32, 21841 * 4096 + 21841),
        LayerShape("fc", "FC", 1000, 2048, 32, 1000 * 2048 + 1000),
        LayerShape("conv", "conv", 512, 4608, 32, 512 * 4608 + 512),
    ]
    rows = plan_rows(layers, 16, 16)
    mb = [(round(r.ps_bytes / 1e6, 1), r.sfb_bytes and round(r.sfb_bytes / 1e6, 1)) for r in rows]
    assert mb[0] == (1541.4, 112.1)
    assert mb[1] == (251.7, 31.5)
    assert mb[2] == (1341.9, 99.6)
    assert mb[3] == (30.7, 11.7)
    assert mb[4][1] is None  # SFB does not apply to convolutions
    assert [r.scheme for r in rows] == ["SFB", "SFB", "SFB", "SFB", "PS"]
    text = format_plan(rows, 16, 16)
    assert re.search(r"fc6\s+FC\s+4096x25088\s+32\s+1541\.41\s+112\.07\s+SFB", text)
    assert re.search(r"conv\s+conv\s+512x4608\s+32\s+\S+\s+-\s+PS", text)
    # GoogLeNet's classifier at K = 128 stays on the PS at 16 workers.
    (g,) = plan_rows([LayerShape("loss3", "FC", 1000, 1024, 128, 1024 * 1000)], 16, 16)
    assert g.scheme == "PS" and g.sfb_bytes > g.ps_bytes


def test_prototxt_through_the_engine(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("caffe")
    path = tmp_path / "tiny.prototxt"
    path.write_text(NET)
    assert main(["plan", "--model", str(path), "--workers", "4", "--servers", "2"]) == 0
    out = capsys.readouterr().out
    assert "P1=4 workers, P2=2 shards" in out
    # conv1: 4x3x3x3 weights; fc1: 512 x (4*6*6); fc2: 2 x 512; K from the bottom (8).
    assert re.search(r"conv1\s+conv\s+4x3x3x3\s+8\s+\S+\s+-\s+PS", out)
    assert re.search(r"fc1\s+FC\s+512x144\s+8\s+\S+\s+\S+\s+SFB", out)
    assert re.search(r"fc2\s+FC\s+2x512\s+8\s+\S+\s+\S+\s+PS", out)
    assert "relu1" not in out  # not learnable
    assert main(["plan", "--model", str(path), "--workers", "4", "--batch", "1000"]) == 0
    assert re.search(r"fc1\s+FC\s+512x144\s+1000\s+\S+\s+\S+\s+PS", capsys.readouterr().out)


def test_plan_reports_a_bad_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("caffe")
    assert main(["plan", "--model", str(tmp_path / "missing.prototxt"), "--workers", "2"]) == 2
    assert "poseidon plan: cannot load" in capsys.readouterr().err


def test_dispatcher_lists_every_subcommand() -> None:
    help_text = build_parser().format_help()
    for name in COMMANDS:
        assert name in help_text
    out = subprocess.run(
        [sys.executable, "-m", "poseidon.cli", "server", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--coordinator" in out and "--rank" in out


def test_node_commands_report_bad_settings(capsys: pytest.CaptureFixture) -> None:
    assert main(["coordinator", "--address", "127.0.0.1:0", "--token", ""]) == 2
    assert "token is empty" in capsys.readouterr().err
    assert main(["server", "--rank", "5", "--servers", "2", "--token", "t"]) == 2
    assert "rank=5 for a server" in capsys.readouterr().err
