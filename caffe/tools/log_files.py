"""glog's log files for the `caffe` command, so that `tail -f /tmp/caffe.INFO` and
parse_log.py on those files work as with BVLC's tool (glog with alsologtostderr).

Where: $GLOG_log_dir if set, else the first existing, writable one of $TMPDIR, $TMP,
$TEMP, /tmp (glog's order). One file per severity,
`<program>.<host>.<user>.log.<SEVERITY>.<yyyymmdd>-<hhmmss>.<pid>`, created at the first
line of that severity or higher, with glog's three-line header; the INFO file gets every
line, WARNING warnings and above, and so on. A symlink `<program>.<SEVERITY>` names the
newest file. GLOG_logtostderr=1 turns files off; GLOG_minloglevel filters them like
stderr (it is the 'caffe' logger's level). Only the CLI enables this (`log_to_files`):
`import caffe` logs to stderr only.
"""

from __future__ import annotations

import getpass
import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import TextIO

from caffe.log import GlogFormatter

# Each file takes the records at its level and above, as glog's files do.
SEVERITIES: tuple[tuple[str, int], ...] = (
    ("INFO", logging.INFO),
    ("WARNING", logging.WARNING),
    ("ERROR", logging.ERROR),
    ("FATAL", logging.CRITICAL),
)
_TEMP_DIR_VARIABLES = ("TMPDIR", "TMP", "TEMP")
_TRUE = {"1", "true", "t", "yes", "y"}  # gflags' spellings of a true bool

_log = logging.getLogger("caffe")


def files_disabled(env: Mapping[str, str] = os.environ) -> bool:
    """GLOG_logtostderr=1: stderr only, as in glog."""
    return env.get("GLOG_logtostderr", "").strip().lower() in _TRUE


def log_dir(env: Mapping[str, str] = os.environ) -> str | None:
    """GLOG_log_dir, else the first usable temp directory; None when there is none.

    GLOG_log_dir is taken as given, even if unusable: the user asked for it, so a failure
    there is reported rather than silently sent elsewhere.
    """
    if env.get("GLOG_log_dir"):
        return env["GLOG_log_dir"]
    candidates = [env[name] for name in _TEMP_DIR_VARIABLES if env.get(name)] + ["/tmp"]
    for directory in candidates:
        if os.path.isdir(directory) and os.access(directory, os.W_OK):
            return directory
    return None


def user_name() -> str:
    try:
        return getpass.getuser() or "invalid-user"
    except (KeyError, OSError, ImportError):  # no login name and no passwd entry
        return "invalid-user"


def file_name(program: str, severity: str, created: float, host: str, user: str) -> str:
    """`caffe.host.user.log.INFO.20240130-100000.4242`, glog's name."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(created))
    return f"{program}.{host}.{user}.log.{severity}.{stamp}.{os.getpid()}"


def header(created: float, host: str) -> str:
    """glog's first lines; parsers skip them (they are not glog lines)."""
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(created))
    return (
        f"Log file created at: {stamp}\n"
        f"Running on machine: {host}\n"
        "Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n"
    )


def point_link(directory: str, link_name: str, target: str) -> None:
    """Make `directory/link_name` name `target` (relative, like glog's), replacing an old link.

    Best effort: a file system without symlinks just has no link.
    """
    link = os.path.join(directory, link_name)
    try:
        if os.path.islink(link):
            os.unlink(link)
        os.symlink(target, link)
    except OSError:
        pass


class GlogFileHandler(logging.Handler):
    """Writes each record to the file of every severity at or below its own.

    Lines are formatted exactly as on stderr but without POSEIDON_LOG_PREFIX: that prefix
    tells processes apart on a shared terminal, and each process has its own files. Every
    line is flushed at once so that a crash or Ctrl-C loses nothing. The first OSError
    (unwritable directory, full disk) turns the files off with one warning: logging must
    never fail the command.
    """

    def __init__(self, directory: str, program: str) -> None:
        super().__init__()
        self.setFormatter(GlogFormatter())
        self.directory = directory
        self.program = program
        self.host = socket.gethostname()
        self.user = user_name()
        self.files: dict[str, TextIO] = {}
        # False after an error or close(): a line logged late (another thread, or the
        # warning of _give_up coming back here) must not reopen the files.
        self.writing = True

    def emit(self, record: logging.LogRecord) -> None:
        # Called with self.lock held (logging.Handler.handle), so files are never shared.
        if not self.writing:
            return
        try:
            line = self.format(record) + "\n"
            for severity, level in SEVERITIES:
                if record.levelno >= level:
                    stream = self._file(severity, record.created)
                    stream.write(line)
                    stream.flush()
        except OSError as error:
            self._give_up(error)
        except Exception:  # a bad format string: report it as logging's own handlers do
            self.handleError(record)

    def _file(self, severity: str, created: float) -> TextIO:
        """The file of `severity`, created (with header and link) at its first line."""
        stream = self.files.get(severity)
        if stream is None:
            name = file_name(self.program, severity, created, self.host, self.user)
            # Append: a second CLI run in the same process and second (tests) continues
            # the same file rather than truncating it; glog keeps one file per process too.
            # Open until close(): a file per line would cost an open per log line.
            path = os.path.join(self.directory, name)
            stream = open(path, "a", encoding="utf-8")  # noqa: SIM115
            self.files[severity] = stream
            if stream.tell() == 0:
                stream.write(header(created, self.host))
            point_link(self.directory, f"{self.program}.{severity}", name)
        return stream

    def _give_up(self, error: OSError) -> None:
        self._close_files()
        _log.warning("Not writing log files to %s: %s", self.directory, error)

    def _close_files(self) -> None:
        with self.lock:  # not while another thread is writing a line
            self.writing = False
            for stream in self.files.values():
                with suppress(OSError):  # a full disk must not fail the command at exit
                    stream.close()
            self.files.clear()

    def close(self) -> None:
        self._close_files()
        super().close()


def start_log_files(program: str, env: Mapping[str, str] = os.environ) -> GlogFileHandler | None:
    """Attach a GlogFileHandler to the 'caffe' logger; None when files are off or impossible."""
    if files_disabled(env):
        return None
    directory = log_dir(env)
    if directory is None:
        names = ", ".join(f"${name}" for name in _TEMP_DIR_VARIABLES)
        _log.warning("Not writing log files: none of %s, /tmp is a writable directory", names)
        return None
    handler = GlogFileHandler(directory, program)
    _log.addHandler(handler)
    return handler


@contextmanager
def log_to_files(program: str) -> Iterator[GlogFileHandler | None]:
    """glog's log files for the duration of a command (the CLI wraps its main in this).

    Detaching at the end matters for in-process runs (tests): the next run may use another
    directory, and later library use must not write to this one.
    """
    handler = start_log_files(program)
    try:
        yield handler
    finally:
        if handler is not None:
            _log.removeHandler(handler)
            handler.close()
