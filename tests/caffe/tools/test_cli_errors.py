"""User errors: one fatal glog line naming what is wrong, exit status 1, no traceback."""

import re

import pytest
import torch

import caffe
from tests.caffe.tools.cli_helpers import TINY_NET, messages, run_caffe, run_caffe_subprocess

FATAL_LINE = re.compile(r"^F\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ cli\.py:\d+\] ", re.MULTILINE)


def fatal_message(log: str) -> str:
    lines = [line for line in log.splitlines() if FATAL_LINE.match(line)]
    assert len(lines) == 1, log
    return lines[0].split("] ", 1)[1]


def test_unknown_command_lists_the_available_actions():
    status, log = run_caffe("fly", "--model", "x")
    assert status == 1
    message = fatal_message(log)
    assert "Unknown action: fly" in message
    for action in ("device_query", "test", "time", "train"):
        assert action in message


def test_no_command_prints_usage(capsys):
    assert run_caffe()[0] == 1
    usage = capsys.readouterr().err
    assert "usage: caffe <command> <args>" in usage
    assert "train           train or finetune a model" in usage
    assert "-sigint_effect" in usage


def test_help_and_version_succeed(capsys):
    assert run_caffe("--help")[0] == 0
    assert "commands:" in capsys.readouterr().err
    assert run_caffe("--version")[0] == 0
    assert capsys.readouterr().out.strip() == f"caffe version {caffe.__version__}"


@pytest.mark.parametrize(
    "args,expected",
    [
        (["train"], "Need a solver definition to train"),
        (
            ["train", "--solver", "s", "--snapshot", "a.solverstate", "--weights", "b"],
            "Give a snapshot to resume training or weights to finetune but not both",
        ),
        (["test", "--weights", "w.caffemodel"], "Need a model definition to score"),
        (["test", "--model", "m.prototxt"], "Need model weights to score"),
        (["time"], "Need a model definition to time"),
        (["device_query"], "Need a device ID to query"),
        (
            ["train", "--solver", "s", "--sigint_effect", "explode"],
            'Invalid signal effect "explode"',
        ),
        (["time", "--model", "m", "--gpu", "first"], "illegal value 'first' for flag 'gpu'"),
        (["time", "--model", "m", "--iterations", "0"], "--iterations must be at least 1"),
        (
            ["train", "--solver", "/nonexistent/solver.prototxt"],
            "Could not open file /nonexistent/solver.prototxt",
        ),
        (["train", "--frobnicate"], "unknown command line flag 'frobnicate'"),
        (
            ["train", "--solver", "s", "--nonfinite_limit", "-1"],
            "--nonfinite_limit must be an integer >= 0",
        ),
        (["time", "extra", "--model", "m"], "Unexpected argument 'extra'"),
    ],
)
def test_user_errors_are_one_fatal_line(args, expected):
    status, log = run_caffe(*args)
    assert status == 1
    assert expected in fatal_message(log)


def test_an_empty_solver_file_is_named(tmp_path):
    solver = tmp_path / "solver.prototxt"
    solver.write_text("")
    status, log = run_caffe("train", "--solver", str(solver))
    assert status == 1
    assert fatal_message(log) == (
        f"{solver}: the solver file is empty; it names no net to train (set one of: net, "
        "net_param, train_net, train_net_param)"
    )


def test_bad_phase_is_named(tmp_path):
    model = tmp_path / "net.prototxt"
    model.write_text(TINY_NET)
    status, log = run_caffe("time", "--model", str(model), "--phase", "VALIDATE")
    assert status == 1
    assert 'phase must be "TRAIN" or "TEST"' in fatal_message(log)


def test_unknown_layer_type_lists_the_known_ones(tmp_path):
    model = tmp_path / "net.prototxt"
    model.write_text(TINY_NET.replace('type: "InnerProduct"', 'type: "InnerProdcut"'))
    status, log = run_caffe("time", "--model", str(model), "--iterations", "1")
    assert status == 1
    message = fatal_message(log)
    assert "Unknown layer type: 'InnerProdcut' (layer 'ip')" in message
    known = message.split("Known types: ", 1)[1].split(", ")
    assert known == caffe.layer_type_list()


def test_malformed_prototxt_names_file_line_and_column_without_traceback(tmp_path):
    model = tmp_path / "broken.prototxt"
    model.write_text('name: "broken"\nlayer {\n  name: "data"\n  tpye: "Input"\n}\n')
    result = run_caffe_subprocess("time", "--model", str(model))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    message = fatal_message(result.stderr)
    assert message.startswith(f"{model}:4:3: ")
    assert "tpye" in message


def test_debug_flag_and_env_show_the_traceback(tmp_path, capsys, monkeypatch):
    missing = str(tmp_path / "missing.prototxt")
    assert run_caffe("time", "--model", missing, "--debug")[0] == 1
    assert "Traceback" in capsys.readouterr().err
    assert run_caffe("time", "--model", missing)[0] == 1
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.setenv("CAFFE_DEBUG", "1")
    assert run_caffe("time", "--model", missing)[0] == 1
    assert "Traceback" in capsys.readouterr().err


def test_shape_error_names_the_layer(tmp_path):
    model = tmp_path / "net.prototxt"
    # Eltwise needs equal shapes: 4 channels against 3.
    model.write_text(
        """
        layer { name: "a" type: "Input" top: "a" input_param { shape { dim: 1 dim: 3 } } }
        layer { name: "b" type: "Input" top: "b" input_param { shape { dim: 1 dim: 4 } } }
        layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "sum" }
        """
    )
    status, log = run_caffe("time", "--model", str(model), "--iterations", "1")
    assert status == 1
    assert "sum" in fatal_message(log)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_gpu_flag_without_cuda_falls_back_to_cpu_with_one_warning(tmp_path):
    model = tmp_path / "net.prototxt"
    model.write_text(TINY_NET)
    status, log = run_caffe("time", "--model", str(model), "--iterations", "1", "--gpu", "0")
    assert status == 0
    warnings = [line for line in log.splitlines() if line.startswith("W")]
    assert len(warnings) == 1 and "no CUDA device" in warnings[0], warnings
    assert "Use CPU." in messages(log)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_device_query_without_cuda_says_so():
    status, log = run_caffe("device_query", "--gpu", "0")
    assert status == 1
    assert "No CUDA device is available" in fatal_message(log)
