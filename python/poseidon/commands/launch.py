"""Start a whole job: the coordinator, P2 KV-store shards and P1 workers running
COMMAND (e.g. `caffe train --solver S`), on this machine or, with --hostfile, over ssh.
Each worker learns its role and rank from POSEIDON_* variables; output is prefixed by
role and rank; the exit status is the job's; Ctrl-C stops every process."""

from __future__ import annotations

import argparse

HELP = "start coordinator, shards and workers of a job with one command"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from poseidon.config import SCHEMES, SYNC_MODES

    p.add_argument("-n", "--workers", type=int, required=True, help="P1, number of workers")
    p.add_argument("-s", "--servers", type=int, help="P2, number of shards (default: P1, or "
                   "one per host with --hostfile)")  # fmt: skip
    p.add_argument("--sync", choices=SYNC_MODES, default="poseidon",
                   help="ps-nooverlap | wfbp | poseidon (WFBP + HybComm, default) | allreduce "
                   "(the DDP-style baseline: workers only, no coordinator or shards)")  # fmt: skip
    p.add_argument("--scheme", choices=SCHEMES, default="auto",
                   help="with --sync poseidon: auto (BestScheme), or force ps / sfb")  # fmt: skip
    p.add_argument("--compression",
                   help="with --sync poseidon: lossy schemes the cost model may pick per "
                   "layer: none (default), bf16, powersgd[:R], auto[:R] "
                   "(POSEIDON_COMPRESSION)")  # fmt: skip
    p.add_argument("--powersgd-rank", type=int,
                   help="PowerSGD's rank, default 4 (POSEIDON_POWERSGD_RANK)")  # fmt: skip
    p.add_argument("--workers-per-host", default="1", metavar="G",
                   help="G workers per machine sum their gradients inside it and only the "
                   "first talks to the network (local aggregation); `auto`: the host file's "
                   "slots (every host the same), or all -n workers on this machine; default "
                   "1 (POSEIDON_WORKERS_PER_HOST)")  # fmt: skip
    p.add_argument("--no-colocate", dest="colocate", action="store_false",
                   help="run every shard as its own process (default: shard r inside worker r, "
                   "the paper's layout)")  # fmt: skip
    p.add_argument("--timeline", help="Chrome trace per worker; {rank} in the path is replaced")
    p.add_argument(
        "--log-dir", help="also write each process's raw output to DIR/<role>_<rank>.log"
    )
    p.add_argument("--hostfile", help="lines 'host [slots=N]': start the job over ssh")
    p.add_argument("--ssh", default="ssh -o BatchMode=yes", help="ssh command (with --hostfile)")
    p.add_argument("--port", type=int, default=0, help="coordinator port (0: any free port); "
                   "with --sync allreduce, MASTER_PORT (default 29500)")  # fmt: skip
    p.add_argument("--chunk-bytes", help="PS chunk size, default 1MiB (e.g. 4MiB)")
    p.add_argument("--timeout-ms", type=int, help="limit of every wait in the job")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ... run by each worker")


def run(args: argparse.Namespace) -> int:
    import shlex

    from poseidon.commands._common import fail
    from poseidon.config import SettingError, parse_compression, parse_positive
    from poseidon.launch import JobSpec, parse_hostfile, run_job
    from poseidon.timeline import per_worker_path

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        return fail("launch", "no command: poseidon launch -n N -- caffe train --solver S")
    try:
        hosts = parse_hostfile(args.hostfile) if args.hostfile else []
    except (OSError, ValueError) as e:
        return fail("launch", e)
    if args.workers < 1 or (args.servers is not None and args.servers < 1):
        return fail("launch", "-n and -s must be >= 1")
    try:
        per_host = workers_per_host(args.workers_per_host, args.workers, hosts)
    except SettingError as e:
        return fail("launch", e)
    servers = args.servers or (len(hosts) if hosts else args.workers // per_host)
    job_settings = {}
    try:
        if args.compression is not None:
            job_settings["POSEIDON_COMPRESSION"] = parse_compression(args.compression,
                                                                     "--compression")  # fmt: skip
        if args.powersgd_rank is not None:
            job_settings["POSEIDON_POWERSGD_RANK"] = str(
                parse_positive(str(args.powersgd_rank), "--powersgd-rank")
            )
    except SettingError as e:
        return fail("launch", e)
    timeline = args.timeline or ""
    if timeline:
        timeline = per_worker_path(timeline)
    spec = JobSpec(
        command=command, num_workers=args.workers, num_servers=servers, sync=args.sync,
        scheme=args.scheme, timeline=timeline, log_dir=args.log_dir or "",
        chunk_bytes=args.chunk_bytes or "", timeout_ms=args.timeout_ms,
        coordinator_port=args.port or (29600 if hosts else 0), hosts=hosts,
        ssh=shlex.split(args.ssh), colocate=args.colocate, extra_env=job_settings,
        workers_per_host=per_host,
    )  # fmt: skip
    return run_job(spec)


def workers_per_host(text: str, workers: int, hosts: list) -> int:  # type: ignore[type-arg]
    """--workers-per-host: a count, or `auto` (the host file's uniform slots, else every
    worker on this machine). Raises SettingError when it does not fit the job's layout."""
    from poseidon.config import SettingError, parse_positive

    if text.strip().lower() != "auto":
        g = parse_positive(text, "--workers-per-host")
    elif not hosts:
        g = workers
    elif len({h.slots for h in hosts}) == 1:
        g = hosts[0].slots
    else:
        raise SettingError("--workers-per-host auto: the host file's hosts have different "
                           "slots; give G")  # fmt: skip
    if workers % g:
        raise SettingError(f"--workers-per-host {g}: want a divisor of -n {workers}")
    if hosts:
        names = [h.name for h in hosts for _ in range(h.slots)][:workers]
        for m in range(workers // g):
            spread = sorted(set(names[m * g : (m + 1) * g]))
            if len(spread) != 1:
                raise SettingError(
                    f"--workers-per-host {g}: machine {m}'s workers (ranks {m * g}.."
                    f"{m * g + g - 1}) would run on {', '.join(spread)}: give each host a "
                    "multiple of G slots"
                )
    return g
