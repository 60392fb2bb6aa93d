"""parse_log turns `caffe train` logs into .train/.test CSVs, as Caffe's parse_log.py does."""

import csv
import os
import time

import pytest

from caffe.tools import parse_log


def read_csv(path, delimiter=","):
    with open(path, newline="") as f:
        return list(csv.reader(f, delimiter=delimiter))


def test_our_train_log_parses_into_train_and_test_tables(trained_tiny, tmp_path):
    directory, status, _ = trained_tiny
    assert status == 0
    log_path = directory / "train.log"
    assert parse_log.main([str(log_path), str(tmp_path)]) == 0
    train = read_csv(tmp_path / "train.log.train")
    test = read_csv(tmp_path / "train.log.test")
    assert train[0] == ["NumIters", "Seconds", "LearningRate", "loss"]
    assert test[0] == ["NumIters", "Seconds", "LearningRate", "accuracy", "loss"]
    # display: 1 over 6 iterations; test_interval 3 with test_initialization (the
    # default) tests at 0 and 3, and the solver tests once more after the last iteration.
    assert [int(row[0]) for row in train[1:]] == list(range(6))
    assert [int(row[0]) for row in test[1:]] == [0, 3, 6]
    seconds = [float(row[1]) for row in train[1:]]
    assert seconds == sorted(seconds) and all(s >= 0 for s in seconds)
    assert {float(row[2]) for row in train[1:]} == {0.1}  # lr_policy fixed, base_lr 0.1
    for row in test[1:]:
        assert 0.0 <= float(row[3]) <= 1.0
        assert float(row[4]) > 0


def glog(month_day: str, clock: str, message: str) -> str:
    return f"I{month_day} {clock} 4242 solver.cpp:204] {message}\n"


SYNTHETIC_LOG = (
    "a line before the solver starts\n"
    + glog("1231", "23:59:58.000000", "Solving LeNet")
    + glog("1231", "23:59:58.500000", "Iteration 0, Testing net (#0)")
    + glog("1231", "23:59:59.000000", "    Test net output #0: accuracy = 0.1")
    + glog("1231", "23:59:59.000000", "    Test net output #1: loss = 2.3 (* 1 = 2.3 loss)")
    + glog("1231", "23:59:59.250000", "Iteration 0 (0 iter/s, 0.1s/100 iters), loss = 2.31")
    + glog("1231", "23:59:59.250000", "    Train net output #0: loss = 2.31 (* 1 = 2.31 loss)")
    + glog("1231", "23:59:59.250000", "Iteration 0, lr = 0.01")
    + "a wrapped continuation line without a prefix\n"
    + glog("0101", "00:00:01.000000", "Iteration 100 (50 iter/s, 2s/100 iters), loss = 0.5")
    + glog("0101", "00:00:01.000000", "    Train net output #0: loss = 0.5 (* 1 = 0.5 loss)")
    + glog("0101", "00:00:01.000000", "Iteration 100, lr = 9.92565e-03")
    + glog("0101", "00:00:02.000000", "Iteration 100, Testing net (#0)")
    + glog("0101", "00:00:02.000000", "    Test net output #0: accuracy = 0.9")
    + glog("0101", "00:00:02.000000", "    Test net output #1: loss = 0.3 (* 1 = 0.3 loss)")
)


@pytest.fixture
def synthetic_log(tmp_path):
    path = tmp_path / "lenet.log"
    path.write_text(SYNTHETIC_LOG)
    return path


def test_rows_columns_seconds_and_new_year(synthetic_log):
    year = parse_log.log_created_year(str(synthetic_log))
    train, test = parse_log.parse_log(str(synthetic_log))
    # Seconds count from "Solving"; the log crosses midnight of New Year's Eve.
    assert [dict(row) for row in train] == [
        dict(NumIters=0, Seconds=1.25, LearningRate=0.01, loss=2.31),
        dict(NumIters=100, Seconds=3.0, LearningRate=0.01, loss=0.5),
    ]
    # A row takes the last rate logged before it; the first test row precedes any
    # "lr =" line and takes the next row's rate.
    assert [dict(row) for row in test] == [
        dict(NumIters=0, Seconds=1.0, LearningRate=9.92565e-03, accuracy=0.1, loss=2.3),
        dict(NumIters=100, Seconds=4.0, LearningRate=9.92565e-03, accuracy=0.9, loss=0.3),
    ]
    assert year >= 2000


def test_learning_rate_forms(tmp_path):
    path = tmp_path / "rates.log"
    for written, value in (("1e-05", 1e-05), ("2", 2.0), ("-.5E+1", -5.0), ("0.001", 0.001)):
        path.write_text(SYNTHETIC_LOG.replace("lr = 9.92565e-03", f"lr = {written}"))
        _, test = parse_log.parse_log(str(path))
        assert test[1]["LearningRate"] == pytest.approx(value)


def test_delimiter_and_output_names(synthetic_log, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert parse_log.main([str(synthetic_log), str(out), "--delimiter", ";", "--verbose"]) == 0
    assert f"Wrote {out / 'lenet.log.train'}" in capsys.readouterr().out
    rows = read_csv(out / "lenet.log.test", delimiter=";")
    assert rows[0] == ["NumIters", "Seconds", "LearningRate", "accuracy", "loss"]
    assert len(rows) == 3


def test_a_log_without_outputs_writes_nothing(tmp_path, capsys):
    path = tmp_path / "empty.log"
    path.write_text(glog("0102", "10:00:00.000000", "Solving X"))
    assert parse_log.main([str(path), str(tmp_path), "--verbose"]) == 0
    assert "Not writing" in capsys.readouterr().out
    assert not (tmp_path / "empty.log.train").exists()


def test_a_log_that_is_not_a_training_log_is_an_error(tmp_path, capsys):
    path = tmp_path / "other.log"
    path.write_text("hello\n")
    assert parse_log.main([str(path), str(tmp_path)]) == 1
    assert "no 'Solving' line" in capsys.readouterr().err
    assert parse_log.main([str(tmp_path / "missing.log"), str(tmp_path)]) == 1


def test_year_comes_from_the_file(tmp_path):
    path = tmp_path / "x.log"
    path.write_text("")
    assert parse_log.log_created_year(str(path)) == time.localtime(os.path.getctime(path)).tm_year
