"""HEALTHCHECK of the Poseidon images: a node of a cluster is healthy once it listens.

A coordinator, KV-store shard or worker (the container's POSEIDON_ROLE is set) accepts
its peers' connections from the moment it has started until the job ends; this checks that
a process of this container holds a listening TCP socket. It reads /proc instead of
connecting: a connection that never says the cluster's handshake would be logged by the
node as a rejected stranger every interval. A container without POSEIDON_ROLE (`caffe
train` alone, `poseidon demo`, a shell) has nothing of this kind to check: healthy.

Exit status 0: healthy; 1: not (the reason on stdout, which `docker inspect` shows).
"""

from __future__ import annotations

import os
import sys

LISTEN = "0A"  # the state column of /proc/net/tcp: TCP_LISTEN


def listening_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == LISTEN:
                inodes.add(fields[9])
    return inodes


def our_socket_inodes() -> set[str]:
    """Sockets held by the processes this check can see: the container's own (its PID
    namespace), even on the host's network, where /proc/net/tcp lists the host's."""
    inodes = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fd_dir = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or not ours
        for name in names:
            try:
                target = os.readlink(os.path.join(fd_dir, name))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    return inodes


def main() -> int:
    role = os.environ.get("POSEIDON_ROLE", "")
    if not role:
        return 0
    if listening_inodes() & our_socket_inodes():
        return 0
    print(f"the {role} of this container does not listen for its peers (yet)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
