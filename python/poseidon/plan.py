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

from collections.abc import Mapping, Sequence
from typing import Any

from poseidon.sync.layout import KINDS, SyncLayer

SCHEME_NAMES = {"auto": "AUTO", "ps": "PS", "sfb": "SFB"}  # option -> _C.SchemeChoice


def scheme_choice(scheme: str) -> Any:
    """`_C.SchemeChoice` of "auto", "ps" or "sfb" (POSEIDON_SCHEME's values)."""
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
               num_floats: int, force: str = "auto") -> Any:  # fmt: skip
    """One comm-core LayerSpec: an m×n weight and k samples per worker per iteration, in the
    cost model's names (docs/paper.md §4). Only an FC layer may be forced to SFB or left to
    BestScheme; every other kind is PS. `force` is "auto", "ps" or "sfb"."""
    from poseidon import _C

    native_kind = _native_kind(kind)
    choice = scheme_choice(force) if native_kind == _C.LayerKind.FC else _C.SchemeChoice.PS
    return _C.LayerSpec(layer_id, name, native_kind, m, n, k, num_floats, choice)


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
    # A CommShape counts rows per pass; the cost model's K is the samples of one iteration,
    # whose gradient is the sum over its iter_size passes.
    return [layer_spec(s.index, s.name, s.shape.kind, s.shape.m, s.shape.n,
                       s.shape.rows * iter_size, s.num_floats, forced.get(s.name, scheme))
            for s in layout]  # fmt: skip


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
) -> Any:
    """The `_C.Plan` a job of `workers` and `servers` runs for a front end's `layout`: the
    specs its workers declare (layer_specs, then `extra_specs`, units of the front end's own
    such as poseidon.torch's broadcast unit) through `_C.make_plan`, the coordinator's
    function. `poseidon plan` prints this for a Caffe net and for a torch model alike."""
    from poseidon import _C

    specs = [*layer_specs(layout, passes, sync, scheme, layer_schemes, what), *extra_specs]
    return _C.make_plan(specs, workers, servers, force=scheme_choice(scheme))


def _mb(x: float) -> str:
    return f"{x / 1e6:.2f}"


def format_plan(plan: Any, skip_names: Sequence[str] = ()) -> str:
    """A `_C.Plan` as a table: layer, kind, M×N weight, K, PS and SFB MB per iteration (per
    node: a worker and a shard on it), the scheme; then the totals. Layers named in
    `skip_names` are left out (poseidon.torch's broadcast unit: no traffic per iteration)."""
    from poseidon import _C

    kinds = {_C.LayerKind.FC: "FC", _C.LayerKind.CONV: "conv", _C.LayerKind.OTHER: "other"}
    header = ("layer", "kind", "MxN", "K", "PS MB/iter", "SFB MB/iter", "scheme")
    body = []
    ps_total = hybrid = 0.0
    for lp in plan.layers:
        spec, cost = lp.spec, lp.cost
        if spec.name in skip_names:
            continue
        fc = spec.kind == _C.LayerKind.FC
        sfb = lp.scheme == _C.Scheme.SFB
        ps_total += cost.ps_bytes
        hybrid += cost.sfb_bytes if sfb else cost.ps_bytes
        body.append((spec.name, kinds[spec.kind], f"{spec.m}x{spec.n}", str(spec.k),
                     _mb(cost.ps_bytes), _mb(cost.sfb_bytes) if fc else "-",
                     "SFB" if sfb else "PS"))  # fmt: skip
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    out = [
        f"P1={plan.num_workers} workers, P2={plan.num_servers} shards; MB (1e6 bytes) "
        "sent+received per node per iteration, fp32 weights (docs/paper.md §4)",
        line(header),
        line(["-" * w for w in widths]),
        *(line(b) for b in body),
        f"total: all PS {_mb(ps_total)} MB/iter; hybrid (chosen schemes) {_mb(hybrid)} MB/iter",
    ]
    return "\n".join(out)
