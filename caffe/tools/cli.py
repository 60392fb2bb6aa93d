"""The `caffe` command: `caffe <command> <flags>` with train, test, time and device_query.

Flags use gflags syntax (caffe/tools/flags.py); everything is logged through the glog
formatter of caffe/log.py, so Caffe's log parsers work on our logs, to stderr and to glog's
log files (caffe/tools/log_files.py). A user error (bad flag, missing or malformed file, unknown
layer type, wrong shapes: every CaffeError) prints one fatal log line and exits with
status 1; Python tracebacks appear only with --debug or CAFFE_DEBUG=1. Exit status: 0
success (also a train run that Ctrl-C or SIGHUP stopped early, as in Caffe), 1 user error,
130 interrupted by Ctrl-C at once (during test or time, or a second Ctrl-C in train).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable

import caffe
from caffe.errors import CaffeError
from caffe.tools.benchmark import benchmark
from caffe.tools.device_query import device_query
from caffe.tools.flags import Flags, flags_help, parse_command_line
from caffe.tools.log_files import log_to_files
from caffe.tools.score import score
from caffe.tools.train import EXIT_INTERRUPTED, train

_log = logging.getLogger("caffe")
EXIT_USER_ERROR = 1

# Caffe's brew functions, in the order its usage message lists them.
COMMANDS: dict[str, tuple[Callable[[Flags], int], str]] = {
    "train": (train, "train or finetune a model"),
    "test": (score, "score a model"),
    "device_query": (device_query, "show GPU diagnostic information"),
    "time": (benchmark, "benchmark model execution time"),
}


def usage() -> str:
    commands = "\n".join(f"  {name:<15} {text}" for name, (_, text) in COMMANDS.items())
    return (
        "caffe: command line brew\n"
        "usage: caffe <command> <args>\n\n"
        f"commands:\n{commands}\n\n"
        f"  Flags:\n{flags_help()}\n"
    )


def _debug_requested(argv: list[str]) -> bool:
    if os.environ.get("CAFFE_DEBUG", "") not in ("", "0"):
        return True
    return any(arg.lstrip("-").split("=")[0] == "debug" for arg in argv if arg.startswith("-"))


def run(argv: list[str]) -> int:
    """Parse argv (without the program name) and run the command; errors propagate."""
    line = parse_command_line(argv)
    if "version" in line.special:
        print(f"caffe version {caffe.__version__}")
        return 0
    if line.special & {"help", "helpshort"}:
        sys.stderr.write(usage())
        return 0
    if not line.positional:
        sys.stderr.write(usage())
        return EXIT_USER_ERROR
    command, *extra = line.positional
    if command not in COMMANDS:
        raise CaffeError(
            f"Unknown action: {command}. Available caffe actions: {', '.join(sorted(COMMANDS))}"
        )
    if extra:
        raise CaffeError(f"Unexpected argument '{extra[0]}' after 'caffe {command}'.")
    action, _ = COMMANDS[command]
    return action(line.flags)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `caffe` console script; returns the exit status.

    Logs go to stderr and, as BVLC's tool does through glog, to log files
    (caffe/tools/log_files.py); `import caffe` alone writes no files.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    with log_to_files("caffe"):
        return _run_with_exit_status(argv)


def _run_with_exit_status(argv: list[str]) -> int:
    """run(argv), with a user error or Ctrl-C turned into a log line and an exit status."""
    debug = _debug_requested(argv)
    try:
        return run(argv)
    except CaffeError as error:
        if debug:
            traceback.print_exc()
        _log.critical("%s", error)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        _log.error("Interrupted.")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
