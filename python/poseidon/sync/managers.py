"""Where the processes of a job that a cluster manager started meet, when nobody said.

A job that hosts itself (job.py: rank 0 runs the coordinator at MASTER_ADDR:MASTER_PORT+1,
the token travels through a store at MASTER_PORT+2) needs one address that every task knows.
torchrun sets MASTER_ADDR and MASTER_PORT; SLURM and Open MPI do not, but what they do set
names it:

- SLURM (`srun`, also inside `sbatch`): task 0 runs on the first node of the step, so the
  address is the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), a hostlist
  such as `node[01-04,07]`; the port comes from the job and step ids, so that two jobs
  sharing a node, or two steps of one job, meet at different ports.
- Open MPI (`mpirun`): when every rank runs on one machine (OMPI_COMM_WORLD_LOCAL_SIZE =
  OMPI_COMM_WORLD_SIZE) the address is 127.0.0.1 and the port comes from the MPI job id.
  Across machines MPI names no host that rank 0 is sure to run on: the user passes
  MASTER_ADDR (`mpirun -x MASTER_ADDR=<first host> ...`), and job.py says so if they did not.

Ports are 20000 + 3·(id mod 4000): three consecutive ports per job, all below Linux's
ephemeral range (32768 and up), where a connection's own port could take them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, MutableMapping

PORT_BASE = 20000
PORT_SLOTS = 4000  # 20000 .. 31999 (+2)


def first_host(hostlist: str) -> str:
    """The first host of a SLURM hostlist: "node[01-04,07],gpu5" -> "node01"."""
    text = hostlist.strip()
    match = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?([^,]*)", text)
    if not match or not text:
        raise ValueError(f"hostlist {hostlist!r}: no host in it")
    prefix, ranges, suffix = match.groups()
    if ranges is None:
        return prefix + suffix
    first = ranges.split(",")[0].split("-")[0]
    return f"{prefix}{first}{suffix}"


def _port(job_id: int) -> int:
    return PORT_BASE + 3 * (job_id % PORT_SLOTS)


def meeting_point(env: Mapping[str, str]) -> dict[str, str]:
    """MASTER_ADDR and MASTER_PORT as the manager that started this process implies them
    (see the module's docstring); only those `env` lacks, and none when no manager is
    recognised (or Open MPI spans machines)."""
    derived: dict[str, str] = {}
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if "SLURM_PROCID" in env and nodelist:
        job = int(env.get("SLURM_JOB_ID", "0") or 0)
        step = env.get("SLURM_STEP_ID", "0")
        step_id = int(step) if step.isdigit() else 0
        port = _port(job * 31 + step_id)
        derived = {"MASTER_ADDR": first_host(nodelist), "MASTER_PORT": str(port)}
    elif "OMPI_COMM_WORLD_SIZE" in env and (
        env.get("OMPI_COMM_WORLD_LOCAL_SIZE") == env["OMPI_COMM_WORLD_SIZE"]
    ):
        job_name = env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE") or "0"
        job_id = int(job_name) if job_name.isdigit() else sum(job_name.encode())
        derived = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_port(job_id))}
    return {k: v for k, v in derived.items() if k not in env}


def apply_meeting_point(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the manager's implied MASTER_ADDR and MASTER_PORT where unset (os.environ by
    default: torch.distributed's rendezvous reads them there too); returns what was set."""
    target = os.environ if env is None else env
    derived = meeting_point(target)
    target.update(derived)
    return derived
