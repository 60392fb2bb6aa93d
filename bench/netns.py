"""Several emulated hosts on one machine: Linux network namespaces on a bridge, each
host's link capped with tc (needs root and iproute2).

Host i is namespace `pos-h<i>` with address 10.77.0.<i+1>/24 on veth `posv<i>` (its
root-side peer `posb<i>` is enslaved to bridge `posbr0`). With a rate, token-bucket
filters cap both directions of every host's link, like a host behind a NIC of that speed.
`ssh_wrapper()` writes a stand-in for `ssh HOST COMMAND` that runs COMMAND inside HOST's
namespace, so `poseidon launch --hostfile --ssh` starts processes on the emulated hosts.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile

BRIDGE = "posbr0"
SUBNET = "10.77.0"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _quiet(*args: str) -> None:
    subprocess.run(list(args), capture_output=True)


class HostCluster:
    def __init__(self, count: int, rate_mbit: float | None) -> None:
        self.count = count
        self.rate_mbit = rate_mbit
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(count)]
        self.namespaces = [f"pos-h{i}" for i in range(count)]

    def __enter__(self) -> HostCluster:
        self.teardown()  # leftovers of an interrupted run
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("link", "set", BRIDGE, "up")
        for i, (ns, address) in enumerate(zip(self.namespaces, self.addresses)):
            _ip("netns", "add", ns)
            _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
            _ip("link", "add", f"posb{i}", "type", "veth", "peer", "name", f"posv{i}")
            _ip("link", "set", f"posv{i}", "netns", ns)
            _ip("link", "set", f"posb{i}", "master", BRIDGE)
            _ip("link", "set", f"posb{i}", "up")
            _ip("netns", "exec", ns, "ip", "addr", "add", f"{address}/24", "dev", f"posv{i}")
            _ip("netns", "exec", ns, "ip", "link", "set", f"posv{i}", "up")
            if self.rate_mbit:
                rate = f"{self.rate_mbit}mbit"
                # Egress of the host, and egress towards the host (= its ingress).
                for prefix in (["ip", "netns", "exec", ns], []):
                    dev = f"posv{i}" if prefix else f"posb{i}"
                    subprocess.run([*prefix, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                                    "rate", rate, "burst", "256kb", "latency", "100ms"],
                                   check=True, capture_output=True)  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def teardown(self) -> None:
        for i in range(max(self.count, 8)):
            _quiet("ip", "netns", "del", f"pos-h{i}")
            _quiet("ip", "link", "del", f"posb{i}")
        _quiet("ip", "link", "del", BRIDGE)

    def exec_prefix(self, host: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[host]]

    def ssh_wrapper(self) -> str:
        """A script `WRAPPER HOST COMMAND...` running COMMAND in HOST's namespace."""
        lines = ["#!/bin/sh", 'host="$1"; shift', 'case "$host" in']
        for ns, address in zip(self.namespaces, self.addresses):
            lines.append(f"  {address}) ns={ns} ;;")
        lines += ['  *) echo "unknown host $host" >&2; exit 255 ;;', "esac",
                  'exec ip netns exec "$ns" sh -c "$*"']  # fmt: skip
        handle, path = tempfile.mkstemp(prefix="netns-ssh-", text=True)
        with os.fdopen(handle, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
        return path

    def hostfile(self, slots: int = 1) -> str:
        handle, path = tempfile.mkstemp(prefix="hosts-", text=True)
        with os.fdopen(handle, "w") as f:
            f.writelines(f"{address} slots={slots}\n" for address in self.addresses)
        return path
