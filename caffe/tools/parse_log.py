"""Turn a `caffe train` log into CSV tables (the behaviour of Caffe's tools/extra/parse_log.py).

    python -m caffe.tools.parse_log LOG OUTPUT_DIR [--verbose] [--delimiter ,]

writes OUTPUT_DIR/<basename of LOG>.train and .test: columns NumIters, Seconds,
LearningRate, then one column per net output ("loss", "accuracy", ...). Seconds count
from the "Solving" line; each time stamp comes from the glog prefix (month and day from
the first token, time from the second, the year from the log file's creation time,
advanced when the month wraps). Lines before the first "Iteration N" and lines whose
prefix is not a glog time stamp are skipped.

One deliberate difference: upstream drops a last row that is never followed by another
(e.g. a log with a single test pass); here a final row with every column is kept.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
import re
import sys
from collections import OrderedDict
from collections.abc import Iterable

from caffe.errors import CaffeError

ITERATION = re.compile(r"Iteration (\d+)")
TRAIN_OUTPUT = re.compile(r"Train net output #(\d+): (\S+) = ([\.\deE+-]+)")
TEST_OUTPUT = re.compile(r"Test net output #(\d+): (\S+) = ([\.\deE+-]+)")
LEARNING_RATE = re.compile(r"lr = ([-+]?[0-9]*\.?[0-9]+([eE]?[-+]?[0-9]+)?)")


def log_created_year(path: str) -> int:
    return datetime.datetime.fromtimestamp(os.path.getctime(path)).year


def datetime_from_line(line: str, year: int) -> datetime.datetime:
    """The time stamp of a glog line `Lmmdd hh:mm:ss.uuuuuu ...`; ValueError if there is none."""
    tokens = line.strip().split()
    if len(tokens) < 2 or len(tokens[0]) < 5:
        raise ValueError(f"no glog time stamp in {line!r}")
    month, day = int(tokens[0][1:3]), int(tokens[0][3:5])
    clock, _, fraction = tokens[1].rpartition(".")
    hour, minute, second = (int(part) for part in clock.split(":"))
    return datetime.datetime(year, month, day, hour, minute, second, int(fraction))


def start_time(lines: Iterable[str], year: int) -> datetime.datetime:
    """The time stamp of the first "Solving" line."""
    for line in lines:
        if "Solving" in line:
            return datetime_from_line(line, year)
    raise CaffeError("no 'Solving' line found: is this the log of `caffe train`?")


def _output_row(
    pattern: re.Pattern,
    row: OrderedDict | None,
    rows: list[OrderedDict],
    line: str,
    iteration: int,
    seconds: float,
    learning_rate: float,
) -> OrderedDict | None:
    """Add a net output found on `line` to the current row; returns the row still being filled.

    Output #0 starts a new row; a row is complete once it has as many columns as the first.
    """
    match = pattern.search(line)
    if match:
        if row is None or match.group(1) == "0":
            if row is not None:
                rows.append(row)
            row = OrderedDict(
                [("NumIters", iteration), ("Seconds", seconds), ("LearningRate", learning_rate)]
            )
        row[match.group(2)] = float(match.group(3))
    if row is not None and rows and len(row) == len(rows[0]):
        rows.append(row)
        row = None
    return row


def _finish(rows: list[OrderedDict], row: OrderedDict | None) -> list[OrderedDict]:
    if row is not None and (not rows or len(row) == len(rows[0])):
        rows.append(row)
    # The first rows precede the first "lr = " line: give them the next known rate.
    if len(rows) > 1 and math.isnan(rows[0]["LearningRate"]):
        rows[0]["LearningRate"] = rows[1]["LearningRate"]
    return rows


def parse_log(path: str) -> tuple[list[OrderedDict], list[OrderedDict]]:
    """(train rows, test rows) of the log at `path`."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise CaffeError(f"Could not open file {path}: {e.strerror}") from None
    year = log_created_year(path)
    start = start_time(lines, year)
    last = start
    iteration = -1
    learning_rate = float("nan")
    train_rows: list[OrderedDict] = []
    test_rows: list[OrderedDict] = []
    train_row = test_row = None
    for line in lines:
        match = ITERATION.search(line)
        if match:
            iteration = int(match.group(1))
        if iteration == -1:
            continue  # nothing to attribute before the first iteration
        try:
            stamp = datetime_from_line(line, year)
        except ValueError:
            continue  # not a glog line (a wrapped message, a stray print)
        if stamp.month < last.month:
            year += 1  # the log ran past New Year
            stamp = datetime_from_line(line, year)
        last = stamp
        seconds = (stamp - start).total_seconds()
        lr_match = LEARNING_RATE.search(line)
        if lr_match:
            learning_rate = float(lr_match.group(1))
        train_row = _output_row(
            TRAIN_OUTPUT, train_row, train_rows, line, iteration, seconds, learning_rate
        )
        test_row = _output_row(
            TEST_OUTPUT, test_row, test_rows, line, iteration, seconds, learning_rate
        )
    return _finish(train_rows, train_row), _finish(test_rows, test_row)


def write_csv(
    path: str, rows: list[OrderedDict], delimiter: str = ",", verbose: bool = False
) -> None:
    if not rows:
        if verbose:
            print(f"Not writing {path}; no lines to write")
        return
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()), dialect=_dialect(delimiter))
        writer.writeheader()
        writer.writerows(rows)
    if verbose:
        print(f"Wrote {path}")


def _dialect(delimiter: str) -> type[csv.Dialect]:
    class Dialect(csv.excel):
        pass

    Dialect.delimiter = delimiter
    return Dialect


def save_csv_files(
    log_path: str,
    output_dir: str,
    train_rows: list[OrderedDict],
    test_rows: list[OrderedDict],
    delimiter: str = ",",
    verbose: bool = False,
) -> None:
    base = os.path.join(output_dir, os.path.basename(log_path))
    write_csv(base + ".train", train_rows, delimiter, verbose)
    write_csv(base + ".test", test_rows, delimiter, verbose)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="parse_log",
        description="Parse a Caffe training log into two CSV files "
        "containing training and testing information",
    )
    parser.add_argument("logfile_path", help="Path to log file")
    parser.add_argument("output_dir", help="Directory in which to place output CSV files")
    parser.add_argument("--verbose", action="store_true", help="Print some extra info")
    parser.add_argument("--delimiter", default=",", help="Column delimiter in output files")
    args = parser.parse_args(argv)
    if len(args.delimiter) != 1:
        parser.error("--delimiter must be a single character")
    try:
        train_rows, test_rows = parse_log(args.logfile_path)
        save_csv_files(
            args.logfile_path, args.output_dir, train_rows, test_rows, args.delimiter, args.verbose
        )
    except (CaffeError, OSError) as e:
        print(f"parse_log: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
