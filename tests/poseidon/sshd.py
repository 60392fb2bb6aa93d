"""A real OpenSSH server on 127.0.0.1 for the launcher's tests: a throwaway host key and
client key, a config of its own, and an `ssh` command line that reaches it without
touching ~/.ssh. Needs root (sshd's privilege separation) and /usr/sbin/sshd (Debian's
openssh-server, which .ci/run installs)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def unavailable() -> str:
    """Why a real sshd cannot run here ("" when it can)."""
    if not os.path.exists(SSHD):
        return f"{SSHD} is not installed (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "sshd needs root"
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "the ssh client is not installed"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Sshd:
    port: int
    ssh: list[str]  # the client command: `[*ssh, host, remote command]`


@contextlib.contextmanager
def running_sshd(directory: Path) -> Iterator[Sshd]:
    directory.mkdir(parents=True, exist_ok=True)
    host_key, client_key = directory / "host_key", directory / "client_key"
    for key in (host_key, client_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True)  # fmt: skip
    authorized = directory / "authorized_keys"
    authorized.write_text(Path(f"{client_key}.pub").read_text())
    authorized.chmod(0o600)
    port = _free_port()
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {authorized}\nPidFile {directory / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nPrintMotd no\n"
        # A login environment of its own: the remote PATH lacks this machine's virtualenv,
        # as on a real cluster.
        "PermitUserEnvironment no\nAcceptEnv none\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)  # its privilege separation directory
    server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL,
                              stderr=open(directory / "sshd.log", "w"))  # fmt: skip  # noqa: SIM115
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start: {(directory / 'sshd.log').read_text()}")
            time.sleep(0.05)
        ssh = ["ssh", "-p", str(port), "-i", str(client_key), "-o", "BatchMode=yes",
               "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes"]  # fmt: skip
        yield Sshd(port, ssh)
    finally:
        server.terminate()
        server.wait(10)
