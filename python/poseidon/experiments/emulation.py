"""Several emulated hosts on one machine: Linux network namespaces on a bridge, each host's
link capped with tc (needs root and iproute2).

Host i is namespace `<prefix>h<i>` with address <subnet>.<i+1>/24 on veth `<prefix>v<i>`,
whose other end `<prefix>b<i>` is a port of the bridge `<prefix>br0`. With a rate, a token
bucket caps both directions of every host's link (the host's egress inside its namespace,
and the bridge port's egress towards it), like a host behind a full-duplex NIC of that
speed. `ssh_wrapper()` writes a stand-in for `ssh HOST COMMAND` that runs COMMAND inside
HOST's namespace, so the launcher's host-file mode starts processes on the emulated hosts.

Note [idle restart]. Each namespace turns off net.ipv4.tcp_slow_start_after_idle: a layer's
gradient leaves in a burst after a quiet backward pass, and a connection that forgets its
window after every pause would measure TCP's slow start, not the link. Clusters that train
over TCP commonly set the same.

Note [token bucket]. The bucket holds at least 64 KiB and 4 ms at the rate (the kernel
refills in timer ticks); the queue holds `queue_ms` at the rate. tc counts every packet's
IP and TCP headers and its 14-byte Ethernet header, and a link loaded both ways also
carries the other direction's ACKs (one 66-byte ACK per two segments): TCP's goodput
through it is 1448 / (1514 + 33) of the rate (TCP_GOODPUT_TBF; measured with iperf3 here,
all hosts sending to all: 0.932; one flow alone, its ACKs on the idle reverse: 0.956).

Note [packets, not GSO bursts]. With generic segmentation offload on (the kernel's way, and
the default here), a connection writes super-packets of up to 64 KiB that the token bucket
passes, and a full queue drops, whole: at a dilated, byte-scaled link's wall-clock rate one
such burst is tens of milliseconds, and one drop loses some forty segments at once (a real
NIC sends its 64 KiB in tens of microseconds and a switch drops single packets).
`gso=False` (`poseidon experiment --gso off`) gives each veth gso_max_segs 1, so TCP hands
it packets of one segment, as a switch sees them. Measured with the same cells both ways
(docs/experiments.md §6.5, "Packets, not GSO bursts"): VGG19-22K's Poseidon on 8 nodes at
2 GbE read 1.166 s with GSO and 0.987 s without (0.956 s predicted). It stays on by
default until the stored sweeps have been run again without it.

Note [link losses]. A queue that is full drops the packet that arrives; TCP sends it again
after three duplicate ACKs or a timeout, and until then the receiver cannot read past the
hole. The predictor has no model of that (docs/experiments.md §6.5): it shares the links
as fluids. So each emulated cell records what its links lost over the whole job, warm-up
included: the packets its hosts' queues dropped, those leaving a host apart from those
entering one, and the segments TCP retransmitted (read from every namespace's
/proc/net/snmp before and after the job). The two kinds of drop differ: a switch port
that several senders feed at once (the PS's incast) drops where a real one would too
(though with GSO on it drops whole super-packets: Note [packets, not GSO bursts]), while a
real host seldom drops its own packets (docs/experiments.md §2, "Queues").
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass

# TCP payload per packet (MSS with timestamps) over the bytes tc counts for it and for its
# share of the reverse direction's delayed ACKs (Note [token bucket]).
TCP_GOODPUT_TBF = 1448 / (1514 + 66 / 2)
# Each link's queue, in milliseconds at its (emulated, dilated) rate: Note [token bucket].
DEFAULT_QUEUE_MS = 50.0


class EmulationError(RuntimeError):
    """The emulated hosts cannot be set up here; the message says what is missing."""


def check_can_emulate() -> None:
    """Raise EmulationError naming what is missing (root, iproute2)."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise EmulationError(
            f"emulation needs iproute2 ({', '.join(missing)} not found; "
            "e.g. apt-get install iproute2)"
        )
    if os.geteuid() != 0:
        raise EmulationError(
            "emulation needs root: it creates network namespaces and caps "
            "their links with tc (run as root, e.g. with sudo)"
        )


def _run(*args: str) -> None:
    _output(*args)


def _output(*args: str) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True)
    if done.returncode != 0:
        raise EmulationError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _quiet(*args: str) -> None:
    subprocess.run(list(args), capture_output=True)


def _loss_based_congestion_control(namespace: str) -> str:
    """Note [congestion control]: CUBIC, Linux's default, else Reno (CUBIC may not be in
    this kernel's allowed list for new namespaces). A host may default to BBR, whose paced
    flows overshoot a shared token bucket when many connections take turns on it (as the
    frames of a PS round do): ps-nooverlap on 8 VGG19-22K nodes ran 8% slower with BBR
    than the predictor's link, 1-3% with CUBIC or Reno."""
    for name in ("cubic", "reno"):
        done = subprocess.run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w",
                               f"net.ipv4.tcp_congestion_control={name}"],
                              capture_output=True)  # fmt: skip
        if done.returncode == 0:
            return name
    raise EmulationError(f"cannot set a loss-based TCP congestion control in {namespace}")


def hold_prefix_lock(prefix: str, directory: str | None = None) -> int:
    """Take the lock of the emulated hosts named `prefix`: a second emulation on this machine
    would tear down the first's namespaces as leftovers. Returns the lock file's fd (closing
    it releases the lock); EmulationError naming the holder when another process has it."""
    import fcntl

    directory = directory or ("/run/lock" if os.path.isdir("/run/lock") else tempfile.gettempdir())
    path = os.path.join(directory, f"poseidon-emulation-{prefix}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise EmulationError(
            f"another emulation (pid {holder}) is using the emulated hosts {prefix}h* "
            f"({path}); wait for it to finish or stop it"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


@dataclass(frozen=True)
class LinkLosses:
    """Packets the emulated links' queues dropped, on the way out of a host (its own egress)
    and on the way in (the bridge port towards it), and segments TCP sent again, each summed
    over the hosts (Note [link losses])."""

    dropped_out: int
    dropped_in: int
    retransmitted: int

    def __sub__(self, earlier: LinkLosses) -> LinkLosses:
        return LinkLosses(self.dropped_out - earlier.dropped_out,
                          self.dropped_in - earlier.dropped_in,
                          self.retransmitted - earlier.retransmitted)  # fmt: skip


def qdisc_drops(tc_stats: str) -> int:
    """The packets dropped by the qdiscs of `tc -s qdisc show dev X` output."""
    found = re.findall(r"\(dropped (\d+),", tc_stats)
    return sum(int(n) for n in found)


def tcp_retransmits(snmp: str) -> int:
    """TCP's RetransSegs from the text of /proc/net/snmp (a header line, then values)."""
    rows = [line.split() for line in snmp.splitlines() if line.startswith("Tcp:")]
    if len(rows) < 2 or "RetransSegs" not in rows[0]:
        raise EmulationError(f"no Tcp RetransSegs in /proc/net/snmp: {snmp[:200]!r}")
    return int(rows[1][rows[0].index("RetransSegs")])


class EmulatedHosts:
    """`count` hosts with links of `rate_bps` bits/s each way (None: uncapped)."""

    def __init__(
        self,
        count: int,
        rate_bps: float | None,
        prefix: str = "pos",
        subnet: str = "10.77.0",
        queue_ms: float = DEFAULT_QUEUE_MS,
        gso: bool = True,
    ) -> None:
        if not 1 <= count <= 250:
            raise ValueError(f"{count} emulated hosts (want 1..250)")
        self.count = count
        self.rate_bps = rate_bps
        self.prefix = prefix
        self.queue_ms = queue_ms
        self.gso = gso  # Note [packets, not GSO bursts]
        self.addresses = [f"{subnet}.{i + 1}" for i in range(count)]
        self.namespaces = [f"{prefix}h{i}" for i in range(count)]
        self.bridge = f"{prefix}br0"
        self.congestion = ""
        self._files: list[str] = []
        self._lock: int | None = None  # the fd of the prefix's lock file while we hold it

    # ----- life cycle ---------------------------------------------------------------------
    def __enter__(self) -> EmulatedHosts:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def start(self) -> None:
        check_can_emulate()
        self._lock = hold_prefix_lock(self.prefix)
        try:
            self.teardown()  # leftovers of an interrupted run (none is running: we hold the lock)
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "link", "set", self.bridge, "up")
            for i in range(self.count):
                self._add_host(i)
            if self.rate_bps:
                self.set_rate(self.rate_bps)
        except BaseException:
            self.release()
            raise

    def _add_host(self, i: int) -> None:
        ns, inner, outer = self.namespaces[i], self.inner(i), f"{self.prefix}b{i}"
        _run("ip", "netns", "add", ns)
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        if not self.gso:  # Note [packets, not GSO bursts]
            for end in (inner, outer):
                _run("ip", "link", "set", end, "gso_max_segs", "1")
        _run("ip", "link", "set", inner, "netns", ns)
        _run("ip", "link", "set", outer, "master", self.bridge)
        _run("ip", "link", "set", outer, "up")
        _run(
            "ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.addresses[i]}/24", "dev", inner
        )
        _run("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
        _run(
            "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_slow_start_after_idle=0"
        )
        self.congestion = _loss_based_congestion_control(ns)

    def set_rate(self, rate_bps: float) -> None:
        """Cap (or re-cap) every link at `rate_bps` bits/s in each direction."""
        self.rate_bps = rate_bps
        rate_bytes = rate_bps / 8
        burst = max(64 << 10, int(rate_bytes * 0.004))
        queue = max(burst, int(rate_bytes * self.queue_ms / 1000))
        tbf = ["root", "tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst), "limit",
               str(queue)]  # fmt: skip
        for i, ns in enumerate(self.namespaces):
            inside = ["ip", "netns", "exec", ns]
            _run(*inside, "tc", "qdisc", "replace", "dev", self.inner(i), *tbf)
            _run("tc", "qdisc", "replace", "dev", f"{self.prefix}b{i}", *tbf)

    def losses(self) -> LinkLosses:
        """What the links lost so far (Note [link losses]): drops of every host's two
        queues and TCP's retransmissions in every host's namespace. `set_rate` may restart
        the queues' counters, so take the difference of two readings within one rate."""
        out = into = retransmitted = 0
        for i in range(self.count):
            inside = self.exec_prefix(i)
            out += qdisc_drops(_output(*inside, "tc", "-s", "qdisc", "show", "dev", self.inner(i)))
            into += qdisc_drops(_output("tc", "-s", "qdisc", "show", "dev", f"{self.prefix}b{i}"))
            retransmitted += tcp_retransmits(_output(*inside, "cat", "/proc/net/snmp"))
        return LinkLosses(out, into, retransmitted)

    def teardown(self) -> None:
        """Remove every namespace, link and file of this prefix (also a crashed run's)."""
        existing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        for line in existing.stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(f"{self.prefix}h") and name[len(self.prefix) + 1 :].isdigit():
                _quiet("ip", "netns", "del", name)
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
        for line in links.stdout.splitlines():
            parts = line.split(":")
            name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
            if name.startswith(f"{self.prefix}b") or name == self.bridge:
                _quiet("ip", "link", "del", name)
        for path in self._files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._files.clear()

    def release(self) -> None:
        """Tear down and let the next emulation of this prefix start."""
        try:
            self.teardown()
        finally:
            if self._lock is not None:
                os.close(self._lock)  # closing the file releases its flock
                self._lock = None

    # ----- what the launcher needs ---------------------------------------------------------
    def inner(self, host: int) -> str:
        return f"{self.prefix}v{host}"

    def exec_prefix(self, host: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[host]]

    def ssh_wrapper(self) -> str:
        """A script `WRAPPER HOST COMMAND...` that runs COMMAND in HOST's namespace, with
        gloo told which interface is the host's (GLOO_SOCKET_IFNAME)."""
        lines = ["#!/bin/sh", 'host="$1"; shift', 'case "$host" in']
        for i, (ns, address) in enumerate(zip(self.namespaces, self.addresses)):
            lines.append(f"  {address}) ns={ns}; dev={self.inner(i)} ;;")
        lines += [
            '  *) echo "unknown emulated host $host" >&2; exit 255 ;;',
            "esac",
            'export GLOO_SOCKET_IFNAME="$dev"',
            'exec ip netns exec "$ns" sh -c "$*"',
        ]
        return self._write("poseidon-netns-ssh-", "\n".join(lines) + "\n", executable=True)

    def hostfile(self, count: int | None = None) -> str:
        addresses = self.addresses[: count or self.count]
        return self._write("poseidon-hosts-", "".join(f"{a} slots=1\n" for a in addresses))

    def _write(self, prefix: str, text: str, executable: bool = False) -> str:
        handle, path = tempfile.mkstemp(prefix=prefix, text=True)
        with os.fdopen(handle, "w") as f:
            f.write(text)
        if executable:
            os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
        self._files.append(path)
        return path
