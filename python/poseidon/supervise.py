"""Run one process of a job on a lifeline from its launcher: `poseidon launch` starts every
coordinator, shard and worker (here or over ssh) as

    python -m poseidon.supervise --role worker -- caffe train --solver S

with the write end of a pipe as this process's stdin: the lifeline. The launcher writes
control lines to it; when it closes — the launcher exited, was killed (even by SIGKILL),
or its ssh session dropped — this process reads EOF and ends the job's process here.

Note [lifeline]. A killed launcher cannot clean up after itself, and neither signals nor
PR_SET_PDEATHSIG cross ssh; a pipe's EOF does, locally and through ssh's stdin alike.
On EOF:
- a worker gets SIGTERM, which `caffe train` serves as its --sigint_effect (by default: stop
  at an iteration every worker agrees on, rank 0 writes the final snapshot; see
  caffe/parallel/syncer.py, Note [agreed actions]); the coordinator and the shards are left to end
  by themselves once the workers have shut down;
- after `--grace` seconds anything still running here is killed (SIGKILL to its process
  group), so every process of the job is gone within that time of losing the launcher.
Its output is relayed line by line to our stdout; when nobody reads that any more (the
launcher died), it is discarded instead, so that a child finishing its snapshot is not
killed by a broken pipe. The child is killed with us if this supervisor itself is killed
(PR_SET_PDEATHSIG on Linux).

Control lines: `signal INT|TERM|HUP|KILL|CONT` sends that signal to the child's process
group. The exit status is the child's (128 + N when signal N ended it).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

ROLES = ("worker", "coordinator", "server")
DEFAULT_GRACE_S = 8.0
SIGNALS = {name: getattr(signal, f"SIG{name}") for name in ("INT", "TERM", "HUP", "KILL", "CONT")}
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the supervisor dies (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


class Supervisor:
    def __init__(self, command: Sequence[str], role: str, grace_s: float) -> None:
        self.role = role
        self.grace_s = grace_s
        self.lost_at: float | None = None  # monotonic time the lifeline closed
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        self.child = subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec,
        )  # fmt: skip
        self._relay = threading.Thread(target=self._relay_output, daemon=True)
        self._relay.start()

    def signal(self, signum: int) -> None:
        """To the child's whole process group (it may have children of its own)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.child.pid, signum)

    def _relay_output(self) -> None:
        out = sys.stdout.buffer
        reading = True
        for line in iter(self.child.stdout.readline, b""):
            if not reading:
                continue
            try:
                out.write(line)
                out.flush()
            except OSError:
                reading = False  # the launcher is gone: drain, so the child never blocks

    def on_control(self, line: str) -> None:
        verb, _, name = line.strip().partition(" ")
        if verb == "signal" and name in SIGNALS:
            self.signal(SIGNALS[name])
        elif line.strip():
            print(f"[supervise] ignoring control line {line.strip()!r}", file=sys.stderr)

    def on_lifeline_lost(self) -> None:
        if self.lost_at is not None:
            return
        self.lost_at = time.monotonic()
        if self.role == "worker":
            self.signal(signal.SIGTERM)

    def watch_lifeline(self) -> None:
        """Reads control lines until EOF (on its own thread: the main one waits)."""
        with contextlib.suppress(OSError, ValueError):
            for line in sys.stdin:
                self.on_control(line)
        self.on_lifeline_lost()

    def wait(self) -> int:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.child.wait(0.1)
                break
            if self.lost_at is not None and time.monotonic() - self.lost_at > self.grace_s:
                self.signal(signal.SIGKILL)
        self.signal(signal.SIGKILL)  # whatever the child left behind in its group
        self._relay.join(2.0)
        return 128 - code if code < 0 else code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m poseidon.supervise",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--role", choices=ROLES, required=True)
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        help="seconds between losing the lifeline and killing the process",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    try:
        supervisor = Supervisor(command, args.role, args.grace)
    except OSError as e:
        print(f"[supervise] cannot run {command[0]!r} on {os.uname().nodename}: "
              f"{e.strerror or e}", flush=True)  # fmt: skip
        return 127
    # Signals to us (the launcher's process group, ssh's hangup) go on to the child; a
    # hangup means the session that started us is gone: the lifeline is lost.
    for name in ("INT", "TERM"):
        signal.signal(SIGNALS[name], lambda signum, _frame: supervisor.signal(signum))
    signal.signal(signal.SIGHUP, lambda _signum, _frame: supervisor.on_lifeline_lost())
    threading.Thread(target=supervisor.watch_lifeline, daemon=True).start()
    return supervisor.wait()


if __name__ == "__main__":
    sys.exit(main())
