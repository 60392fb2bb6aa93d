"""glog-style logging, so that Caffe's log parsers (parse_log.py, parse_log.sh) keep working.

Format: `Lmmdd hh:mm:ss.uuuuuu <thread id> <file>:<line>] <message>`. Messages go to
stderr like Caffe with `alsologtostderr`; the `caffe` command also writes glog's log files
(caffe/tools/log_files.py). GLOG_minloglevel (0 INFO, 1 WARNING, 2 ERROR, 3 FATAL) is honoured
as in glog.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

_LEVEL_LETTERS = {
    logging.DEBUG: "I",
    logging.INFO: "I",
    logging.WARNING: "W",
    logging.ERROR: "E",
    logging.CRITICAL: "F",
}
_GLOG_LEVELS = [logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL]


class GlogFormatter(logging.Formatter):
    """Formats a record as one glog line (multi-line messages get one prefix per line)."""

    def __init__(self, prefix: str = "") -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        letter = _LEVEL_LETTERS.get(record.levelno, "I")
        seconds = int(record.created)
        micros = int((record.created - seconds) * 1_000_000)
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(seconds))
        tid = getattr(record, "native_tid", None) or threading.get_native_id()
        head = f"{letter}{stamp}.{micros:06d} {tid:>5d} {record.filename}:{record.lineno}] "
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return "\n".join(self.prefix + head + line for line in message.split("\n"))


_handler: logging.Handler | None = None


def init_log(level: int | None = None, stderr: bool = True) -> None:
    """Attach the glog handler to the 'caffe' logger (pycaffe's caffe.init_log)."""
    global _handler
    logger = logging.getLogger("caffe")
    if level is None:
        level = int(os.environ.get("GLOG_minloglevel", "0") or 0)
    logger.setLevel(_GLOG_LEVELS[max(0, min(3, int(level)))])
    if _handler is None and stderr:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(GlogFormatter(os.environ.get("POSEIDON_LOG_PREFIX", "")))
        logger.addHandler(_handler)
        logger.propagate = False


def log(message: str) -> None:
    """pycaffe's caffe.log: one INFO line."""
    logging.getLogger("caffe").info(message, stacklevel=2)
