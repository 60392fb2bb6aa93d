"""glog's log files of the `caffe` command (caffe/tools/log_files.py): where, names, header,
which severities, the symlinks, GLOG_logtostderr, and an unwritable directory."""

from __future__ import annotations

import logging
import os
import re
import socket
from pathlib import Path

import pytest
import torch

from caffe.tools import parse_log
from caffe.tools.log_files import GlogFileHandler, files_disabled, log_dir, log_to_files, user_name
from tests.caffe.tools.cli_helpers import (
    TINY_NET,
    captured_log,
    messages,
    require_layers,
    run_caffe,
    run_caffe_subprocess,
    write_tiny_solver,
)

HEADER = re.compile(
    r"Log file created at: \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\n"
    r"Running on machine: (?P<host>.*)\n"
    r"Log line format: \[IWEF\]mmdd hh:mm:ss\.uuuuuu threadid file:line\] msg\n"
)


@pytest.fixture
def log_dir_env(tmp_path, monkeypatch) -> Path:
    """GLOG_log_dir pointing at an empty directory of its own; files switched on."""
    directory = tmp_path / "logs"
    directory.mkdir()
    monkeypatch.setenv("GLOG_log_dir", str(directory))
    monkeypatch.delenv("GLOG_logtostderr", raising=False)
    return directory


@pytest.fixture
def tiny_model(tmp_path) -> Path:
    require_layers("DummyData", "InnerProduct", "SoftmaxWithLoss")
    model = tmp_path / "net.prototxt"
    model.write_text(TINY_NET)
    return model


def name_pattern(severity: str) -> re.Pattern:
    host, user = re.escape(socket.gethostname()), re.escape(user_name())
    return re.compile(rf"caffe\.{host}\.{user}\.log\.{severity}\.\d{{8}}-\d{{6}}\.{os.getpid()}")


def log_file(directory: Path, severity: str) -> tuple[str, list[str]]:
    """The one file of `severity` (its name and its lines after the header); checks the
    name, the header and the `caffe.<SEVERITY>` link."""
    names = [p.name for p in directory.iterdir() if f".log.{severity}." in p.name]
    assert len(names) == 1, sorted(os.listdir(directory))
    assert name_pattern(severity).fullmatch(names[0]), names[0]
    assert os.readlink(directory / f"caffe.{severity}") == names[0]
    text = (directory / names[0]).read_text()
    header = HEADER.match(text)
    assert header and header.group("host") == socket.gethostname(), text[:300]
    return names[0], text[header.end() :].splitlines()


def file_messages(directory: Path, severity: str) -> list[str]:
    return messages("\n".join(log_file(directory, severity)[1]))


def severities_written(directory: Path) -> set[str]:
    return {
        p.name.split(".log.")[1].split(".")[0] for p in directory.iterdir() if ".log." in p.name
    }


def test_info_file_holds_the_same_glog_lines_as_stderr(log_dir_env, tiny_model):
    status, log = run_caffe("time", "--model", str(tiny_model), "--iterations", "1")
    assert status == 0, log
    assert "*** Benchmark ends ***" in messages(log)
    _, lines = log_file(log_dir_env, "INFO")
    assert lines == log.splitlines()
    # No warning logged: no WARNING file (glog creates a file at its first line).
    assert not any(line.startswith("W") for line in lines)
    assert severities_written(log_dir_env) == {"INFO"}
    assert sorted(p.name for p in log_dir_env.iterdir() if p.is_symlink()) == ["caffe.INFO"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="uses the no-CUDA warning of --gpu")
def test_a_warning_creates_the_warning_file(log_dir_env, tiny_model):
    args = ("time", "--model", str(tiny_model), "--iterations", "1", "--gpu", "0")
    status, log = run_caffe(*args)
    assert status == 0, log
    warnings = [line for line in log.splitlines() if line.startswith("W")]
    assert len(warnings) == 1 and "no CUDA device" in warnings[0]
    assert log_file(log_dir_env, "WARNING")[1] == warnings
    assert log_file(log_dir_env, "INFO")[1] == log.splitlines()
    assert severities_written(log_dir_env) == {"INFO", "WARNING"}


def test_a_user_error_goes_to_every_file(log_dir_env, tmp_path):
    status, log = run_caffe("time", "--model", str(tmp_path / "missing.prototxt"))
    assert status == 1
    fatal = [line for line in log.splitlines() if line.startswith("F")]
    assert len(fatal) == 1, log
    for severity in ("WARNING", "ERROR", "FATAL"):
        assert log_file(log_dir_env, severity)[1] == fatal
    assert log_file(log_dir_env, "INFO")[1] == log.splitlines()


def test_each_file_takes_its_severity_and_above(log_dir_env):
    logger = logging.getLogger("caffe")
    with captured_log(), log_to_files("caffe") as handler:
        assert isinstance(handler, GlogFileHandler)
        logger.info("one")
        logger.warning("two")
        logger.error("three")
        # Flushed line by line: on disk while the files are still open (crash, Ctrl-C).
        assert file_messages(log_dir_env, "INFO") == ["one", "two", "three"]
    assert file_messages(log_dir_env, "INFO") == ["one", "two", "three"]
    assert file_messages(log_dir_env, "WARNING") == ["two", "three"]
    assert file_messages(log_dir_env, "ERROR") == ["three"]
    assert severities_written(log_dir_env) == {"INFO", "WARNING", "ERROR"}
    # Detached at the end: later library logging writes no file.
    assert not any(isinstance(h, GlogFileHandler) for h in logger.handlers)
    with captured_log():
        logger.error("after")
    assert file_messages(log_dir_env, "ERROR") == ["three"]


def test_only_the_command_attaches_files():
    # `import caffe` (done by now) and finished CLI runs leave stderr as the only output.
    assert not any(isinstance(h, GlogFileHandler) for h in logging.getLogger("caffe").handlers)


@pytest.mark.parametrize("value", ["1", "true"])
def test_logtostderr_writes_no_files(log_dir_env, tiny_model, monkeypatch, value):
    monkeypatch.setenv("GLOG_logtostderr", value)
    status, log = run_caffe("time", "--model", str(tiny_model), "--iterations", "1")
    assert status == 0 and "*** Benchmark ends ***" in messages(log)
    assert list(log_dir_env.iterdir()) == []


@pytest.mark.parametrize("where", ["missing", "a_file/logs"])
def test_unwritable_directory_warns_once_and_the_command_succeeds(
    tmp_path, tiny_model, monkeypatch, where
):
    (tmp_path / "a_file").write_text("not a directory")
    directory = tmp_path / where
    monkeypatch.setenv("GLOG_log_dir", str(directory))
    monkeypatch.delenv("GLOG_logtostderr", raising=False)
    status, log = run_caffe("time", "--model", str(tiny_model), "--iterations", "1")
    assert status == 0, log
    warnings = [line for line in log.splitlines() if line.startswith("W")]
    assert len(warnings) == 1, warnings
    assert f"Not writing log files to {directory}: " in warnings[0]
    assert "No such file or directory" in warnings[0] or "Not a directory" in warnings[0]
    assert "*** Benchmark ends ***" in messages(log)  # stderr logging went on
    assert not directory.exists()


def test_files_carry_no_rank_prefix_and_subprocesses_inherit_the_directory(log_dir_env, tiny_model):
    # GLOG_log_dir reaches the child through the environment, as the suite's conftest
    # relies on; the prefix marks stderr lines only.
    result = run_caffe_subprocess(
        "time", "--model", str(tiny_model), "--iterations", "1",
        POSEIDON_LOG_PREFIX="[worker 1] ", GLOG_logtostderr="0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    stderr = result.stderr.splitlines()
    assert stderr and all(line.startswith("[worker 1] ") for line in stderr)
    names = [p.name for p in log_dir_env.iterdir() if ".log.INFO." in p.name]
    assert len(names) == 1, names
    text = (log_dir_env / names[0]).read_text()
    header = HEADER.match(text)
    assert header
    assert text[header.end() :].splitlines() == [
        line.removeprefix("[worker 1] ") for line in stderr
    ]


def test_parse_log_reads_a_training_log_file(log_dir_env, tmp_path):
    require_layers("DummyData", "InnerProduct", "Accuracy", "SoftmaxWithLoss")
    solver = write_tiny_solver(tmp_path, max_iter=2, test_interval=2)
    status, log = run_caffe("train", "--solver", str(solver))
    assert status == 0, log
    name, _ = log_file(log_dir_env, "INFO")
    out = tmp_path / "csv"
    out.mkdir()
    assert parse_log.main([str(log_dir_env / name), str(out)]) == 0
    train = (out / f"{name}.train").read_text().splitlines()
    test = (out / f"{name}.test").read_text().splitlines()
    assert train[0] == "NumIters,Seconds,LearningRate,loss"
    assert [int(row.split(",")[0]) for row in train[1:]] == [0, 1]
    assert [int(row.split(",")[0]) for row in test[1:]] == [0, 2]


def test_log_dir_follows_glogs_order(tmp_path):
    missing = str(tmp_path / "missing")
    assert log_dir({"GLOG_log_dir": missing, "TMPDIR": str(tmp_path)}) == missing
    assert log_dir({"TMPDIR": missing, "TMP": str(tmp_path), "TEMP": "/"}) == str(tmp_path)
    assert log_dir({"GLOG_log_dir": "", "TEMP": str(tmp_path)}) == str(tmp_path)
    if os.access("/tmp", os.W_OK):
        assert log_dir({"TMPDIR": missing}) == "/tmp"


def test_logtostderr_spellings():
    assert files_disabled({"GLOG_logtostderr": "1"})
    assert files_disabled({"GLOG_logtostderr": "True"})
    assert not files_disabled({"GLOG_logtostderr": "0"})
    assert not files_disabled({})
