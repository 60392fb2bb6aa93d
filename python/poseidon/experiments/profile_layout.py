"""A profiled net as the client core sees it: its synchronised layers (the core's layout),
the HybComm plan of a cell, and the all-reduce baseline's buckets — each by the syncers' own
functions (poseidon.plan.layer_specs with the coordinator's _C.make_plan, and
poseidon/sync/buckets.py `bucket_layout`), so that the predictor plans and schedules what
the emulated and real runs do."""

from __future__ import annotations

from typing import Any

from poseidon.experiments.profile import Profile, SfbTiming
from poseidon.sync.buckets import (
    DEFAULT_BUCKET_CAP_BYTES,
    DEFAULT_FIRST_BUCKET_BYTES,
    bucket_layout,
)
from poseidon.sync.layout import CommShape, SyncLayer


def profile_sync_layers(profile: Profile) -> list[SyncLayer]:
    """The profile's synchronised layers as poseidon.sync.layout.SyncLayer, with their ranges
    in the net's flat gradient buffer."""
    layers = []
    for index, layer in enumerate(profile.layers):
        sync = layer.sync
        if sync is None:
            continue
        shape = CommShape(sync.kind, sync.m, sync.n, sync.rows)
        layers.append(
            SyncLayer(index, layer.name, sync.start, sync.start + sync.floats, (), sync.late, shape)
        )
    return layers


def profile_plan(
    profile: Profile,
    mode: str,
    nodes: int,
    chunk_bytes: int,
    layer_schemes: dict[str, str] | None = None,
    compression: str = "none",
    powersgd_rank: int = 4,
    rates: Any = None,
    servers: int | None = None,
    workers_per_host: int = 1,
) -> Any:
    """The `_C.Plan` a job of `nodes` workers and as many shards (or `servers`) would run in
    sync `mode`, with the job's `compression` allowance, PowerSGD rank and `_C.Rates`, and
    `workers_per_host` workers per machine (local aggregation when > 1). The profile was
    measured at iter_size 1; its rows are an iteration's. With the link's rate known the
    coordinator judges the plan on the iteration's schedule: the specs carry the profile's
    times, as a job's workers carry their measurements (`profile_costs`)."""
    from poseidon import _C
    from poseidon.config import compression_of
    from poseidon.plan import layer_specs

    specs = layer_specs(profile_sync_layers(profile), 1, mode, "auto", layer_schemes)
    if rates is not None and rates.link_bytes_per_s > 0:
        for spec in specs:
            spec.measured = profile_costs(profile, spec, nodes)
    return _C.make_plan(specs, nodes, servers or nodes, chunk_bytes,
                        compression=compression_of(compression), powersgd_rank=powersgd_rank,
                        rates=rates if rates is not None else _C.Rates(),
                        workers_per_machine=workers_per_host)  # fmt: skip


def profile_costs(profile: Profile, spec: Any, nodes: int) -> Any:
    """The `_C.MeasuredCosts` of a profiled layer, as the predictor charges them
    (`profiled_costs`)."""
    layer = profile.layers[spec.layer_id]
    rows = layer.sync.rows if layer.sync is not None else 0
    return profiled_costs(layer.backward_s, layer.sfb, spec, rows, nodes)


def profiled_costs(backward_s: float, sfb: SfbTiming | None, spec: Any, rows: int,
                   nodes: int) -> Any:  # fmt: skip
    """The `_C.MeasuredCosts` a profiled layer declares, whose backward takes `backward_s`
    with `rows` rows per node: its backward, and SFB's rebuild from rows·nodes rows and the
    dW it skips (the profile's `sfb` timing). PowerSGD's products are left to the cost
    model's formulas at the profile's GEMM rate (the plan's Rates), which the predictor then
    reads from the plan's estimates and the compute replay spends. The predictor and the
    emulation's replay (replay.py) both declare these."""
    from poseidon import _C

    costs = _C.MeasuredCosts()
    costs.backward_s = backward_s
    if sfb is not None and rows > 0:
        costs.sfb_rebuild_s = sfb.rebuild_s(spec.m, spec.n, rows * nodes)
        costs.dw_s = sfb.weight_grad_s
    return costs


def gemm_rate(profile: Profile, rows: int) -> float:
    """The device's GEMM rate (FLOP/s) for a product with `rows` rows (PowerSGD's r), from
    the profile's measured SFB rebuild rates (the best layer's); else the fastest layer's
    backward FLOP rate; 0 when the profile knows neither."""
    rates = []
    for layer in profile.layers:
        if layer.sfb is not None and layer.sfb.gemm_flops_per_s:
            known = sorted(layer.sfb.gemm_flops_per_s)
            below = [r for r in known if r <= rows]
            rates.append(layer.sfb.gemm_flops_per_s[below[-1] if below else known[0]])
    if not rates:
        rates = [x.flops_backward / x.backward_s for x in profile.layers
                 if x.flops_backward > 0 and x.backward_s > 0]  # fmt: skip
    return max(rates, default=0.0)


def ddp_buckets(
    profile: Profile,
    first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES,
    bucket_cap_bytes: int = DEFAULT_BUCKET_CAP_BYTES,
) -> list[tuple[list[int], float]]:
    """(layer indices, bytes) of every bucket, in the order the syncer launches them."""
    buckets = bucket_layout(profile_sync_layers(profile), first_bucket_bytes, bucket_cap_bytes)
    return [([x.index for x in b.layers], float(b.num_bytes)) for b in buckets]
