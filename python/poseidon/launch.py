"""Start a whole Poseidon job with one command: coordinator, P2 server shards and P1
workers, locally or over ssh from a host file, with a fresh cluster token.

    poseidon launch -n 4 [-s 4] [--sync poseidon] -- caffe train --solver S

Every child gets its role and rank through POSEIDON_* variables (poseidon.config
parses them); output is prefixed by role and rank; the launcher's exit status is the
job's: 0 when every worker succeeded, else the first failing worker's status. Ctrl-C
(or SIGTERM) stops every process of the job.

With `--sync allreduce` (the DDP-style baseline, caffe/allreduce_sync.py) only the
workers start, given torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR (the first
host: worker 0's, or 127.0.0.1) and MASTER_PORT (--port, default 29500) besides.

Note [process groups]. Children run in their own sessions, so the terminal's Ctrl-C
reaches only the launcher, which then stops the job as a whole (SIGTERM, then SIGKILL
after a grace period). Letting each worker see SIGINT on its own would stop them at
different iterations and leave the survivors waiting on the dead.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

STARTUP_TIMEOUT_S = 60.0
DEFAULT_MASTER_PORT = 29500  # sync=allreduce without --port: torchrun's default
GRACE_S = 15.0  # after a failure, how long the rest may take to notice and exit
ABORT_ORIGIN = re.compile(r"aborting the job: (worker|server) (\d+) ")


@dataclass
class Host:
    name: str
    slots: int = 1


@dataclass
class JobSpec:
    command: list[str]
    num_workers: int
    num_servers: int
    sync: str = "poseidon"
    scheme: str = "auto"
    timeline: str = ""
    log_dir: str = ""
    chunk_bytes: str = ""
    timeout_ms: int | None = None
    coordinator_port: int = 0
    hosts: list[Host] = field(default_factory=list)  # empty: everything on this machine
    colocate: bool = True  # shard r runs inside worker r's process (r < min(P1, P2))
    ssh: list[str] = field(default_factory=lambda: ["ssh", "-o", "BatchMode=yes"])
    extra_env: dict[str, str] = field(default_factory=dict)


def parse_hostfile(path: str) -> list[Host]:
    """Lines `host [slots=N]`; '#' starts a comment. Errors name the file and line."""
    hosts = []
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            slots = 1
            for extra in parts[1:]:
                key, _, value = extra.partition("=")
                if key != "slots" or not value.isdigit() or int(value) < 1:
                    raise ValueError(f"{path}:{number}: expected 'host [slots=N]', got {line!r}")
                slots = int(value)
            hosts.append(Host(parts[0], slots))
    if not hosts:
        raise ValueError(f"{path}: no hosts")
    return hosts


@dataclass
class Child:
    label: str
    process: subprocess.Popen
    is_worker: bool
    log_file: object | None = None
    pump: threading.Thread | None = None
    exited_at: float | None = None  # monotonic time the process ended
    stopped: bool = False  # terminated by the launcher


class Launcher:
    def __init__(self, spec: JobSpec, out=None) -> None:
        self.spec = spec
        self.out = out or sys.stdout
        self.token = secrets.token_hex(16)
        self.children: list[Child] = []
        self._out_lock = threading.Lock()
        self._stopping = False
        self._abort_origin: str | None = None

    # ----- placement ------------------------------------------------------------------------
    def _worker_hosts(self) -> list[str | None]:
        if not self.spec.hosts:
            return [None] * self.spec.num_workers
        slots = [h.name for h in self.spec.hosts for _ in range(h.slots)]
        if self.spec.num_workers > len(slots):
            raise ValueError(f"{self.spec.num_workers} workers but the host file has "
                             f"{len(slots)} slots")  # fmt: skip
        return slots[: self.spec.num_workers]

    def _server_hosts(self) -> list[str | None]:
        if not self.spec.hosts:
            return [None] * self.spec.num_servers
        names = [h.name for h in self.spec.hosts]
        return [names[s % len(names)] for s in range(self.spec.num_servers)]

    # ----- starting children -----------------------------------------------------------------
    def _base_env(self) -> dict[str, str]:
        env = {
            "POSEIDON_NUM_WORKERS": str(self.spec.num_workers),
            "POSEIDON_NUM_SERVERS": str(self.spec.num_servers),
            "POSEIDON_SYNC": self.spec.sync,
            "POSEIDON_SCHEME": self.spec.scheme,
            "POSEIDON_COLOCATE": "1" if self.spec.colocate else "0",
        }
        if self.spec.timeline:
            env["POSEIDON_TIMELINE"] = os.path.abspath(self.spec.timeline)
        if self.spec.chunk_bytes:
            env["POSEIDON_CHUNK_BYTES"] = self.spec.chunk_bytes
        if self.spec.timeout_ms is not None:
            env["POSEIDON_TIMEOUT_MS"] = str(self.spec.timeout_ms)
        env.update(self.spec.extra_env)
        return env

    def _spawn(self, label: str, argv: list[str], env: dict[str, str], host: str | None,
               is_worker: bool) -> Child:  # fmt: skip
        if host is None:
            full_env = {**os.environ, **env, "POSEIDON_TOKEN": self.token}
            process = subprocess.Popen(
                argv, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        else:
            # The token travels on stdin, never on a command line that `ps` would show.
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            remote = (f"read -r POSEIDON_TOKEN && export POSEIDON_TOKEN && "
                      f"cd {shlex.quote(os.getcwd())} && exec env {exports} "
                      f"{shlex.join(argv)}")  # fmt: skip
            process = subprocess.Popen(
                [*self.spec.ssh, host, remote], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            process.stdin.write(f"{self.token}\n".encode())
            process.stdin.close()
        log_file = None
        if self.spec.log_dir:
            os.makedirs(self.spec.log_dir, exist_ok=True)
            name = label.replace(" ", "_") + ".log"
            log_file = open(os.path.join(self.spec.log_dir, name), "w")  # noqa: SIM115
        child = Child(label, process, is_worker, log_file)
        self.children.append(child)
        return child

    def _pump(self, child: Child, first_line: list[str] | None = None) -> None:
        """Copy a child's output to ours, prefixed; optionally hand over its first line."""
        prefix = f"[{child.label}] "
        for raw in iter(child.process.stdout.readline, b""):
            line = raw.decode(errors="replace")
            if first_line is not None and not first_line:
                first_line.append(line)
            origin = ABORT_ORIGIN.search(line)
            if origin and self._abort_origin is None:
                # The coordinator names the node whose death or failure aborted the job;
                # the others fail after it, so its status is the job's.
                self._abort_origin = f"{origin.group(1)} {origin.group(2)}"
            if child.log_file is not None:
                child.log_file.write(line)
                child.log_file.flush()
            with self._out_lock:
                self.out.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
                self.out.flush()
        child.process.wait()  # output ends when the process does
        child.exited_at = time.monotonic()

    def _start_pump(self, child: Child, first_line: list[str] | None = None) -> None:
        child.pump = threading.Thread(target=self._pump, args=(child, first_line), daemon=True)
        child.pump.start()

    def _poseidon(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "poseidon.cli", *args]

    def start(self) -> None:
        env = self._base_env()
        allreduce = self.spec.sync == "allreduce"
        if allreduce:
            env.update(self._rendezvous_env())
        else:
            self._start_infrastructure(env)
        local_ranks: dict[str | None, int] = {}
        for rank, host in enumerate(self._worker_hosts()):
            local = local_ranks.get(host, 0)
            local_ranks[host] = local + 1
            worker_env = {**env, "POSEIDON_ROLE": "worker", "POSEIDON_RANK": str(rank),
                          "POSEIDON_LOCAL_RANK": str(local)}  # fmt: skip
            if allreduce:
                worker_env.update(RANK=str(rank), WORLD_SIZE=str(self.spec.num_workers),
                                  LOCAL_RANK=str(local))  # fmt: skip
            worker = self._spawn(f"worker {rank}", list(self.spec.command), worker_env, host, True)
            self._start_pump(worker)
            where = f" on {host}" if host else ""
            self._say(f"started worker {rank}{where} (pid {worker.process.pid})")

    def _rendezvous_env(self) -> dict[str, str]:
        """sync=allreduce: torch.distributed meets at worker 0's TCP store (torchrun's
        variables); there is no coordinator and no shard."""
        port = self.spec.coordinator_port or DEFAULT_MASTER_PORT
        master = self.spec.hosts[0].name if self.spec.hosts else "127.0.0.1"
        return {"MASTER_ADDR": master, "MASTER_PORT": str(port)}

    def _start_infrastructure(self, env: dict[str, str]) -> None:
        """The coordinator, then the shards that do not run inside a worker; sets
        POSEIDON_COORDINATOR in `env`."""
        coordinator_host = self.spec.hosts[0].name if self.spec.hosts else None
        bind = coordinator_host or "127.0.0.1"
        first: list[str] = []
        coordinator = self._spawn(
            "coordinator",
            self._poseidon("coordinator", "--address", f"{bind}:{self.spec.coordinator_port}"),
            {**env, "POSEIDON_ROLE": "coordinator"}, coordinator_host, False,
        )  # fmt: skip
        self._start_pump(coordinator, first)
        address = self._await_address(coordinator, first)
        env["POSEIDON_COORDINATOR"] = address
        for rank, host in enumerate(self._server_hosts()):
            if self.spec.colocate and rank < self.spec.num_workers:
                continue  # runs inside worker `rank`
            server = self._spawn(f"server {rank}", self._poseidon("server"),
                                 {**env, "POSEIDON_ROLE": "server", "POSEIDON_RANK": str(rank)},
                                 host, False)  # fmt: skip
            self._start_pump(server)

    def _await_address(self, coordinator: Child, first: list[str]) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        marker = "listening on "
        while time.monotonic() < deadline:
            if first:
                line = first[0].strip()
                if marker in line:
                    return line.split(marker, 1)[1].split()[0]
                raise RuntimeError(f"coordinator said {line!r} instead of its address")
            if coordinator.process.poll() is not None:
                coordinator.pump.join(1.0)
                raise RuntimeError(
                    f"coordinator exited with status {coordinator.process.returncode} at start"
                )
            time.sleep(0.02)
        raise RuntimeError(f"coordinator did not report its address within {STARTUP_TIMEOUT_S}s")

    # ----- running -------------------------------------------------------------------------
    def wait(self) -> int:
        """Block until the job ends; returns its exit status.

        The status is that of the worker that failed first (a dead worker makes the
        shards and the other workers fail after it: it is the cause), else the first
        failing shard's or coordinator's, else 0.
        """
        failed_at: float | None = None
        workers = [c for c in self.children if c.is_worker]
        while True:
            failed = self._failures()
            if failed and failed_at is None:
                failed_at = time.monotonic()
                self._say(f"{failed[0].label} exited with status {failed[0].process.returncode}"
                          "; stopping the job")  # fmt: skip
            if all(c.process.poll() is not None for c in workers):
                break
            if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
                self._say(f"processes still running {GRACE_S:.0f}s after the failure; killing")
                break
            time.sleep(0.05)
        self._finish_infrastructure(failed_at is not None)
        failed = self._failures()
        causes = [c for c in failed if c.label == self._abort_origin]
        causes = causes or [c for c in failed if c.is_worker] or failed
        if not causes:
            return 0
        cause = causes[0]
        self._say(f"job failed: {cause.label} exited with status {cause.process.returncode}")
        return _exit_status(cause.process.returncode)

    def _failures(self) -> list[Child]:
        """Children that exited non-zero by themselves, earliest first (as seen by their
        output pumps); those the launcher stopped do not count."""
        done = [c for c in self.children if c.process.poll() not in (None, 0) and not c.stopped]
        return sorted(done, key=lambda c: c.exited_at if c.exited_at is not None else 1e300)

    def _finish_infrastructure(self, failed: bool) -> None:
        """Servers and coordinator end by themselves after the workers; wait, then stop."""
        deadline = time.monotonic() + (2.0 if failed else GRACE_S)
        for child in self.children:
            remaining = max(0.0, deadline - time.monotonic())
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(remaining)
        self.stop()

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Terminate every child still running (its whole process group)."""
        self._stopping = True
        for child in self.children:
            if child.process.poll() is None:
                child.stopped = True
                _signal_group(child.process, signum)
        deadline = time.monotonic() + 5.0
        for child in self.children:
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child.process, signal.SIGKILL)
                child.process.wait()
        for child in self.children:
            if child.pump is not None:
                child.pump.join(2.0)
            if child.log_file is not None:
                child.log_file.close()

    def _say(self, message: str) -> None:
        with self._out_lock:
            self.out.write(f"[launch] {message}\n")
            self.out.flush()


def _exit_status(code: int) -> int:
    """A shell-style status: a child killed by signal N reports 128 + N."""
    return 128 - code if code < 0 else (code or 1)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def run_job(spec: JobSpec, out=None) -> int:
    """Start the job, wait for it, and stop it on Ctrl-C/SIGTERM (status 130/143)."""
    launcher = Launcher(spec, out)
    interrupted: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        interrupted.append(signum)
        launcher._say(f"received {signal.Signals(signum).name}; stopping every process")
        launcher.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            launcher.start()
        except (RuntimeError, ValueError, OSError) as e:
            launcher._say(f"cannot start the job: {e}")
            launcher.stop()
            return 1
        code = launcher.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if interrupted:
        return 128 + interrupted[0]
    return code
