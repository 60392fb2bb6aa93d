"""One process of a job as the launcher holds it: started here or over ssh under
`poseidon.supervise` (Note [lifeline] there), with its output, its lifeline and its role.

Over ssh the remote login shell knows nothing of this machine's virtualenv: a command
given by name (`caffe`) is resolved here to its absolute path, and the hosts run it with
this interpreter's bin directory first on PATH (what mpirun's `-x PATH` and horovodrun do
by forwarding the environment). Every host must therefore have the project at the same
path as this machine — a shared file system, or the same image — as the coordinator and
shards, started by this interpreter's absolute path, always needed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO

from poseidon.supervise import DEFAULT_GRACE_S


@dataclass
class Child:
    label: str  # "worker 1", "server 0", "coordinator"
    process: subprocess.Popen
    is_worker: bool
    log_file: IO[str] | None = None
    pump: threading.Thread | None = None
    exited_at: float | None = None  # monotonic time the process ended
    stopped: bool = False  # ended by the launcher
    lifeline: IO[bytes] | None = None  # the supervisor's stdin; closing it ends the process
    host: str | None = None  # None: this machine

    def tell(self, line: str) -> None:
        """A control line to the supervisor (`signal TERM`); best effort: a supervisor that
        has exited reads nothing."""
        if self.lifeline is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.lifeline.write(f"{line}\n".encode())
            self.lifeline.flush()

    def close_lifeline(self) -> None:
        if self.lifeline is not None:
            with contextlib.suppress(OSError, ValueError):
                self.lifeline.close()

    def kill(self) -> None:
        """SIGKILL to the supervisor here (its child dies with it) or to the ssh client
        (the remote supervisor reads EOF and kills what runs there)."""
        self.tell("signal CONT")  # a stopped process cannot act on anything but SIGKILL
        self.tell("signal KILL")
        self.close_lifeline()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def supervised(argv: list[str], role: str, grace_s: float = DEFAULT_GRACE_S) -> list[str]:
    return [sys.executable, "-m", "poseidon.supervise", "--role", role, "--grace",
            f"{grace_s:g}", "--", *argv]  # fmt: skip


def resolve_command(argv: list[str]) -> tuple[list[str], str | None]:
    """For remote hosts: a bare command name becomes this machine's absolute path (and a
    note saying so); paths and unknown names stay as they are."""
    if not argv or os.sep in argv[0]:
        return argv, None
    found = shutil.which(argv[0])
    if found is None:
        return argv, None
    found = os.path.abspath(found)
    note = f"{argv[0]} is {found} here; every host runs that path"
    return [found, *argv[1:]], note


def remote_command(argv: list[str], env: dict[str, str], cwd: str) -> str:
    """The shell line ssh runs on a host: the token from the first line of stdin (never on
    a command line that `ps` shows), this machine's working directory and interpreter's
    bin directory, then the supervised command reading the rest of stdin as its lifeline."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    bin_dir = shlex.quote(os.path.dirname(sys.executable))
    return (f"read -r POSEIDON_TOKEN && export POSEIDON_TOKEN && cd {shlex.quote(cwd)} && "
            f'exec env {exports} PATH={bin_dir}:"$PATH" {shlex.join(argv)}')  # fmt: skip


def spawn(label: str, argv: list[str], env: dict[str, str], token: str, host: str | None,
          ssh: list[str], is_worker: bool) -> Child:  # fmt: skip
    """Start `argv` under a supervisor, here (host None) or on `host` over `ssh`."""
    role = "worker" if is_worker else label.split()[0]
    command = supervised(argv, role)
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    if host is None:
        full_env = {**os.environ, **env, "POSEIDON_TOKEN": token}
        process = subprocess.Popen(command, env=full_env, start_new_session=True, **pipes)
        lifeline = process.stdin
    else:
        remote = remote_command(command, env, os.getcwd())
        process = subprocess.Popen([*ssh, host, remote], start_new_session=True, **pipes)
        lifeline = process.stdin
        with contextlib.suppress(OSError):
            lifeline.write(f"{token}\n".encode())
            lifeline.flush()
    return Child(label, process, is_worker, lifeline=lifeline, host=host)
