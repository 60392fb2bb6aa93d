"""Run the cells of an experiment: one job per (mode, node count), through the launcher.

Emulated (`--emulate`): one network namespace per node with its link capped by tc
(poseidon/experiments/emulation.py), one replay worker per node with its shard in its
process (the paper's layout), real TCP between them. On a cluster (`--hostfile`): the
same workers over ssh, computing for real (or replaying a profile, if given).

Note [dilation and byte scale]. Sixteen nodes' worth of 10 GbE links do not fit through
two cores. The emulation slows everything by the dilation d (compute sleeps d times
longer, links run d times slower) and shrinks every tensor, chunk and bucket by the byte
scale s (links s times slower again), so a transfer takes d times its real time and a
compute step too: the cluster's shape in time is kept while the bytes per wall second
drop by s·d. Reported times are divided by d. The plan is decided on the real shapes; the
socket's unsent-bytes threshold (TCP_NOTSENT_LOWAT) shrinks by s with the frames, so that
priorities still act within a frame's worth of data. The choice of s and d is below
(choose_byte_scale, choose_dilation) and in docs/experiments.md §2.

Note [host load]. Every replay worker is a real process on this machine, and its CPU work
is real time: when the workers together want more of the cores than they get, they wait
for one another and the cell reads slow (16 Inception-V3 nodes on 10 GbE: 8.9% above the
prediction at d = 8, 0.4% at d = 32; VGG19-22K 4 x 4 with local aggregation: 1.008 s at
d = 4, 0.987-0.993 s at d = 8, 0.973 s at d = 32). expected_host_load counts, per worker, its
work per iteration (per layer, per byte of the scaled model, and with a local stage per
synchronised layer: three gloo collectives over loopback, 2.2-2.8 ms of CPU for the three
when four processes on two cores run them back to back, bench/gloo_loopback_cpu.py) spread
over the dilated iteration, plus what each process takes per wall second. The constants are
a non-negative least-squares fit (bench/host_load_fit.py) to the Poseidon cells' measured
`host_load` in docs/results as they stood with the 4 x 4 VGG19-22K cells at d = 4 (and its
aggregated cell run alone at d = 8: 0.160). With that sweep at d = 4, 8 and 32 (the
*.4x4.d4 and *.4x4.d8 files and the d = 32 one) the same command gives 0.38 ms, 1.17 ms/MB,
1.22 ms, 4.5e-3 and 3.8e-3: it picks the same d = 8 for that cell, but d = 8 and 16 for the
unseen nets' 2- and 4-node cells (docs/experiments.md §6.5), whose busiest cells took
0.05-0.18 of the cores at d = 4 and 8; so the constants stay (the command prints both picks
for every sweep). The loads the rule acts on (0.1 and above) it reproduces within a
quarter (tests/poseidon/experiments/test_dilation.py). It takes the profile's compute time
as the iteration, so where the links, not the compute, set the pace it overestimates the
load, and errs towards more dilation.

Note [link CPU]. The links themselves cost this machine CPU per packet: the sender's TCP,
the veth, the token buckets, the bridge and the receiver's TCP (bench/link_cpu.py: four
hosts sending to all others, the machine's busy time over the bytes delivered). As TCP's
64 KiB super-packets (GSO on, the default: emulation.py, Note [packets, not GSO bursts])
a byte cost 4.5-11.6 ns here, less the faster the links (TCP builds bigger super-packets);
as single packets (`--gso off`) 20-27 ns at every rate. EMULATION_BUDGET_BYTES_PER_S was
found with super-packets on links of 40-80 Mbit/s (wall clock), where a byte cost 4.5-7.6
ns; single packets take 3-5 times that, so without GSO the rule allows a quarter of the
bytes per second (SINGLE_PACKET_CPU_FACTOR): VGG19-22K's WFBP on 8 nodes of 10 GbE ran at
d = 4 without GSO on 0.80 of the cores (0.16 with GSO) and woke 0.108 s late per
iteration; the rule now picks d = 16 for it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from poseidon.experiments.machine_load import OtherLoad
from poseidon.experiments.profile import Profile
from poseidon.experiments.report import Cell

RESULT_MARK = "RESULT "
# What this machine's two cores carry through the emulated links, in bytes per wall second
# summed over all nodes' uplinks, and still read the prediction within 1%: 16 VGG19-22K
# nodes on 10 GbE read 4.7% slow at 156 MB/s (d = 4), 0.8% at 78 MB/s (d = 8).
EMULATION_BUDGET_BYTES_PER_S = 80e6
# What a byte through the links costs this machine's CPU as single packets (`--gso off`)
# over what it costs as TCP's 64 KiB super-packets, for which the budget above was found:
# 3-5 (Note [link CPU]).
SINGLE_PACKET_CPU_FACTOR = 4.0
# Scaled model size per worker, so that 16 workers' parameters, gradients and solver
# history fit in a few GB.
SCALED_MODEL_BYTES = 32 << 20
# The replay's own CPU work (the syncer's data -= diff on byte-scaled blobs, Python per
# layer) is real time; dilating by at least this keeps it under ~1% of an iteration.
MIN_DILATION = 4.0
# The replay's host work (Note [host load]), fitted to the `host_load` of the Poseidon cells
# in docs/results: real CPU seconds per worker and iteration per layer (Python per layer,
# WFBP hooks, the syncer), per byte of the byte-scaled model (the solver's update, the
# syncer's copies) and, with several workers per node, per synchronised layer (the local
# stage: a reduce, an announcement and a spread over loopback gloo); and the share of a core
# each worker's process takes per wall second whatever it does (the comm core's threads and
# heartbeats; more with a local stage: its threads and gloo's).
HOST_S_PER_LAYER = 0.3e-3
HOST_S_PER_MODEL_BYTE = 0.56e-9
HOST_S_PER_LOCAL_LAYER = 1.1e-3
HOST_CORES_PER_WORKER = 8.7e-3
HOST_CORES_PER_LOCAL_WORKER = 4.9e-3
# The most of this machine's cores the workers may take: beyond it they wait on each other
# for a core and the cell reads slow. VGG19-22K 4 x 4 with local aggregation took 0.21 at
# d = 4 and read 1.008 s, 0.16-0.19 at d = 8 and read 0.987-0.993 s, 0.08 at d = 32 and read
# 0.973 s: at this share a cell still reads 1.5-2% slow (docs/experiments.md §2).
HOST_CPU_SHARE = 0.17
# Bytes are shrunk before time is stretched, down to frames of 1/32 of the real ones (a
# 1 MiB chunk is 32 KiB) — beyond that per-frame costs start to matter.
PREFERRED_BYTE_SCALE = 32
DEFAULT_CHUNK_BYTES = 1 << 20  # the comm core's (config.h kDefaultChunkBytes; tested equal)
DEFAULT_NOTSENT_LOWAT_BYTES = 256 << 10
DDP_BUCKET_CAP_BYTES = 25 << 20
DDP_FIRST_BUCKET_BYTES = 1 << 20


class ExperimentError(RuntimeError):
    """A cell could not run; the message names the cell and says why."""


@dataclass
class Scaling:
    dilation: float
    byte_scale: int


def describe_scaling(byte_scale: int, dilations: dict[int, float]) -> str:
    """One line for the output: which byte scale and dilations were used."""
    used = ", ".join(f"{d:g} at P={p}" for p, d in sorted(dilations.items()))
    return (f"byte scale {byte_scale} (tensors, chunks and buckets 1/{byte_scale}, links "
            f"{byte_scale}x slower); time dilation {used} (compute and links that many times "
            "slower; times reported undilated)")  # fmt: skip


def choose_byte_scale(profile: Profile, nodes: Sequence[int], bandwidth_bps: float,
                      per_node: int = 1, gso: bool = True) -> int:  # fmt: skip
    """The smallest power of two that brings a worker's model to SCALED_MODEL_BYTES, raised
    (up to PREFERRED_BYTE_SCALE) until the links fit the byte budget at the dilation each
    cell of `nodes` (every node count of the sweep) gets at PREFERRED_BYTE_SCALE: shrinking
    bytes costs no time, dilating does. But every emulated packet carries the byte scale
    times a real one's data (TCP's grain: docs/experiments.md §2), so where the workers'
    host load sets a cell's dilation and the links would fit at less, the bytes are not
    shrunk for them."""
    counts = list(nodes)
    scale = 1
    while profile.model_bytes / scale > SCALED_MODEL_BYTES:
        scale *= 2
    least = [choose_dilation(p, bandwidth_bps, max(scale, PREFERRED_BYTE_SCALE), profile,
                             per_node, gso=gso) for p in counts]  # fmt: skip

    def links_fit(scale: int) -> bool:
        return all(choose_dilation(p, bandwidth_bps, scale, None, per_node, gso=gso) <= d
                   for p, d in zip(counts, least))  # fmt: skip

    while scale < PREFERRED_BYTE_SCALE and not links_fit(scale):
        scale *= 2
    return scale


def choose_dilation(
    nodes: int, bandwidth_bps: float, byte_scale: int, profile: Profile | None = None,
    per_node: int = 1, cores: int | None = None, gso: bool = True,
) -> float:  # fmt: skip
    """The smallest power of two, at least MIN_DILATION, that keeps the nodes' links, at
    full rate, within EMULATION_BUDGET_BYTES_PER_S in all (a SINGLE_PACKET_CPU_FACTOR-th of
    it without GSO: Note [link CPU]), and (given the profile) the workers' host load
    (`per_node` on each node; expected_host_load) within HOST_CPU_SHARE of `cores`
    (default: this machine's)."""
    traffic = nodes * bandwidth_bps / 8 / byte_scale if nodes > 1 else 0.0
    cores = cores or os.cpu_count() or 1
    budget = EMULATION_BUDGET_BYTES_PER_S / (1.0 if gso else SINGLE_PACKET_CPU_FACTOR)

    def too_busy(d: float) -> bool:
        if traffic / d > budget:
            return True
        if profile is None:
            return False
        return expected_host_load(profile, nodes, per_node, byte_scale, d, cores) > HOST_CPU_SHARE

    dilation = MIN_DILATION
    while too_busy(dilation):
        dilation *= 2
    return dilation


def expected_host_load(profile: Profile, nodes: int, per_node: int, byte_scale: int,
                       dilation: float, cores: int) -> float:  # fmt: skip
    """The share of `cores` that the replay's workers take (Note [host load]): each
    worker's work per iteration, spread over the dilated iteration, and what each takes
    per wall second."""
    workers = nodes * per_node
    local = per_node > 1
    model_bytes = profile.model_bytes / byte_scale
    per_iteration = (len(profile.layers) * HOST_S_PER_LAYER + model_bytes * HOST_S_PER_MODEL_BYTE
                     + local * profile.synced_layers * HOST_S_PER_LOCAL_LAYER)  # fmt: skip
    per_second = HOST_CORES_PER_WORKER + local * HOST_CORES_PER_LOCAL_WORKER
    return workers * (per_iteration / (dilation * profile.iteration_s) + per_second) / cores


def host_load_note(mode: str, host_load: float, dilation: float, cores: int) -> str | None:
    """What to tell the user when a replayed cell's workers took more of this machine's
    cores than the dilation rule allows (Note [host load]): its time may read slow. Not
    for the all-reduce, whose cells read within 1.8% of the prediction at loads up to 0.5
    (docs/experiments.md §6.5): its load is mostly gloo's ring steps waiting."""
    if host_load <= HOST_CPU_SHARE or mode == "allreduce":
        return None
    return (f"note: its workers took {host_load:.2f} of this machine's {cores} cores (the "
            f"dilation rule allows {HOST_CPU_SHARE:g}), so its time may read slow; "
            f"--dilation {2 * dilation:g} gives them more room (docs/experiments.md §2)"
            )  # fmt: skip


@dataclass
class CellJob:
    """Everything one cell's job needs besides the mode and the node count."""

    prototxt: str
    batch: int
    iterations: int
    warmup: int
    profile_path: str | None = None
    scaling: Scaling = field(default_factory=lambda: Scaling(1.0, 1))
    device: str = "cpu"
    threads: int = 1
    timeout_ms: int = 600_000
    extra_env: dict[str, str] = field(default_factory=dict)
    chunk_bytes: int = DEFAULT_CHUNK_BYTES  # the real cluster's; the job's is ÷ byte scale

    def worker_command(self) -> list[str]:
        command = [sys.executable, "-m", "poseidon.experiments.worker", "--model", self.prototxt]
        command += ["--batch", str(self.batch), "--warmup", str(self.warmup)]
        command += ["--iterations", str(self.iterations), "--device", self.device]
        command += ["--threads", str(self.threads)]
        if self.profile_path:
            command += ["--profile", self.profile_path, "--dilation", f"{self.scaling.dilation:g}"]
            command += ["--byte-scale", str(self.scaling.byte_scale)]
        return command

    def environment(self) -> dict[str, str]:
        s = self.scaling.byte_scale
        env = {
            "GLOG_minloglevel": "1",
            "OMP_NUM_THREADS": "1",
            "POSEIDON_CHUNK_BYTES": str(max(4, self.chunk_bytes // s // 4 * 4)),
            "POSEIDON_NOTSENT_LOWAT_BYTES": str(max(1, DEFAULT_NOTSENT_LOWAT_BYTES // s)),
            "POSEIDON_BUCKET_CAP_BYTES": str(max(4, DDP_BUCKET_CAP_BYTES // s)),
            "POSEIDON_FIRST_BUCKET_BYTES": str(max(4, DDP_FIRST_BUCKET_BYTES // s)),
        }
        if "POSEIDON_HEARTBEAT_TIMEOUT_MS" not in os.environ:
            # A replayed cluster lives d times slower: a peer is lost after 5 s of its time,
            # not of ours (at d = 8, sixteen nodes' heartbeats behind full tc queues, whose
            # dropped packets wait out TCP's real-time retransmission back-off, once went
            # 5.5 s without an answer and ended a healthy cell).
            env["POSEIDON_HEARTBEAT_TIMEOUT_MS"] = str(int(5000 * max(1.0, self.scaling.dilation)))
        env.update(self.extra_env)
        return env


class _Collector:
    """The launcher's output, kept in memory (thread-safe: the launcher writes under its
    own lock) and echoed to `echo` when given."""

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self.lines: list[str] = []
        self._echo = echo
        self._partial = ""

    def write(self, text: str) -> None:
        text = self._partial + text
        *complete, self._partial = text.split("\n")
        self.lines.extend(complete)
        if self._echo is not None:
            for line in complete:
                self._echo(line)

    def flush(self) -> None:
        pass


def run_cell(
    job: CellJob,
    mode: str,
    nodes: int,
    hosts: list[str] | None,
    ssh: list[str] | None,
    port: int,
    echo: Callable[[str], None] | None = None,
    per_node: int = 1,
    aggregate: bool = True,
) -> Cell:
    """Start one job of `per_node` workers on each of `nodes` nodes (summed inside each node
    first when `aggregate`: POSEIDON_WORKERS_PER_HOST), wait for it, and read every worker's
    RESULT line. Raises ExperimentError naming the cell; KeyboardInterrupt when the job was
    interrupted."""
    from poseidon.launch import Host, JobSpec, run_job

    workers = nodes * per_node
    local = per_node > 1 and aggregate
    spec = JobSpec(
        command=job.worker_command(),
        num_workers=workers,
        num_servers=nodes if local else workers,  # a shard per machine, or per worker
        sync=mode,
        timeout_ms=job.timeout_ms,
        coordinator_port=port,
        hosts=[Host(h, per_node) for h in hosts[:nodes]] if hosts else [],
        extra_env=job.environment(),
        workers_per_host=per_node if local else 1,
    )
    if ssh is not None:
        spec.ssh = ssh
    out = _Collector(echo)
    started = time.monotonic()
    beside = OtherLoad(os.cpu_count() or 1).start()
    code = run_job(spec, out)
    other_load = beside.other_share()
    if code in (130, 143):
        raise KeyboardInterrupt
    found = _results(out.lines)
    if code != 0 or len(found) != workers:
        tail = "\n".join(out.lines[-25:])
        raise ExperimentError(
            f"{mode} on {nodes} node(s) failed (exit status {code}, "
            f"{len(found)} of {workers} results); last lines:\n{tail}"
        )
    sums = [r["checksum"] for r in found]
    if max(sums) - min(sums) > 1e-6 * max(1.0, abs(max(sums))):
        raise ExperimentError(
            f"{mode} on {nodes} node(s): the workers' weights differ after "
            f"training (checksums {sums}): synchronisation is broken"
        )
    slowest = max(found, key=lambda r: r["iteration_s"])
    # A node's bytes: its workers' together (ranks n·G .. n·G+G−1).
    per_host = [sum(r["bytes_sent"] for r in found[n * per_node : (n + 1) * per_node])
                for n in range(nodes)]  # fmt: skip
    extra = {
        "bytes_per_node": max(per_host),
        "wall_iteration_s": slowest["wall_iteration_s"],
        "late_s": max(r["late_s"] for r in found),
        "idle_s": max(r.get("idle_s", 0.0) for r in found),
        "restarts": max(r.get("restarts", 0) for r in found),
        # The share of this machine's cores the workers' processes took while timed.
        "host_load": sum(r.get("host_cpu_s", 0.0) for r in found)
        / (slowest["wall_iteration_s"] * (os.cpu_count() or 1)),
        "job_s": round(time.monotonic() - started, 1),
    }
    if other_load is not None:  # what other processes took meanwhile (Note [other load])
        extra["other_load"] = other_load
    if found[0].get("schemes"):
        extra["schemes"] = found[0]["schemes"]  # the plan: the same on every worker
    return Cell(mode, nodes, slowest["iteration_s"], extra=extra)


def _results(lines: list[str]) -> list[dict]:
    import json

    found = {}
    for line in lines:
        _, mark, payload = line.partition(RESULT_MARK)
        if mark and payload.startswith("{"):
            result = json.loads(payload)
            found[result["rank"]] = result
    return [found[r] for r in sorted(found)]


class MemoryWatch:
    """Peak memory in use on this machine while an experiment runs (MemTotal − MemAvailable,
    above what was in use at the start), sampled twice a second."""

    def __init__(self) -> None:
        self.baseline = _used_bytes()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, _used_bytes() - self.baseline)


def _used_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        return info["MemTotal"] - info["MemAvailable"]
    except (OSError, KeyError, ValueError, IndexError):
        return 0


def cell_timeout_ms(predicted_s: float, job: CellJob) -> int:
    """Every wait of a cell's job: ample for its predicted iterations at the dilation."""
    iterations = job.warmup + job.iterations
    dilated = predicted_s * job.scaling.dilation * iterations
    return int(max(120.0, 10 * dilated + 60) * 1000)


def port_for(cell_number: int) -> int:
    """A fresh coordinator / rendezvous port per cell (no wait for TIME_WAIT sockets)."""
    return 29700 + (cell_number * 3) % 1200
