"""python -m caffe.tools.draw_net: arguments, output formats and errors."""

import shutil
import subprocess
import sys

import pytest

import caffe
from caffe import draw
from caffe.formats.proto_io import read_net_param
from caffe.net_filter import filter_net
from caffe.proto import caffe_pb2
from caffe.tools import draw_net
from tests.caffe.tools.cli_helpers import REPO_ROOT, subprocess_env

LENET = REPO_ROOT / "models" / "lenet" / "train_val.prototxt"
NET_FILES = sorted(p for p in (REPO_ROOT / "models").glob("*/*.prototxt") if "solver" not in p.name)


def test_defaults_draw_every_phase_left_to_right(tmp_path, caffe_log):
    out = tmp_path / "lenet.dot"
    assert draw_net.main([str(LENET), str(out)]) == 0
    assert out.read_text() == draw.net_to_dot(read_net_param(str(LENET)), "LR")
    assert f"Drawing net to {out}" in caffe_log.text


def test_phase_rankdir_and_display_lrm(tmp_path):
    out = tmp_path / "lenet.gv"
    args = [str(LENET), str(out), "--rankdir", "TB", "--phase", "train", "--display_lrm"]
    assert draw_net.main(args) == 0
    text = out.read_text()
    net = read_net_param(str(LENET))
    assert text == draw.net_to_dot(net, "TB", phase=0, display_lrm=True)
    assert "graph [rankdir=TB];" in text and "lr_mult 2" in text
    assert "accuracy" not in text


@pytest.mark.parametrize("path", NET_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_model_in_the_zoo_draws(tmp_path, path):
    out = tmp_path / "net.dot"
    assert draw_net.main([str(path), str(out), "--phase", "TEST"]) == 0
    state = caffe_pb2.NetState(phase=caffe.TEST)
    layers = filter_net(read_net_param(str(path)), state).layer
    text = out.read_text()
    assert text.count('shape="box"') == len(layers)
    for layer in layers:
        assert f'[label="{layer.name}\\n({layer.type})' in text


def test_bad_prototxt_fails_with_its_location(tmp_path, caffe_log):
    bad = tmp_path / "bad.prototxt"
    bad.write_text('name: "x"\nlayer {\n  name: "a"\n  tpye: "ReLU"\n}\n')
    assert draw_net.main([str(bad), str(tmp_path / "out.dot")]) == 1
    assert f"{bad}:4:3:" in caffe_log.text and "tpye" in caffe_log.text
    assert not (tmp_path / "out.dot").exists()


def test_missing_graphviz_fails_naming_it(tmp_path, caffe_log, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert draw_net.main([str(LENET), str(tmp_path / "lenet.png")]) == 1
    assert "install graphviz" in caffe_log.text


def test_unknown_phase_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        draw_net.main([str(LENET), str(tmp_path / "x.dot"), "--phase", "VAL"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'VAL'" in capsys.readouterr().err


def run_script(*args):
    return subprocess.run(
        [sys.executable, "-m", "caffe.tools.draw_net", *args],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_script_reports_one_line_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.prototxt"
    bad.write_text("layer { name: 3 }\n")
    result = run_script(str(bad), str(tmp_path / "out.png"))
    assert result.returncode == 1
    assert f"{bad}:1:15:" in result.stderr and "Traceback" not in result.stderr
    ok = run_script(str(LENET), str(tmp_path / "out.dot"))
    assert ok.returncode == 0 and (tmp_path / "out.dot").read_text().startswith("digraph")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_png_through_graphviz(tmp_path):
    out = tmp_path / "lenet.png"
    assert draw_net.main([str(LENET), str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
