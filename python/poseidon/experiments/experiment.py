"""`poseidon experiment`: check the request, then run its cells and report them.

Everything that can be wrong with the input is checked before anything starts (model,
profile against the net, modes, nodes, bandwidth, host file, root for emulation), each with
one line naming what is wrong. While it runs, a line per cell reports progress; the JSON is
rewritten after every cell, so an interrupted sweep keeps what it measured; Ctrl-C stops
the running job and removes the namespaces.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass

from poseidon.config import SYNC_MODES
from poseidon.experiments.emulation import DEFAULT_QUEUE_MS, EmulationError, LinkLosses
from poseidon.experiments.machine_load import other_load_note
from poseidon.experiments.predict import EXACT, PAPER_LAYOUT, Compression, Layout
from poseidon.experiments.report import Cell, Results, write_outputs
from poseidon.experiments.run import (
    DEFAULT_CHUNK_BYTES,
    CellJob,
    ExperimentError,
    MemoryWatch,
    Scaling,
    cell_timeout_ms,
    choose_byte_scale,
    choose_dilation,
    describe_scaling,
    host_load_note,
    port_for,
    run_cell,
)
from poseidon.experiments.units import (
    check_chunk_bytes,
    parse_bandwidth,
    parse_list,
    parse_nodes,
)

MODES = (*SYNC_MODES, "poseidon-tuned")
QUICK_NODES = [1, 2]


@dataclass
class ExperimentRequest:
    model: str
    prototxt: str
    profile_path: str | None
    profile: object | None  # poseidon.experiments.profile.Profile
    nodes: list[int]
    modes: list[str]
    bandwidth_bps: float | None
    emulate: bool
    hosts: list[str]
    ssh: list[str] | None
    batch: int
    iterations: int
    warmup: int
    byte_scale: int
    dilation: float | None  # None: chosen per node count (replay on emulated nodes only)
    device: str
    threads: int
    timeline: str | None
    output: str | None
    plot: str | None
    compression: Compression = EXACT
    workers_per_node: int = 1
    queue_ms: float = DEFAULT_QUEUE_MS  # --emulate: each link's tc queue (emulation.py)
    gso: bool = True  # --emulate: super-packets on the links (emulation.py, Note [packets...])
    chunk_bytes: int = DEFAULT_CHUNK_BYTES  # the real cluster's PS chunk (÷ byte scale replayed)
    repeat: int = 1  # runs of each cell; the JSON keeps the median one (median_run)

    def scaling_for(self, nodes: int) -> Scaling:
        """The replay's dilation and byte scale for a cell (Note [dilation and byte scale]
        in run.py); real compute and real links run at their own speed."""
        if self.profile is None or not self.emulate:
            return Scaling(1.0, 1)
        dilation = self.dilation or choose_dilation(
            nodes, self.bandwidth_bps, self.byte_scale, self.profile, self.workers_per_node,
            gso=self.gso,
        )  # fmt: skip
        return Scaling(dilation, self.byte_scale)

    def layouts(self, mode: str) -> list[Layout]:
        """A mode's cells per node count: the paper's layout; with several workers per node,
        local aggregation and the flat layout (all-reduce: one ring, no layout of its own)."""
        g = self.workers_per_node
        if g == 1:
            return [PAPER_LAYOUT]
        return [Layout(g, True)] if mode == "allreduce" else [Layout(g, True), Layout(g, False)]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExperimentRequest:
        """Validate everything; ValueError with one line on the first problem."""
        from poseidon.experiments.resolve import resolve_model, resolve_profile

        nodes = QUICK_NODES if args.quick else parse_nodes(args.nodes)
        modes = parse_list(args.modes, MODES, "mode")
        iterations = 2 if args.quick else args.iterations
        warmup = 1 if args.quick else args.warmup
        if iterations < 1 or warmup < 0 or args.threads < 1 or args.repeat < 1:
            raise ValueError("--iterations, --repeat and --threads must be >= 1, --warmup >= 0")
        bandwidth = parse_bandwidth(args.bandwidth) if args.bandwidth else None
        label, prototxt = resolve_model(args.model)
        if not args.emulate and not args.hostfile:
            raise ValueError(
                "say where to run: --emulate (namespaces on this machine, root) or "
                "--hostfile (a real cluster); `poseidon predict` predicts without "
                "running"
            )
        hosts: list[str] = []
        if args.hostfile:
            hosts = _read_hosts(args.hostfile, max(nodes))
        if args.emulate and bandwidth is None:
            raise ValueError("--emulate needs --bandwidth, the link speed of each node")
        if not args.profile and (args.dilation is not None or args.byte_scale is not None):
            raise ValueError(
                "--dilation and --byte-scale apply to replayed compute (--profile); real "
                "compute runs at its own speed"
            )
        profile_path = profile = None
        batch = args.batch
        if args.profile:
            profile_path = resolve_profile(args.profile, label)
            profile, batch = check_profile(profile_path, prototxt, args.batch)
        elif batch is None:
            from caffe.formats.proto_io import read_net_param
            from poseidon.experiments.netspec import data_batch

            batch = data_batch(read_net_param(prototxt), prototxt)
        if "poseidon-tuned" in modes and (profile is None or bandwidth is None):
            raise ValueError(
                "mode poseidon-tuned chooses its plan with the predictor: it needs --profile "
                "and --bandwidth"
            )
        if args.batch is not None and args.batch < 1:
            raise ValueError(f"--batch {args.batch} (want >= 1)")
        per_node = args.workers_per_node
        if per_node < 1:
            raise ValueError(f"--workers-per-node {per_node} (want >= 1)")
        if per_node > 1 and "poseidon-tuned" in modes:
            raise ValueError("mode poseidon-tuned plans the paper's layout: one worker per node")
        if args.gso is not None and not args.emulate:
            raise ValueError("--gso sets the emulated links' packets: it needs --emulate")
        gso = args.gso != "off"
        byte_scale = 1
        if profile is not None and args.emulate:
            byte_scale = choose_byte_scale(profile, nodes, bandwidth, per_node, gso)
        if args.dilation is not None and args.dilation <= 0:
            raise ValueError(f"--dilation {args.dilation} (want > 0)")
        if args.byte_scale is not None:
            byte_scale = args.byte_scale
            if byte_scale < 1 or byte_scale & (byte_scale - 1):
                raise ValueError(f"--byte-scale {byte_scale} (want a power of two >= 1)")
        queue_ms = DEFAULT_QUEUE_MS
        if args.queue_ms is not None:
            if not args.emulate:
                raise ValueError("--queue-ms sizes the emulated links' queues: it needs --emulate")
            if not 0 < args.queue_ms < math.inf:
                raise ValueError(f"--queue-ms {args.queue_ms:g} (want a number of ms > 0)")
            queue_ms = args.queue_ms
        chunk_bytes = DEFAULT_CHUNK_BYTES
        if args.chunk_bytes is not None:
            chunk_bytes = check_chunk_bytes(args.chunk_bytes)
        if args.emulate:
            from poseidon.experiments.emulation import check_can_emulate

            check_can_emulate()
        compression = _compression(args, bandwidth)
        if args.timeline and not os.path.isdir(args.timeline):
            raise ValueError(f"--timeline {args.timeline}: no such directory")
        for path in (args.output, args.plot):
            directory = os.path.dirname(os.path.abspath(path)) if path else ""
            if path and not os.path.isdir(directory):
                raise ValueError(f"cannot write {path}: no directory {directory}")
        return cls(
            model=label, prototxt=prototxt, profile_path=profile_path, profile=profile,
            nodes=nodes, modes=modes, bandwidth_bps=bandwidth, emulate=args.emulate,
            hosts=hosts, ssh=shlex.split(args.ssh) if args.ssh else None, batch=batch,
            iterations=iterations, warmup=warmup, byte_scale=byte_scale,
            dilation=args.dilation, device=args.device,
            threads=args.threads, timeline=args.timeline, output=args.output, plot=args.plot,
            compression=compression, workers_per_node=per_node, queue_ms=queue_ms,
            gso=gso, chunk_bytes=chunk_bytes, repeat=args.repeat,
        )  # fmt: skip


def _compression(args: argparse.Namespace, bandwidth: float | None) -> Compression:
    """--compression and --powersgd-rank, checked as POSEIDON_COMPRESSION would be; a lossy
    allowance is planned by time, which needs the link."""
    from poseidon.config import Config, parse_compression, parse_positive

    allowed = Config(compression=parse_compression(args.compression, "--compression"),
                     powersgd_rank=parse_positive(str(args.powersgd_rank),
                                                  "--powersgd-rank")).allowance()  # fmt: skip
    compression = Compression(*allowed)
    if compression.kind != "none" and bandwidth is None:
        raise ValueError(f"--compression {args.compression} plans by time on the link: it "
                         "needs --bandwidth")  # fmt: skip
    return compression


def _read_hosts(path: str, needed: int) -> list[str]:
    from poseidon.launch import parse_hostfile

    try:
        hosts = parse_hostfile(path)
    except OSError as e:
        raise ValueError(f"cannot read host file {path}: {e.strerror}") from None
    names = [h.name for h in hosts]
    if len(names) < needed:
        raise ValueError(
            f"host file {path} lists {len(names)} host(s); --nodes asks for "
            f"{needed} (one node per host)"
        )
    return names


def check_profile(path: str, prototxt: str, batch: int | None):  # type: ignore[no-untyped-def]
    """The profile, read and checked against the net (layer names, batch)."""
    from caffe.formats.proto_io import read_net_param
    from poseidon.experiments.netspec import set_batch
    from poseidon.experiments.profile import load_profile
    from poseidon.experiments.replay import train_net

    profile = load_profile(path)
    if batch is not None and batch != profile.batch:
        raise ValueError(
            f"--batch {batch}, but profile {profile.label()} was measured at batch {profile.batch}"
        )
    try:
        net = read_net_param(prototxt)
    except Exception as e:
        raise ValueError(f"cannot read {prototxt}: {e}") from None
    set_batch(net, profile.batch, prototxt)
    names = [layer.name for layer in train_net(net).layer]
    profile.check_matches(names, profile.batch, prototxt)
    return profile, profile.batch


def run_experiment(request: ExperimentRequest) -> int:
    """Run every cell; print the table; write JSON and figure. Exit status 0, 1 when a cell
    failed, 130 on Ctrl-C (after cleaning up)."""
    results = Results(
        model=request.model,
        profile=os.path.basename(request.profile_path) if request.profile_path else "",
        bandwidth_bps=request.bandwidth_bps,
        batch=request.batch,
        kind="emulated" if request.emulate else "cluster",
        workers_per_node=request.workers_per_node,
    )
    results.info = {
        "iterations": request.iterations,
        "warmup": request.warmup,
        "command": "poseidon " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
    }
    if request.repeat > 1:
        results.info["repeat"] = request.repeat
    if request.compression.kind != "none":
        c = request.compression
        results.info["compression"] = f"{c.kind}:{c.powersgd_rank}"
    dilations = {p: request.scaling_for(p).dilation for p in request.nodes}
    if request.emulate and request.profile is not None:
        results.info["byte_scale"] = request.byte_scale
        results.info["dilation"] = request.dilation or "per node count (each cell's dilation)"
        results.info["scaling"] = describe_scaling(request.byte_scale, dilations)
        # The dilation rule's pick depends on the cores the replay shares (Note [host load]):
        # bench/predictor_vs_emulation.py recomputes it from this.
        results.info["cores"] = os.cpu_count() or 1
    if request.emulate:
        results.info["queue_ms"] = request.queue_ms
        results.info["gso"] = "on" if request.gso else "off"  # files without it: on
    results.info["chunk_bytes"] = request.chunk_bytes
    cells = [(mode, layout, p) for p in request.nodes for mode in request.modes
             for layout in request.layouts(mode)]  # fmt: skip
    separate_base = 1 not in request.nodes or request.workers_per_node > 1
    if separate_base and request.profile is not None:
        results.info["speedup_base"] = ("the predicted one-worker time (no cell of one worker "
                                        "was run)")  # fmt: skip
    started = time.monotonic()
    hosts_context = _hosts_context(request)
    try:
        with MemoryWatch() as memory, hosts_context as emulated:
            hosts = emulated.addresses if emulated is not None else request.hosts
            ssh = [emulated.ssh_wrapper()] if emulated is not None else request.ssh
            for number, (mode, layout, nodes) in enumerate(cells, 1):
                job, sync = _prepare_cell(request, mode, nodes, layout)
                if emulated is not None:
                    emulated.set_rate(request.bandwidth_bps / job.scaling.dilation
                                      / job.scaling.byte_scale)  # fmt: skip
                name = layout.label(mode)
                label = f"{request.model} {name} on {nodes} node(s)"
                if layout.per_node > 1:
                    label += f" of {layout.per_node} workers"
                _progress(f"[{number}/{len(cells)}] {label} ...")
                runs = []
                for run in range(request.repeat):  # each run its own port
                    before = emulated.losses() if emulated is not None else None
                    port = port_for(number * request.repeat + run)
                    result = run_cell(job, sync, nodes, hosts, ssh, port, per_node=layout.per_node,
                                      aggregate=layout.aggregate)  # fmt: skip
                    lost_now = emulated.losses() - before if before is not None else None
                    runs.append((result, lost_now))
                cell, losses = median_run(runs)
                lost = _record_losses(cell, losses) if losses is not None else ""
                cell.mode = name
                for setting in ("POSEIDON_LAYER_SCHEMES", "POSEIDON_COMPRESSION"):
                    if setting in job.extra_env:
                        cell.extra[setting[len("POSEIDON_") :].lower()] = job.extra_env[setting]
                if request.emulate and request.profile is not None:
                    cell.extra["dilation"] = job.scaling.dilation
                results.add(cell)
                if separate_base and request.profile is not None:
                    results.update_speedups(_predicted_single_node(request))
                results.info["peak_memory_bytes"] = memory.peak
                results.info["wall_s"] = round(time.monotonic() - started, 1)
                speedup = f", {cell.speedup:.2f}x" if cell.speedup else ""
                _progress(
                    f"[{number}/{len(cells)}] {label}: {cell.iteration_s:.4f} s/iteration, "
                    f"{cell.images_per_s:.1f} images/s{speedup} ({cell.extra['job_s']:.0f} s"
                    f"{lost})"
                )
                if request.emulate and request.profile is not None:
                    cores = os.cpu_count() or 1
                    notes = (host_load_note(sync, cell.extra.get("host_load", 0.0),
                                            job.scaling.dilation, cores),
                             other_load_note(cell.extra.get("other_load"), cores))  # fmt: skip
                    for note in notes:
                        if note:
                            _progress(f"    {note}")
                if request.output:
                    results.save(request.output)
    except KeyboardInterrupt:
        print(
            "poseidon experiment: interrupted; every job stopped and the emulated hosts removed",
            file=sys.stderr,
        )
        _finish(results, request)
        return 130
    except (ExperimentError, EmulationError) as e:
        print(f"poseidon experiment: {e}", file=sys.stderr)
        _finish(results, request)
        return 1
    _finish(results, request)
    return 0


def median_run(runs: list[tuple[Cell, LinkLosses | None]]) -> tuple[Cell, LinkLosses | None]:
    """Of a cell's runs (each with what its links lost), the one of median iteration time
    (the faster of the middle two for an even count), with every run's time in `runs_s`
    when there were several: the spread a single run of the cell would have hidden."""
    ordered = sorted(runs, key=lambda run: run[0].iteration_s)
    cell, losses = ordered[(len(ordered) - 1) // 2]
    if len(runs) > 1:
        cell.extra["runs_s"] = [run.iteration_s for run, _ in runs]
    return cell, losses


def _finish(results: Results, request: ExperimentRequest) -> None:
    if results.cells:
        write_outputs(results, request.output, request.plot)


def _predicted_single_node(request: ExperimentRequest) -> dict[str, float]:
    """Each mode's predicted time on one worker (no link involved: the profile's compute),
    the base of the speed-ups when the run has no cell of one worker."""
    from poseidon.experiments.predict import Link, predict_cell

    link = Link(request.bandwidth_bps or 1e9)
    return {
        mode: predict_cell(request.profile, "poseidon" if mode == "poseidon-tuned" else mode, 1,
                           link).iteration_s
        for mode in request.modes
    }  # fmt: skip


def _prepare_cell(request: ExperimentRequest, mode: str, nodes: int,
                  layout: Layout = PAPER_LAYOUT) -> tuple[CellJob, str]:  # fmt: skip
    """The cell's job and the sync mode its workers run: poseidon-tuned is Poseidon with the
    predictor's per-layer schemes for this node count and link (tune.py)."""
    from poseidon.experiments.predict import Link, predict_cell
    from poseidon.experiments.tune import format_layer_schemes, tune_layer_schemes

    job = _cell_job(request, request.scaling_for(nodes))
    sync = mode
    if request.timeline:
        trace = f"{layout.label(mode)}-P{nodes}.{{rank}}.json"
        job.extra_env["POSEIDON_TIMELINE"] = os.path.join(os.path.abspath(request.timeline), trace)
    if request.profile is not None and request.bandwidth_bps:
        link = Link(request.bandwidth_bps, _goodput(request))
        if mode == "poseidon-tuned":
            guess, schemes = tune_layer_schemes(request.profile, nodes, link,
                                                request.chunk_bytes)  # fmt: skip
            job.extra_env["POSEIDON_LAYER_SCHEMES"] = format_layer_schemes(schemes)
            sync = "poseidon"
        else:
            guess = predict_cell(request.profile, mode, nodes, link, request.chunk_bytes,
                                 compression=request.compression, layout=layout)  # fmt: skip
        job.timeout_ms = cell_timeout_ms(guess.iteration_s, job)
    if request.compression.kind != "none" and sync == "poseidon":
        job.extra_env.update(_compression_env(request))
    return job, sync


def _compression_env(request: ExperimentRequest) -> dict[str, str]:
    """The settings of a Poseidon cell whose plan may pick lossy schemes: the allowance,
    and what the coordinator plans by time with — the link's TCP goodput each way and,
    replayed, the profile's GEMM rate, as the predictor's plan has them (the replay's layers
    declare the profile's times: replay.py; real compute measures its own)."""
    from poseidon.experiments.profile_layout import gemm_rate

    c = request.compression
    assert request.bandwidth_bps is not None  # _compression() asks for it
    goodput = _goodput(request)
    env = {
        "POSEIDON_COMPRESSION": c.kind,
        "POSEIDON_POWERSGD_RANK": str(c.powersgd_rank),
        "POSEIDON_LINK_RATE": f"{request.bandwidth_bps * goodput:.0f}bit",
    }
    if request.profile is not None:
        env["POSEIDON_GEMM_RATE"] = repr(gemm_rate(request.profile, c.powersgd_rank))
    return env


def _goodput(request: ExperimentRequest) -> float:
    """TCP's payload share of the cells' links: the emulated token buckets' or Ethernet's."""
    from poseidon.experiments.emulation import TCP_GOODPUT_TBF
    from poseidon.experiments.predict import TCP_GOODPUT_ETHERNET

    return TCP_GOODPUT_TBF if request.emulate else TCP_GOODPUT_ETHERNET


def _cell_job(request: ExperimentRequest, scaling: Scaling) -> CellJob:
    return CellJob(
        prototxt=request.prototxt,
        batch=request.batch,
        iterations=request.iterations,
        warmup=request.warmup,
        profile_path=request.profile_path,
        scaling=scaling,
        device=request.device,
        threads=request.threads,
        chunk_bytes=request.chunk_bytes,
    )


def _hosts_context(request: ExperimentRequest):  # type: ignore[no-untyped-def]
    import contextlib

    if not request.emulate:
        return contextlib.nullcontext(None)
    from poseidon.experiments.emulation import EmulatedHosts

    return EmulatedHosts(max(request.nodes), None, queue_ms=request.queue_ms, gso=request.gso)


def _record_losses(cell: Cell, losses: LinkLosses) -> str:
    """Put what the cell's links lost into its JSON (Note [link losses]); the words for its
    progress line ("" when nothing was dropped)."""
    cell.extra["dropped_out"] = losses.dropped_out
    cell.extra["dropped_in"] = losses.dropped_in
    cell.extra["retransmitted_segments"] = losses.retransmitted
    if not (losses.dropped_out or losses.dropped_in):
        return ""
    return f", packets dropped: {losses.dropped_out} leaving hosts, {losses.dropped_in} entering"


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
