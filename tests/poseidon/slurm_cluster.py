"""A throwaway one-machine SLURM cluster for tests: slurmctld and slurmd from Debian's
slurm-wlm, on free ports, with their state, spool and logs in a temporary directory.

The node declares 8 CPUs whatever this machine has (`SlurmdParameters=config_overrides`), so
that `srun -n 4` runs on a 2-core machine. Authentication is `auth/none`: the cluster lives
for one test session on 127.0.0.1 and has no users or credentials to protect, and munge
would be a machine-wide daemon shared with whatever else runs here. Processes are tracked
by `proctrack/linuxproc` (no cgroups needed); `scancel` and a step's end still signal every
task. Clients find the cluster through SLURM_CONF (`SlurmCluster.env()`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from poseidon.rendezvous import free_port

DAEMONS = ("slurmctld", "slurmd", "srun", "sbatch", "scancel", "squeue")


def why_not() -> str:
    """Why no cluster can be started here ('' when one can)."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return f"SLURM not installed ({', '.join(missing)} missing; apt-get install slurm-wlm)"
    if os.geteuid() != 0:
        return "a throwaway SLURM cluster needs root (slurmd runs tasks as their users)"
    return ""


CONF = """ClusterName=poseidontest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
MpiDefault=none
KillWait=30
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


class SlurmCluster:
    """slurmctld + slurmd in `directory`; `start()` waits until the node is idle."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.conf = directory / "slurm.conf"
        self.host = socket.gethostname().split(".")[0]
        self.daemons: list[subprocess.Popen] = []

    def env(self, **extra: str) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("POSEIDON_", "MASTER_", "SLURM_", "OMPI_", "PMIX_"))
                 and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}  # fmt: skip
        return {**clean, "SLURM_CONF": str(self.conf), **extra}

    def start(self, timeout_s: float = 30.0) -> None:
        for sub in ("state", "spool"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(CONF.format(host=self.host, dir=self.directory,
                                         ctld_port=free_port(), d_port=free_port()))  # fmt: skip
        for daemon in ("slurmctld", "slurmd"):
            log = open(self.directory / f"{daemon}.out", "w")  # noqa: SIM115 (the daemon's)
            self.daemons.append(subprocess.Popen([daemon, "-D", "-f", str(self.conf)],
                                                 stdout=log, stderr=subprocess.STDOUT))  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env(),
                                   capture_output=True, text=True).stdout.strip()  # fmt: skip
            if state in ("idle", "mix", "alloc"):
                return
            if any(d.poll() is not None for d in self.daemons):
                break
            time.sleep(0.3)
        logs = "".join((self.directory / f"{d}.out").read_text()[-800:]
                       for d in ("slurmctld", "slurmd"))  # fmt: skip
        self.stop()
        raise RuntimeError(f"the test SLURM cluster did not come up: {logs}")

    def stop(self) -> None:
        for daemon in self.daemons:
            daemon.terminate()
        for daemon in self.daemons:
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        self.daemons.clear()
