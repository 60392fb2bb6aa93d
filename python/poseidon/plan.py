"""The HybComm plan's inputs and its printed form.

`layer_specs` is the one derivation of the LayerSpecs a worker declares to the coordinator
(docs/design.md §4: what `poseidon plan` prints is the plan the job runs): every front end's
syncer (caffe/parallel/syncer.py's PoseidonSync, poseidon.torch's DistributedDataParallel)
declares its result, `poseidon plan` feeds the same result to `_C.make_plan` — the function
the coordinator runs on the declared specs — and prints that plan, and the predictor plans
its cells with it. Its input is a front end's layout (poseidon/sync/layout.py: which layers
are synchronised, their gradient ranges, their CommShape), so that every engine rule —
frozen layers, shared weights, InnerProduct's axis — is decided once, in the front end's
layout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from poseidon.sync.layout import KINDS, SyncLayer

# option -> _C.SchemeChoice; POSEIDON_SCHEME takes the first three, a layer any of them.
SCHEME_NAMES = {"auto": "AUTO", "ps": "PS", "sfb": "SFB", "bf16": "BF16", "powersgd": "POWERSGD"}


def scheme_choice(scheme: str) -> Any:
    """`_C.SchemeChoice` of "auto", "ps", "sfb", "bf16" or "powersgd"."""
    from poseidon import _C

    if scheme not in SCHEME_NAMES:
        raise ValueError(f"scheme {scheme!r}: want one of {', '.join(SCHEME_NAMES)}")
    return getattr(_C.SchemeChoice, SCHEME_NAMES[scheme])


def _native_kind(kind: str) -> Any:
    from poseidon import _C

    if kind not in KINDS:
        raise ValueError(f"layer kind {kind!r}: want one of {', '.join(KINDS)}")
    return {"FC": _C.LayerKind.FC, "conv": _C.LayerKind.CONV}.get(kind, _C.LayerKind.OTHER)


def layer_spec(layer_id: int, name: str, kind: str, m: int, n: int, k: int,
               num_floats: int, force: str = "auto", byte_scale: int = 1) -> Any:  # fmt: skip
    """One comm-core LayerSpec: an m×n weight and k samples per worker per iteration, in the
    cost model's names (docs/paper.md §4). `force` is "auto" (the cost model's pick among
    the schemes that serve the layer and the compression allows) or one scheme, which must
    serve the layer (ValueError otherwise: only an FC layer takes SFB, only an m×n weight
    with m, n >= 2 takes PowerSGD). `byte_scale`: a compute replay's stand-in, whose
    `num_floats` are 1/byte_scale of the real layer's (plan.h, Note [byte-scaled layers])."""
    from poseidon import _C

    native_kind = _native_kind(kind)
    choice = scheme_choice(force)
    if choice != _C.SchemeChoice.AUTO:
        scheme = getattr(_C.Scheme, SCHEME_NAMES[force])
        if not _C.scheme_applicable(scheme, native_kind, m, n, num_floats * byte_scale):
            serves = {"sfb": "only a fully-connected layer takes SFB",
                      "powersgd": "PowerSGD needs an m x n weight with m, n >= 2"}  # fmt: skip
            raise ValueError(f"layer {name!r} ({kind}, {m}x{n}) cannot take {force}: "
                             f"{serves.get(force, 'not applicable')}")  # fmt: skip
    return _C.LayerSpec(layer_id, name, native_kind, m, n, k, num_floats, choice, byte_scale)


BROADCAST_NAME = "(broadcast)"  # a unit of rank 0's weights, not a layer (sync/broadcast.py)
LOSSY = ("bf16", "powersgd")


def broadcast_spec(layer_id: int, floats: int) -> Any:
    """The LayerSpec of a broadcast unit `layer_id` of `floats` capacity: always SFB (a copy,
    never a sum) and moving nothing per iteration — K = 0: no bytes, no time in the cost
    model's schedule — so printed tables leave it out."""
    return layer_spec(layer_id, BROADCAST_NAME, "FC", floats, 1, 0, floats, "sfb")


def may_run_lossy(sync: str, compression: str, layer_schemes: Mapping[str, str]) -> bool:
    """Whether a job's plan may give a layer a lossy scheme (then a Caffe job broadcasts
    those layers' weights through a broadcast unit: a lossy wire cannot carry them)."""
    if sync != "poseidon":
        return False
    kind = compression.partition(":")[0]
    return kind != "none" or any(v in LOSSY for v in layer_schemes.values())


def layer_specs(
    layout: Sequence[SyncLayer],
    iter_size: int = 1,
    sync: str = "poseidon",
    scheme: str = "auto",
    layer_schemes: Mapping[str, str] | None = None,
    what: str = "layer schemes",
) -> list[Any]:
    """The LayerSpecs of a job's synchronised layers `layout` (a front end's layout of its
    model, in priority order) with the solver's iter_size, sync mode `sync`, POSEIDON_SCHEME
    `scheme` and the per-layer POSEIDON_LAYER_SCHEMES `layer_schemes`. Raises ValueError,
    starting with `what`, when `layer_schemes` names a layer that is not synchronised."""
    from poseidon.config import PLAN_SYNC_MODES

    if sync not in PLAN_SYNC_MODES:
        raise ValueError(f"sync mode {sync!r} has no HybComm plan (want one of "
                         f"{', '.join(PLAN_SYNC_MODES)})")  # fmt: skip
    forced = dict(layer_schemes or {})
    unknown = sorted(set(forced) - {s.name for s in layout})
    if unknown:
        raise ValueError(f"{what} names {', '.join(unknown)}: not a synchronised layer (those "
                         f"are {', '.join(s.name for s in layout) or 'none'})")  # fmt: skip
    if sync != "poseidon":
        scheme, forced = "ps", {}  # WFBP and the baseline move every layer through the PS
    specs = []
    for s in layout:
        # POSEIDON_SCHEME=sfb forces the layers SFB can serve; the others stay PS.
        force = forced.get(s.name, "ps" if scheme == "sfb" and s.shape.kind != "FC" else scheme)
        try:
            # A CommShape counts rows per pass; the cost model's K is the samples of one
            # iteration, whose gradient is the sum over its iter_size passes.
            specs.append(layer_spec(s.index, s.name, s.shape.kind, s.shape.m, s.shape.n,
                                    s.shape.rows * iter_size, s.num_floats, force,
                                    s.byte_scale))  # fmt: skip
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
    return specs


def plan_layout(
    layout: Sequence[SyncLayer],
    workers: int,
    servers: int,
    passes: int = 1,
    sync: str = "poseidon",
    scheme: str = "auto",
    layer_schemes: Mapping[str, str] | None = None,
    what: str = "layer schemes",
    extra_specs: Sequence[Any] = (),
    compression: str = "none",
    powersgd_rank: int = 4,
    rates: Any = None,
    measure: Callable[[list[Any]], None] | None = None,
    workers_per_host: int = 1,
) -> Any:
    """The `_C.Plan` a job of `workers` and `servers` runs for a front end's `layout`: the
    specs its workers declare (layer_specs, then `extra_specs`, units of the front end's own
    such as poseidon.torch's broadcast unit) through `_C.make_plan`, the coordinator's
    function, with the job's `compression` allowance, PowerSGD rank and `_C.Rates`;
    `measure`, if given, fills the specs' measured costs first, as a job's workers do;
    `workers_per_host` is the job's G (local aggregation when > 1). `poseidon plan` prints
    this for a Caffe net and for a torch model alike."""
    from poseidon import _C
    from poseidon.config import compression_of

    specs = [*layer_specs(layout, passes, sync, scheme, layer_schemes, what), *extra_specs]
    if measure is not None:
        measure(specs)
    return _C.make_plan(specs, workers, servers, force=scheme_choice(scheme),
                        compression=compression_of(compression), powersgd_rank=powersgd_rank,
                        rates=rates if rates is not None else _C.Rates(),
                        workers_per_machine=workers_per_host)  # fmt: skip


def _mb(x: float) -> str:
    return f"{x / 1e6:.2f}"


def _bytes(x: float) -> str:
    """A byte count for a sentence: 512 B, 3.1 kB, 2.40 MB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} B"


def _seconds(x: float) -> str:
    """A duration for a sentence: 3.1 µs, 0.25 ms, 1.2 s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x / 1e-6:.3g} µs"


def scheme_label(lp: Any) -> str:
    """A LayerPlan's scheme as printed: "PS", "SFB", "BF16" or "PowerSGD r4"."""
    from poseidon import _C

    name = _C.scheme_name(lp.scheme)
    return f"{name} r{lp.rank}" if lp.scheme == _C.Scheme.POWERSGD else name


def lossy_layers(plan: Any, skip_names: Sequence[str] = ()) -> list[str]:
    """Names of the plan's layers that run a lossy scheme (BF16, PowerSGD)."""
    from poseidon import _C

    lossy = (_C.Scheme.BF16, _C.Scheme.POWERSGD)
    return [lp.name for lp in plan.layers if lp.scheme in lossy and lp.name not in skip_names]


def why_chosen(plan: Any, lp: Any, estimates: Sequence[Any] | None = None) -> str:
    """Why the plan runs `lp` under its scheme: forced, the only candidate, or the margin over
    the runner-up among the schemes the cost model may pick for it (`_C.scheme_candidate`) —
    when the link's rate is known, how much longer the simulated iteration would be with the
    runner-up on this layer (schedule.h, Note [schedule]), else by bytes (cost_model.h, Note
    [time model]); `estimates` are the layer's `_C.layer_estimates`, if the caller has them."""
    from poseidon import _C

    if lp.spec.force != _C.SchemeChoice.AUTO:
        return "forced"
    if estimates is None:
        estimates = _C.layer_estimates(lp.spec, plan.num_workers, plan.num_servers,
                                       plan.powersgd_rank, plan.rates)  # fmt: skip
    spec = lp.spec

    def candidate(e: Any, compression: Any = plan.compression) -> bool:
        return _C.scheme_candidate(e.scheme, spec.kind, spec.m, spec.n, spec.num_floats,
                                   compression, plan.powersgd_rank)  # fmt: skip

    rivals = [e for e in estimates if e.scheme != lp.scheme and candidate(e)]
    if not rivals:
        unpaid = any(e.scheme == _C.Scheme.POWERSGD and e.applicable
                     and _C.scheme_allowed(e.scheme, plan.compression)
                     and not candidate(e) for e in estimates)  # fmt: skip
        if unpaid:
            return "PowerSGD would not halve its bytes (2·r·(M+N) >= M·N)"
        return "the only scheme allowed that serves it"
    if plan.rates.link_bytes_per_s > 0:
        longer = {e.scheme: _schedule_with(plan, lp, e) - plan.schedule_s for e in rivals}
        runner_up = min(longer, key=lambda s: longer[s])
        if longer[runner_up] <= 0:  # schedule.h: exact kept unless lossy wins > 1%
            saving = -longer[runner_up]
            amount = f"only {_seconds(saving)} of the iteration" if saving > 0 else "nothing"
            return f"exact: {_C.scheme_name(runner_up)} would save {amount}"
        return (
            f"iteration {_seconds(longer[runner_up])} shorter than with {_C.scheme_name(runner_up)}"
        )
    key = lambda e: e.wire_bytes  # noqa: E731
    best = min(rivals, key=key)
    mine = lp.estimate
    if key(best) == key(mine):
        return f"as many bytes as {_C.scheme_name(best.scheme)} (ties: exact first)"
    return f"{_bytes(best.wire_bytes - mine.wire_bytes)} fewer than {_C.scheme_name(best.scheme)}"


def _schedule_with(plan: Any, changed: Any, estimate: Any) -> float:
    """The plan's simulated iteration (plan.schedule_s) with layer `changed` under `estimate`."""
    from poseidon import _C

    chosen = [estimate if lp.layer_id == changed.layer_id else lp.estimate for lp in plan.layers]
    return _C.schedule_seconds([lp.spec for lp in plan.layers], chosen)


def format_plan(plan: Any, skip_names: Sequence[str] = ()) -> str:
    """A `_C.Plan` as a table: layer, kind, M×N weight, K, PS and SFB MB per iteration (per
    node: a worker and a shard on it), BF16 and PowerSGD MB when the compression allows
    lossy schemes, the scheme, its predicted ms per iteration when the link's rate is known,
    and why it won; then the totals and the layers that run lossy. Layers named in
    `skip_names` are left out (poseidon.torch's broadcast unit: no traffic per iteration)."""
    from poseidon import _C

    kinds = {_C.LayerKind.FC: "FC", _C.LayerKind.CONV: "conv", _C.LayerKind.OTHER: "other"}
    lossy = lossy_layers(plan, skip_names)
    show_lossy = plan.compression != _C.Compression.NONE or bool(lossy)
    timed = plan.rates.link_bytes_per_s > 0
    local = plan.workers_per_machine > 1
    header = ["layer", "kind", "MxN", "K", "PS MB/iter", "SFB MB/iter"]
    if show_lossy:
        header += ["BF16 MB/iter", "PowerSGD MB/iter"]
    header += [*(["local MB/iter"] if local else []), "scheme",
               *(["ms/iter"] if timed else []), "why"]  # fmt: skip
    body = []
    ps_total = hybrid = seconds = 0.0
    for lp in plan.layers:
        spec, cost = lp.spec, lp.cost
        if spec.name in skip_names:
            continue
        estimates = _C.layer_estimates(spec, plan.num_workers, plan.num_servers,
                                       plan.powersgd_rank, plan.rates,
                                       plan.workers_per_machine)  # fmt: skip
        shown = {e.scheme: _mb(e.wire_bytes) if e.applicable else "-" for e in estimates}
        ps_total += cost.ps_bytes
        hybrid += lp.estimate.wire_bytes
        seconds += lp.estimate.seconds
        row = [spec.name, kinds[spec.kind], f"{spec.m}x{spec.n}", str(spec.k),
               shown[_C.Scheme.PS], shown[_C.Scheme.SFB]]  # fmt: skip
        if show_lossy:
            row += [shown[_C.Scheme.BF16], shown[_C.Scheme.POWERSGD]]
        if local:
            row.append(_mb(lp.estimate.local_bytes))
        row += [scheme_label(lp), *([f"{1e3 * lp.estimate.seconds:.2f}"] if timed else []),
                why_chosen(plan, lp, estimates)]  # fmt: skip
        body.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    scheme_column = header.index("scheme")  # it and "why" are words: left-aligned
    timed_column = header.index("ms/iter") if timed else -1

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 3 or (i >= scheme_column and i != timed_column) else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    allowance = _C.compression_name(plan.compression)
    if plan.compression in (_C.Compression.POWERSGD, _C.Compression.AUTO):
        allowance += f", PowerSGD rank {plan.powersgd_rank}"
    # Rates count sent + received: a full-duplex link of R bit/s moves 2·R/8 bytes of them.
    rate = (f"link {8 * plan.rates.link_bytes_per_s / 2 / 1e6:g} Mbit/s each way" if timed
            else "link rate unknown: schemes ranked by bytes")  # fmt: skip
    g = plan.workers_per_machine
    where = ""
    if local:
        machines = f"{plan.num_machines} machine{'s' if plan.num_machines != 1 else ''}"
        where = (f" on {machines} of {g} (local aggregation: the machine's "
                 "sum crosses its link; local MB per worker inside the machine)")  # fmt: skip
    out = [
        f"P1={plan.num_workers} workers{where}, P2={plan.num_servers} shards; MB (1e6 bytes) "
        f"sent+received per {'machine' if local else 'node'} per iteration, fp32 weights "
        f"(docs/paper.md §4); compression {allowance}; {rate}",
        line(header),
        line(["-" * w for w in widths]),
        *(line(b) for b in body),
        f"total: all PS {_mb(ps_total)} MB/iter; hybrid (chosen schemes) {_mb(hybrid)} MB/iter"
        + (
            f"; {1e3 * seconds:.2f} ms/iter if nothing overlapped, {1e3 * plan.schedule_s:.2f} "
            "ms of backward + synchronisation as scheduled"
            if timed
            else ""
        ),
        f"lossy layers: {', '.join(lossy) if lossy else 'none (every gradient exact)'}",
    ]
    return "\n".join(out)
