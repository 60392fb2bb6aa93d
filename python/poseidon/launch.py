"""Start a whole Poseidon job with one command: coordinator, P2 server shards and P1
workers, locally or over ssh from a host file, with a fresh cluster token.

    poseidon launch -n 4 [-s 4] [--sync poseidon] -- caffe train --solver S

Every child gets its role and rank through POSEIDON_* variables (poseidon.config
parses them); output is prefixed by role and rank; the launcher's exit status is the
job's: 0 when every worker succeeded, else the status of the node whose failure aborted
the job, and the last line gives the coordinator's verdict. Ctrl-C, SIGTERM or SIGHUP asks
every worker to stop at one agreed iteration, with a final snapshot; a second one kills.

Every process runs under `poseidon.supervise` on a lifeline (a pipe from this launcher, or
ssh's stdin on a host): when the launcher dies, even by SIGKILL, its job ends within
seconds on every host instead of training on unattended (supervise.py, Note [lifeline]).

With `--sync allreduce` (the DDP-style baseline, caffe/parallel/allreduce.py) only the
workers start, given torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR (the first
host: worker 0's, or 127.0.0.1) and MASTER_PORT (--port, default 29500) besides.

Note [process groups]. Children run in their own sessions, so the terminal's Ctrl-C
reaches only the launcher, which then hands it to the workers through their lifelines;
they agree on where to stop (caffe/parallel/syncer.py, Note [agreed actions]). A signal that
reached one worker alone works the same way: it asks the coordinator for the stop.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from poseidon.config import Config
from poseidon.failures import process_note
from poseidon.job_process import Child, resolve_command, spawn

STARTUP_TIMEOUT_S = 60.0
DEFAULT_MASTER_PORT = 29500  # sync=allreduce without --port: torchrun's default
GRACE_S = 15.0  # after a failure, how long the rest may take to notice and exit
# After the coordinator's abort verdict, how long the rest may take to exit: every node
# got ABORT and exits at once, so what is still running then is frozen (SIGSTOP, a hung
# host) and is killed.
ABORT_GRACE_S = 1.0
STOP_TIMEOUT_S = 120.0  # a graceful stop (agreed iteration + final snapshot) at most
TERM_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this
ABORT_ORIGIN = re.compile(r"aborting the job: (worker|server) (\d+) ")


JOB_WIDE_SETTINGS = (
    "POSEIDON_COMPRESSION",
    "POSEIDON_POWERSGD_RANK",
    "POSEIDON_LINK_RATE",
    "POSEIDON_LOCAL_RATE",
    "POSEIDON_GEMM_RATE",
    "POSEIDON_MEMORY_RATE",
    "POSEIDON_LAYER_SCHEMES",
)


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
    colocate: bool = True  # shard r runs inside worker r·G's process (r < min(P1/G, P2))
    workers_per_host: int = 1  # G (POSEIDON_WORKERS_PER_HOST): local aggregation when > 1
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


class Launcher:
    def __init__(self, spec: JobSpec, out=None) -> None:
        self.spec = spec
        self.out = out or sys.stdout
        self.token = secrets.token_hex(16)
        self.children: list[Child] = []
        self._out_lock = threading.Lock()
        self._abort_origin: str | None = None  # "worker 1": whose failure aborted the job
        self._verdict: str | None = None  # the coordinator's reason for aborting
        self._verdict_at: float | None = None
        self._stop_asked_at: float | None = None  # a graceful stop was asked of the workers
        self._kill_now = False  # a second signal: no more waiting
        self._stopping = False  # the launcher is ending the processes itself
        self._command, note = self.spec.command, None
        if self.spec.hosts:
            self._command, note = resolve_command(self.spec.command)
        if note:
            self._say(note)

    # ----- placement ------------------------------------------------------------------------
    def _worker_hosts(self) -> list[str | None]:
        if not self.spec.hosts:
            return [None] * self.spec.num_workers
        slots = [h.name for h in self.spec.hosts for _ in range(h.slots)]
        if self.spec.num_workers > len(slots):
            raise ValueError(f"{self.spec.num_workers} workers but the host file has "
                             f"{len(slots)} slots")  # fmt: skip
        return slots[: self.spec.num_workers]

    def _colocated_shards(self) -> int:
        """Shards that run inside a worker's process: one per machine, in its leader."""
        return Config(num_workers=self.spec.num_workers, num_servers=self.spec.num_servers,
                      workers_per_host=self.spec.workers_per_host,
                      colocate=self.spec.colocate).colocated_shards  # fmt: skip

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
            "POSEIDON_WORKERS_PER_HOST": str(self.spec.workers_per_host),
        }
        if self.spec.timeline:
            env["POSEIDON_TIMELINE"] = os.path.abspath(self.spec.timeline)
        if self.spec.chunk_bytes:
            env["POSEIDON_CHUNK_BYTES"] = self.spec.chunk_bytes
        if self.spec.timeout_ms is not None:
            env["POSEIDON_TIMEOUT_MS"] = str(self.spec.timeout_ms)
        # Settings every process of the job must share, from the launcher's environment:
        # an ssh host gets only what is passed (the coordinator plans with them, and a
        # worker whose own differ stops with an error naming both).
        env.update({name: os.environ[name] for name in JOB_WIDE_SETTINGS if name in os.environ})
        env.update(self.spec.extra_env)
        return env

    def _spawn(self, label: str, argv: list[str], env: dict[str, str], host: str | None,
               is_worker: bool) -> Child:  # fmt: skip
        child = spawn(label, argv, env, self.token, host, self.spec.ssh, is_worker)
        if self.spec.log_dir:
            os.makedirs(self.spec.log_dir, exist_ok=True)
            name = label.replace(" ", "_") + ".log"
            child.log_file = open(os.path.join(self.spec.log_dir, name), "w")  # noqa: SIM115
        self.children.append(child)
        return child

    def _pump(self, child: Child, first_line: list[str] | None = None) -> None:
        """Copy a child's output to ours, prefixed; optionally hand over its first line."""
        prefix = f"[{child.label}] "
        for raw in iter(child.process.stdout.readline, b""):
            line = raw.decode(errors="replace")
            if first_line is not None and not first_line:
                first_line.append(line)
            if child.label == "coordinator":
                self._note_verdict(line)
            if child.log_file is not None:
                child.log_file.write(line)
                child.log_file.flush()
            with self._out_lock:
                self.out.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
                self.out.flush()
        child.process.wait()  # output ends when the process does
        child.exited_at = time.monotonic()

    def _note_verdict(self, line: str) -> None:
        """The coordinator's `aborting the job: REASON` is the job's root cause; the node it
        names first failed (the others fail after it)."""
        marker = "aborting the job: "
        if marker not in line or self._verdict is not None or self._stopping:
            return  # once the launcher stops nodes, their aborts are its own doing
        self._verdict = line.split(marker, 1)[1].strip()
        self._verdict_at = time.monotonic()
        origin = ABORT_ORIGIN.search(line)
        if origin:
            role, rank = origin.group(1), int(origin.group(2))
            self._abort_origin = f"{role} {rank}"
            colocated, g = self._colocated_shards(), self.spec.workers_per_host
            self._verdict += process_note(role, rank, colocated, g)
            if role == "server" and rank < colocated:
                # Its process is a worker's: that is the process that died or froze.
                self._abort_origin = f"worker {rank * g}"

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
        hosts = self._worker_hosts()
        for rank, host in enumerate(hosts):
            local = local_ranks.get(host, 0)
            local_ranks[host] = local + 1
            # The workers of one host share its cores (caffe/data/threads.py sizes by it).
            worker_env = {**env, "POSEIDON_ROLE": "worker", "POSEIDON_RANK": str(rank),
                          "POSEIDON_LOCAL_RANK": str(local),
                          "POSEIDON_LOCAL_WORKERS": str(hosts.count(host))}  # fmt: skip
            if allreduce:
                worker_env.update(RANK=str(rank), WORLD_SIZE=str(self.spec.num_workers),
                                  LOCAL_RANK=str(local))  # fmt: skip
            worker = self._spawn(f"worker {rank}", list(self._command), worker_env, host, True)
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
            if rank < self._colocated_shards():
                continue  # runs inside worker rank·G, machine `rank`'s leader
            server = self._spawn(f"server {rank}", self._poseidon("server"),
                                 {**env, "POSEIDON_ROLE": "server", "POSEIDON_RANK": str(rank)},
                                 host, False)  # fmt: skip
            self._start_pump(server)

    def _await_address(self, coordinator: Child, first: list[str]) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        marker = "listening on "
        while time.monotonic() < deadline:
            if self._kill_now or self._stop_asked_at is not None:
                raise RuntimeError("interrupted while the coordinator was starting")
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

    # ----- stopping on request ------------------------------------------------------------
    def on_signal(self, signum: int) -> None:
        """The launcher got SIGINT, SIGTERM or SIGHUP. The first asks every worker to stop
        (SIGINT stays SIGINT, the others become SIGTERM): `caffe train` workers then agree
        on an iteration, and rank 0 writes the final snapshot there (--sigint_effect). A
        second one, or a stop that takes longer than STOP_TIMEOUT_S, kills the job."""
        name = signal.Signals(signum).name
        if self._stop_asked_at is not None:
            self._say(f"received {name} again; killing every process")
            self._kill_now = True
            return
        self._stop_asked_at = time.monotonic()
        forward = "INT" if signum == signal.SIGINT else "TERM"
        self._say(
            f"received {name}; asking every worker to stop (SIG{forward}): they agree on an "
            "iteration and the final snapshot is written; again to kill at once"
        )
        for child in self.children:
            if child.is_worker:
                child.tell(f"signal {forward}")

    # ----- running -------------------------------------------------------------------------
    def wait(self) -> int:
        """Block until the job ends; returns its exit status.

        The status is that of the node whose failure aborted the job (the coordinator names
        it), else of the worker that failed first (a dead worker makes the shards and the
        other workers fail after it: it is the cause), else the first failing shard's or
        coordinator's, else 0. Once the coordinator aborted the job, whatever still runs
        after ABORT_GRACE_S (a frozen process) is killed.
        """
        failed_at: float | None = None
        workers = [c for c in self.children if c.is_worker]
        killed = False
        while True:
            now = time.monotonic()
            failed = self._failures()
            if failed and failed_at is None:
                failed_at = now
                self._say(f"{failed[0].label} exited with status {failed[0].process.returncode}"
                          "; stopping the job")  # fmt: skip
            if all(c.process.poll() is not None for c in workers):
                break
            if self._kill_now:
                killed = True
                break
            if self._verdict_at is not None and now - self._verdict_at > ABORT_GRACE_S:
                killed = True  # the job is over; a process still here cannot act on it
                break
            if failed_at is not None and now - failed_at > GRACE_S:
                self._say(f"processes still running {GRACE_S:.0f}s after the failure; killing")
                killed = True
                break
            if self._stop_asked_at is not None and now - self._stop_asked_at > STOP_TIMEOUT_S:
                self._say(f"the job did not stop within {STOP_TIMEOUT_S:.0f}s; killing")
                killed = True
                break
            time.sleep(0.05)
        if killed:
            self.kill()
        else:
            self._finish_infrastructure(failed_at is not None or self._verdict is not None)
        return self._outcome()

    def _outcome(self) -> int:
        """The last line (the root cause) and the status."""
        failed = self._failures()
        causes = [c for c in failed if c.label == self._abort_origin]
        causes = causes or [c for c in failed if c.is_worker] or failed
        cause = causes[0] if causes else None
        if self._verdict is not None:
            status = f" ({cause.label} exited with status {cause.process.returncode})" if (
                cause is not None and cause.label == self._abort_origin) else ""  # fmt: skip
            self._say(f"job failed: {self._verdict}{status}")
            return _exit_status(cause.process.returncode) if cause is not None else 1
        if cause is None:
            return 0
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

    def stop(self) -> None:
        """Terminate every child still running: SIGTERM through its lifeline, SIGKILL after
        TERM_GRACE_S; then close every lifeline (Note [lifeline] in supervise.py)."""
        self._stopping = True
        running = [c for c in self.children if c.process.poll() is None]
        for child in running:
            child.stopped = True
            child.tell("signal CONT")
            child.tell("signal TERM")
        deadline = time.monotonic() + TERM_GRACE_S
        for child in running:
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
        self._close()

    def kill(self) -> None:
        """SIGKILL every child still running, now."""
        self._stopping = True
        for child in self.children:
            if child.process.poll() is None:
                child.stopped = True
                child.kill()
        self._close()

    def _close(self) -> None:
        for child in self.children:
            child.close_lifeline()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(TERM_GRACE_S)
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


def run_job(spec: JobSpec, out=None) -> int:
    """Start the job and wait for it; SIGINT, SIGTERM and SIGHUP stop it (Launcher.on_signal)
    and the status is then 128 + the first signal's number."""
    launcher = Launcher(spec, out)
    interrupted: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        interrupted.append(signum)
        launcher.on_signal(signum)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in handled}
    try:
        try:
            launcher.start()
        except (RuntimeError, ValueError, OSError) as e:
            launcher._say(f"cannot start the job: {e}")
            launcher.kill()
            return 128 + interrupted[0] if interrupted else 1
        if interrupted:  # before the workers existed: tell them now
            for child in launcher.children:
                if child.is_worker:
                    child.tell("signal INT" if interrupted[0] == signal.SIGINT else "signal TERM")
        code = launcher.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if interrupted:
        if code == 0:
            name = signal.Signals(interrupted[0]).name
            launcher._say(f"job stopped on {name}; every process ended cleanly")
        return 128 + interrupted[0]
    return code
