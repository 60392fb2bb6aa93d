"""Cluster settings: the one place that parses them.

Every process learns its role, rank and peers from environment variables
(``POSEIDON_*``), from the standard launcher variables (torchrun, mpirun,
SLURM) for a worker's rank and count, and from command-line flags, which the
``poseidon`` subcommands pass as overrides. ``SETTINGS`` lists every setting
once, with its variable, unit and default; docs/communication.md shows the
same table (a test keeps the two in sync).

    cfg = Config.from_env()                       # the environment
    cfg = Config.from_env(role="server", rank=1)  # plus overrides
    native = cfg.to_native()                      # poseidon._C.Config
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

ROLES = ("worker", "server", "coordinator")
SCHEMES = ("auto", "ps", "sfb")  # POSEIDON_SCHEME: exact, for every layer
# POSEIDON_LAYER_SCHEMES may also force one layer to a lossy scheme (docs/communication.md §7).
LAYER_SCHEMES = (*SCHEMES, "bf16", "powersgd")
# POSEIDON_COMPRESSION: which lossy schemes the cost model may pick; "powersgd:R" and "auto:R"
# set the PowerSGD rank too.
COMPRESSIONS = ("none", "bf16", "powersgd", "auto")
DEFAULT_POWERSGD_RANK = 4
SYNC_MODES = ("ps-nooverlap", "wfbp", "poseidon", "allreduce")
# The modes of caffe/parallel/syncer.py's PoseidonSync (KV store and SFB), which run a HybComm plan;
# allreduce is caffe/parallel/allreduce.py's and has none.
PLAN_SYNC_MODES = SYNC_MODES[:3]
TRANSPORTS = ("tcp", "inproc")
DEFAULT_COORDINATOR_PORT = 29600

# Rank and world size from launchers, in the order they are tried.
LAUNCHER_RANK = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
LAUNCHER_SIZE = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
LAUNCHER_LOCAL_RANK = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
)
# The workers of this process's machine, for POSEIDON_WORKERS_PER_HOST=auto.
LAUNCHER_LOCAL_SIZE = (
    "POSEIDON_LOCAL_WORKERS",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
)


class SettingError(ValueError):
    """A setting has a value that cannot be used; the message names it."""


@dataclass(frozen=True)
class Setting:
    field: str
    env: str
    unit: str
    default: str
    doc: str


SETTINGS: tuple[Setting, ...] = (
    Setting("role", "POSEIDON_ROLE", "", "worker", "worker, server or coordinator"),
    Setting(
        "rank",
        "POSEIDON_RANK",
        "",
        "0",
        "this node's rank within its role; workers fall back to RANK, "
        "OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID",
    ),
    Setting(
        "num_workers",
        "POSEIDON_NUM_WORKERS",
        "",
        "1",
        "P1; falls back to WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS",
    ),
    Setting("num_servers", "POSEIDON_NUM_SERVERS", "", "1", "P2, the number of KV-store shards"),
    Setting(
        "workers_per_host",
        "POSEIDON_WORKERS_PER_HOST",
        "",
        "1",
        "G, the workers of one machine (ranks g·G .. g·G+G−1 are machine g's): they sum their "
        "gradients inside the machine and only the first, its leader, talks to the shards and "
        "the other machines (docs/communication.md, local aggregation); `auto`: the launcher's "
        "count of this machine's workers (POSEIDON_LOCAL_WORKERS, LOCAL_WORLD_SIZE, "
        "OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_STEP_TASKS_PER_NODE); 1: every worker on its own",
    ),
    Setting(
        "coordinator",
        "POSEIDON_COORDINATOR",
        "host:port",
        f"127.0.0.1:{DEFAULT_COORDINATOR_PORT}",
        "where the coordinator listens; falls back to MASTER_ADDR:(MASTER_PORT+1)",
    ),
    Setting(
        "token",
        "POSEIDON_TOKEN",
        "",
        "(none: required)",
        "shared secret every connection presents first; or POSEIDON_TOKEN_FILE, a file holding it",
    ),
    Setting(
        "listen",
        "POSEIDON_LISTEN",
        "host:port",
        "<host>:0",
        "where this worker or server accepts data connections (port 0: any free port)",
    ),
    Setting(
        "host",
        "POSEIDON_HOST",
        "",
        "the address that reaches the coordinator",
        "host part of the default listen address",
    ),
    Setting("transport", "POSEIDON_TRANSPORT", "", "tcp", "tcp, or inproc (tests in one process)"),
    Setting(
        "chunk_bytes",
        "POSEIDON_CHUNK_BYTES",
        "bytes",
        "1MiB",
        "PS tensors are cut into chunks of this size (the coordinator's value wins)",
    ),
    Setting(
        "max_frame_bytes",
        "POSEIDON_MAX_FRAME_BYTES",
        "bytes",
        "64MiB",
        "larger frames are rejected and their connection dropped",
    ),
    Setting("timeout_ms", "POSEIDON_TIMEOUT_MS", "ms", "120000", "limit of every wait"),
    Setting(
        "heartbeat_interval_ms",
        "POSEIDON_HEARTBEAT_INTERVAL_MS",
        "ms",
        "500",
        "how often nodes and the coordinator exchange heartbeats",
    ),
    Setting(
        "heartbeat_timeout_ms",
        "POSEIDON_HEARTBEAT_TIMEOUT_MS",
        "ms",
        "5000",
        "a node silent this long is declared dead and the job aborted",
    ),
    Setting(
        "handshake_timeout_ms",
        "POSEIDON_HANDSHAKE_TIMEOUT_MS",
        "ms",
        "5000",
        "an incoming connection must complete the handshake within this from its accept"
        " (its first bytes within 1 s, or it is dropped)",
    ),
    Setting("comm_threads", "POSEIDON_COMM_THREADS", "threads", "2", "sender threads per node"),
    Setting(
        "socket_buffer_bytes",
        "POSEIDON_SOCKET_BUFFER_BYTES",
        "bytes",
        "0",
        "TCP SO_SNDBUF/SO_RCVBUF; 0 keeps the kernel's autotuning",
    ),
    Setting(
        "notsent_lowat_bytes",
        "POSEIDON_NOTSENT_LOWAT_BYTES",
        "bytes",
        "256KiB",
        "TCP_NOTSENT_LOWAT: unsent bytes the kernel may hold per connection, so that the send "
        "queue's priorities decide what goes next; 0 keeps the kernel's default",
    ),
    Setting(
        "scheme",
        "POSEIDON_SCHEME",
        "",
        "auto",
        "coordinator: auto (BestScheme per layer), ps or sfb for every layer",
    ),
    Setting(
        "layer_schemes",
        "POSEIDON_LAYER_SCHEMES",
        "",
        "(none)",
        "worker, sync=poseidon: per-layer choices over BestScheme's, e.g. fc7=ps,fc8=ps "
        "(`poseidon predict --modes poseidon-tuned` says which pay off)",
    ),
    Setting(
        "compression",
        "POSEIDON_COMPRESSION",
        "",
        "none",
        "coordinator, sync=poseidon: the lossy schemes the cost model may pick per layer: "
        "none (exact: PS or SFB), bf16 (16-bit wire), powersgd or powersgd:R (rank R), auto "
        "(both; PowerSGD at POSEIDON_POWERSGD_RANK); the plan and the log name the lossy layers",
    ),
    Setting(
        "powersgd_rank",
        "POSEIDON_POWERSGD_RANK",
        "",
        str(DEFAULT_POWERSGD_RANK),
        "PowerSGD's rank r (a layer uses min(r, M, N)); >= 1",
    ),
    Setting(
        "link_rate",
        "POSEIDON_LINK_RATE",
        "bit/s",
        "0 (unknown)",
        "the link's goodput, e.g. 100mbit, 10gbit: the coordinator ranks plans by their "
        "simulated iteration, and the workers time each scheme's compute (and poseidon.torch "
        "each module's backward) before declaring their layers; unknown: schemes are ranked "
        "by bytes alone",
    ),
    Setting(
        "local_rate",
        "POSEIDON_LOCAL_RATE",
        "bit/s",
        "0 (unknown)",
        "coordinator: the bandwidth between a machine's workers (NVLink, PCIe, shared memory), "
        "for the local stage's time when POSEIDON_WORKERS_PER_HOST > 1; unknown: counted 0 s",
    ),
    Setting(
        "gemm_rate",
        "POSEIDON_GEMM_RATE",
        "flop/s",
        "0 (unknown)",
        "coordinator: the device's GEMM rate, for the compute a scheme adds (SFB's rebuild, "
        "PowerSGD's products) where a worker measured none; `poseidon profile --rates` "
        "measures it",
    ),
    Setting(
        "memory_rate",
        "POSEIDON_MEMORY_RATE",
        "bytes/s",
        "0 (unknown)",
        "coordinator: the device's memory bandwidth, for 16-bit conversion and PowerSGD's error "
        "feedback where a worker measured none; `poseidon profile --rates` measures it",
    ),
    Setting("verbose", "POSEIDON_VERBOSE", "", "0", "1: log connections and the plan on stderr"),
    Setting(
        "sync",
        "POSEIDON_SYNC",
        "",
        "poseidon",
        "worker: ps-nooverlap (sync after backward), wfbp (per layer over the PS), "
        "poseidon (WFBP + HybComm), allreduce (the baseline: DDP-style bucketed ring "
        "all-reduce over torch.distributed; no coordinator or shards)",
    ),
    Setting(
        "bucket_cap_bytes",
        "POSEIDON_BUCKET_CAP_BYTES",
        "bytes",
        "25MiB",
        "worker, sync=allreduce: gradients are all-reduced in buckets of this size (DDP's "
        "bucket_cap_mb)",
    ),
    Setting(
        "first_bucket_bytes",
        "POSEIDON_FIRST_BUCKET_BYTES",
        "bytes",
        "1MiB",
        "worker, sync=allreduce: the first bucket's size, small so the first all-reduce "
        "starts early (DDP's)",
    ),
    Setting(
        "timeline",
        "POSEIDON_TIMELINE",
        "path",
        "(none)",
        "worker: write a Chrome trace here; {rank} is replaced by the worker's rank (added before "
        "the extension when the job has several workers and the path has none)",
    ),
    Setting(
        "colocate",
        "POSEIDON_COLOCATE",
        "",
        "0",
        "worker: 1 runs shard <rank> in the worker's own process (rank < P2), reached "
        "without sockets; `poseidon launch` sets it unless --no-colocate",
    ),
    Setting(
        "local_rank",
        "POSEIDON_LOCAL_RANK",
        "",
        "0",
        "worker: index among the workers of its host (picks the GPU); falls back to LOCAL_RANK",
    ),
)

_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_bytes(text: str, name: str = "value") -> int:
    """'4194304', '4M', '4MiB', '4MB', '64k' -> bytes (units are binary)."""
    s = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = _UNITS.get(s[-1:], 1)
    number = s[:-1] if s[-1:] in _UNITS else s
    try:
        value = int(number) * scale
    except ValueError:
        raise SettingError(
            f"{name}={text!r} is not a byte count (e.g. 4194304, 4M, 4MiB)"
        ) from None
    if value < 0:
        raise SettingError(f"{name}={text!r} is negative")
    return value


def parse_int(text: str, name: str = "value") -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise SettingError(f"{name}={text!r} is not an integer") from None


def parse_bool(text: str, name: str = "value") -> bool:
    s = text.strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise SettingError(f"{name}={text!r} is not a boolean (1/0, true/false)")


def parse_layer_schemes(text: str, name: str = "value") -> dict[str, str]:
    """'fc7=ps, fc8=sfb' -> {'fc7': 'ps', 'fc8': 'sfb'}; '' -> {}."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        layer, _, scheme = item.partition("=")
        scheme = scheme.strip().lower()
        if not layer.strip() or scheme not in LAYER_SCHEMES:
            raise SettingError(
                f"{name}={text!r}: want layer=scheme pairs separated by commas, scheme one of "
                f"{', '.join(LAYER_SCHEMES)} (e.g. fc7=ps,fc8=ps)"
            )
        out[layer.strip()] = scheme
    return out


def parse_compression(text: str, name: str = "value") -> str:
    """'none', 'bf16', 'powersgd', 'powersgd:R', 'auto' or 'auto:R' (R >= 1), lower-cased."""
    value = text.strip().lower()
    kind, colon, rank = value.partition(":")
    ranked = ("powersgd", "auto")
    if kind not in COMPRESSIONS or (colon and kind not in ranked):
        raise SettingError(f"{name}={text!r}: want one of {', '.join(COMPRESSIONS)}, "
                           "powersgd:R or auto:R (R, the PowerSGD rank, >= 1)")  # fmt: skip
    if colon:
        parse_positive(rank, f"{name}'s rank ({text!r})")
    return value


def compression_of(name: str) -> Any:
    """`_C.Compression` of "none", "bf16", "powersgd" or "auto" (a kind of allowance())."""
    from poseidon import _C

    return getattr(_C.Compression, name.upper())


def parse_positive(text: str, name: str) -> int:
    value = parse_int(text, name)
    if value < 1:
        raise SettingError(f"{name}={text!r}: want an integer >= 1")
    return value


def parse_rate(text: str, name: str) -> float:
    """A rate >= 0 as a plain number ('2.5e12'); 0 = unknown."""
    try:
        value = float(text.strip())
    except ValueError:
        raise SettingError(f"{name}={text!r}: want a number (e.g. 2.5e12); 0 = unknown") from None
    if not value >= 0 or value == float("inf"):
        raise SettingError(f"{name}={text!r}: want a finite number >= 0; 0 = unknown")
    return value


def parse_link_rate(text: str, name: str) -> float:
    """'100mbit', '10gbit', '10GbE', or 0 (unknown) -> bits per second."""
    from poseidon.experiments.units import parse_bandwidth

    if text.strip() in ("", "0"):
        return 0.0
    try:
        return parse_bandwidth(text)
    except ValueError as e:
        raise SettingError(f"{name}: {e}") from None


AUTO_WORKERS_PER_HOST = 0  # `auto`, resolved by Config.from_env from the launcher's variables


def parse_workers_per_host(text: str, name: str) -> int:
    """'auto' (AUTO_WORKERS_PER_HOST) or a count >= 1."""
    if text.strip().lower() == "auto":
        return AUTO_WORKERS_PER_HOST
    return parse_positive(text, name)


def _choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(text: str, name: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise SettingError(f"{name}={text!r}: want one of {', '.join(options)}")
        return value

    return parse


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "role": _choice(ROLES),
    "rank": parse_int,
    "num_workers": parse_int,
    "num_servers": parse_int,
    "coordinator": lambda text, name: text.strip(),
    "token": lambda text, name: text,
    "listen": lambda text, name: text.strip(),
    "host": lambda text, name: text.strip(),
    "transport": _choice(TRANSPORTS),
    "chunk_bytes": parse_bytes,
    "max_frame_bytes": parse_bytes,
    "timeout_ms": parse_int,
    "heartbeat_interval_ms": parse_int,
    "heartbeat_timeout_ms": parse_int,
    "handshake_timeout_ms": parse_int,
    "comm_threads": parse_int,
    "socket_buffer_bytes": parse_bytes,
    "notsent_lowat_bytes": parse_bytes,
    "scheme": _choice(SCHEMES),
    "layer_schemes": parse_layer_schemes,
    "compression": parse_compression,
    "powersgd_rank": parse_positive,
    "link_rate": parse_link_rate,
    "local_rate": parse_link_rate,
    "workers_per_host": parse_workers_per_host,
    "gemm_rate": parse_rate,
    "memory_rate": parse_rate,
    "verbose": parse_bool,
    "sync": _choice(SYNC_MODES),
    "bucket_cap_bytes": parse_bytes,
    "first_bucket_bytes": parse_bytes,
    "timeline": lambda text, name: text.strip(),
    "colocate": parse_bool,
    "local_rank": parse_int,
    "local_server": lambda text, name: text.strip(),
}


def _check_machine(cfg: Config, env: Mapping[str, str]) -> None:
    """Where the launcher counts G workers on this host, they must be ranks m·G .. m·G+G−1 in
    order, or the machine's local group would span hosts and never form."""
    g = cfg.workers_per_host
    if g == 1 or not any(env.get(n, "").strip() for n in LAUNCHER_LOCAL_SIZE):
        return
    if _local_size(env) == g and cfg.local_rank != cfg.rank % g:
        raise SettingError(
            f"worker {cfg.rank} has local rank {cfg.local_rank}, but with {g} workers per host "
            f"machine {cfg.rank // g}'s workers are ranks {cfg.rank // g * g}.."
            f"{cfg.rank // g * g + g - 1} in order (local rank = rank mod {g}): start ranks "
            "host by host, as torchrun, srun's block distribution and mpirun --map-by slot do"
        )


def _local_size(env: Mapping[str, str]) -> int:
    """POSEIDON_WORKERS_PER_HOST=auto: the launcher's count of this machine's workers."""
    for name in LAUNCHER_LOCAL_SIZE:
        if env.get(name, "").strip():
            # SLURM writes "4(x2)" for "4 on each of 2 nodes" and "2(x3),1" where they differ:
            # the first machine's count (uneven machines then fail the divisor check).
            return parse_positive(env[name].split("(", 1)[0].split(",", 1)[0], name)
    raise SettingError(
        "POSEIDON_WORKERS_PER_HOST=auto, but no launcher says how many workers share this "
        f"machine (none of {', '.join(LAUNCHER_LOCAL_SIZE)} is set): give the count"
    )


def local_address_towards(host: str) -> str:
    """The local IP the kernel would use to reach `host` (no packet is sent)."""
    if host in ("", "localhost") or host.startswith("127."):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


@dataclass
class Config:
    """Every setting of one node; see SETTINGS for meanings and units."""

    role: str = "worker"
    rank: int = 0
    num_workers: int = 1
    num_servers: int = 1
    workers_per_host: int = 1
    coordinator: str = f"127.0.0.1:{DEFAULT_COORDINATOR_PORT}"
    token: str = ""
    listen: str = ""  # "" -> "<host>:0"
    host: str = ""  # "" -> the address that reaches the coordinator
    transport: str = "tcp"
    chunk_bytes: int = 1 << 20
    max_frame_bytes: int = 64 << 20
    timeout_ms: int = 120000
    heartbeat_interval_ms: int = 500
    heartbeat_timeout_ms: int = 5000
    handshake_timeout_ms: int = 5000
    comm_threads: int = 2
    socket_buffer_bytes: int = 0
    notsent_lowat_bytes: int = 256 << 10
    scheme: str = "auto"
    layer_schemes: dict[str, str] = dataclasses.field(default_factory=dict)
    compression: str = "none"  # may carry its rank: "powersgd:8" (allowance() splits it)
    powersgd_rank: int = DEFAULT_POWERSGD_RANK
    link_rate: float = 0.0  # bits per second; 0 = unknown
    local_rate: float = 0.0  # bits per second between a machine's workers; 0 = unknown
    gemm_rate: float = 0.0  # flop/s
    memory_rate: float = 0.0  # bytes/s
    verbose: bool = False
    sync: str = "poseidon"
    bucket_cap_bytes: int = 25 << 20
    first_bucket_bytes: int = 1 << 20
    timeline: str = ""
    colocate: bool = False
    local_rank: int = 0
    # Not an environment setting: the in-process address of a shard this
    # worker's own process runs (poseidon._C.KVServer.local_address).
    local_server: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Config:
        """Settings from `env` (default os.environ), then `overrides` (None = not given).

        Raises SettingError naming the variable whose value cannot be parsed.
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for s in SETTINGS:
            if s.env in env:
                values[s.field] = _PARSERS[s.field](env[s.env], s.env)
        if "token" not in values and env.get("POSEIDON_TOKEN_FILE"):
            path = env["POSEIDON_TOKEN_FILE"]
            try:
                with open(path, encoding="utf-8") as f:
                    values["token"] = f.read().strip()
            except OSError as e:
                raise SettingError(f"POSEIDON_TOKEN_FILE={path!r}: {e.strerror}") from None
        if "coordinator" not in values and env.get("MASTER_ADDR"):
            port = parse_int(
                env.get("MASTER_PORT", str(DEFAULT_COORDINATOR_PORT - 1)), "MASTER_PORT"
            )
            values["coordinator"] = f"{env['MASTER_ADDR']}:{port + 1}"
        for key, value in overrides.items():
            if value is None:
                continue
            if key not in _PARSERS:
                raise SettingError(f"unknown setting {key!r}")
            values[key] = _PARSERS[key](value, key) if isinstance(value, str) else value
        role = values.get("role", cls.role)
        if role == "worker":
            # Launchers name workers; servers and the coordinator come from POSEIDON_*.
            for field, names, own in (
                ("rank", LAUNCHER_RANK, "POSEIDON_RANK"),
                ("num_workers", LAUNCHER_SIZE, "POSEIDON_NUM_WORKERS"),
                ("local_rank", LAUNCHER_LOCAL_RANK, "POSEIDON_LOCAL_RANK"),
            ):
                if field in values or own in env:
                    continue
                for name in names:
                    if name in env:
                        values[field] = parse_int(env[name], name)
                        break
        if values.get("workers_per_host") == AUTO_WORKERS_PER_HOST:
            values["workers_per_host"] = _local_size(env)
        cfg = cls(**values)
        cfg.check()
        if cfg.role == "worker":
            _check_machine(cfg, env)
        return cfg

    def check(self) -> None:
        """Python-side checks (the C++ side validates again in to_native)."""
        if self.role not in ROLES:
            raise SettingError(f"role={self.role!r}: want one of {', '.join(ROLES)}")
        for name in ("num_workers", "num_servers"):
            if getattr(self, name) < 1:
                raise SettingError(f"{name}={getattr(self, name)} (want >= 1)")
        if self.powersgd_rank < 1:
            raise SettingError(f"powersgd_rank={self.powersgd_rank} (want >= 1)")
        self.allowance()  # raises on a bad compression or a rank given twice, differently
        g = self.workers_per_host
        if g < 1 or self.num_workers % g:
            raise SettingError(f"workers_per_host={g}: want a divisor of the job's "
                               f"{self.num_workers} workers (num_workers)")  # fmt: skip

        limit = self.num_workers if self.role == "worker" else self.num_servers
        if self.role != "coordinator" and not 0 <= self.rank < limit:
            raise SettingError(
                f"rank={self.rank} for a {self.role} (want 0..{limit - 1}; "
                f"num_{self.role}s={limit})"
            )

    def allowance(self) -> tuple[str, int]:
        """(compression kind, PowerSGD rank): "powersgd:8" is ("powersgd", 8); a rank in
        both POSEIDON_COMPRESSION and POSEIDON_POWERSGD_RANK must agree."""
        kind, _, rank_text = parse_compression(self.compression, "compression").partition(":")
        if not rank_text:
            return kind, self.powersgd_rank
        rank = int(rank_text)
        if self.powersgd_rank not in (rank, DEFAULT_POWERSGD_RANK):
            raise SettingError(f"compression={self.compression!r} and powersgd_rank="
                               f"{self.powersgd_rank} name different ranks")  # fmt: skip
        return kind, rank

    @property
    def colocated_shards(self) -> int:
        """How many shards run inside a worker's process: shard r inside the process of
        worker r (with several workers per host: of machine r's leader, worker r·G), for r
        below this (more workers than shards: the rest have none beside them)."""
        machines = self.num_workers // self.workers_per_host
        return min(machines, self.num_servers) if self.colocate else 0

    def colocated_shard(self) -> int | None:
        """The shard this worker's process runs, if any."""
        g = self.workers_per_host
        if self.rank % g or self.rank // g >= self.colocated_shards:
            return None
        return self.rank // g

    @property
    def listen_address(self) -> str:
        if self.listen:
            return self.listen
        if self.transport == "inproc":
            return "inproc://"
        host = self.host or local_address_towards(self.coordinator.rpartition(":")[0])
        return f"{host}:0"

    def rates(self) -> Any:
        """The cost model's `_C.Rates` (unknown ones 0). A link carries its rate each way at
        once (full duplex) and the model counts bytes sent + received, so it moves twice the
        rate's bytes of them per second (docs/communication.md §5)."""
        from poseidon import _C

        return _C.Rates(2 * self.link_rate / 8, self.gemm_rate, self.memory_rate,
                        2 * self.local_rate / 8)  # fmt: skip

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    def to_native(self) -> Any:
        """A validated poseidon._C.Config (raises poseidon._C.ConfigError)."""
        from poseidon import _C

        c = _C.Config()
        c.role = {"worker": _C.Role.WORKER, "server": _C.Role.SERVER}.get(
            self.role, _C.Role.COORDINATOR
        )
        c.rank = self.rank
        c.num_workers = self.num_workers
        c.num_servers = self.num_servers
        c.workers_per_machine = self.workers_per_host
        c.coordinator = self.coordinator
        c.token = self.token
        c.listen = self.listen_address
        c.transport = self.transport
        c.local_server = self.local_server
        c.chunk_bytes = self.chunk_bytes
        c.max_frame_bytes = self.max_frame_bytes
        c.timeout_ms = self.timeout_ms
        c.heartbeat_interval_ms = self.heartbeat_interval_ms
        c.heartbeat_timeout_ms = self.heartbeat_timeout_ms
        c.handshake_timeout_ms = self.handshake_timeout_ms
        c.comm_threads = self.comm_threads
        c.socket_buffer_bytes = self.socket_buffer_bytes
        c.notsent_lowat_bytes = self.notsent_lowat_bytes
        c.scheme = {"ps": _C.SchemeChoice.PS, "sfb": _C.SchemeChoice.SFB}.get(
            self.scheme, _C.SchemeChoice.AUTO
        )
        kind, rank = self.allowance()
        c.compression = compression_of(kind)
        c.powersgd_rank = rank
        c.rates = self.rates()
        c.verbose = self.verbose
        c.validate()
        return c
