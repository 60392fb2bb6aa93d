"""The per-layer communication plan, for printing (`poseidon plan`).

The numbers come from the C++ cost model (poseidon._C.comm_cost and
best_scheme), the same function the coordinator uses to build the plan the
workers run with, so what is printed is what runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

KINDS = ("FC", "conv", "other")


@dataclass(frozen=True)
class LayerShape:
    """A learnable layer as the cost model sees it: an M×N weight, batch K."""

    name: str
    kind: str  # "FC", "conv" or "other"
    m: int
    n: int
    k: int
    num_floats: int  # every learnable float of the layer (weights + bias)
    shape: tuple[int, ...] = ()  # the weight blob's shape, for display


@dataclass(frozen=True)
class PlanRow:
    layer: LayerShape
    ps_bytes: float  # per node per iteration, a worker and a shard on the node
    sfb_bytes: float | None  # None: not an FC layer, SFB does not apply
    scheme: str  # "PS" or "SFB"


def _native_kind(kind: str) -> Any:
    from poseidon import _C

    if kind not in KINDS:
        raise ValueError(f"layer kind {kind!r}: want one of {', '.join(KINDS)}")
    return {"FC": _C.LayerKind.FC, "conv": _C.LayerKind.CONV}.get(kind, _C.LayerKind.OTHER)


def layer_spec(layer_id: int, name: str, kind: str, m: int, n: int, rows: int,
               num_floats: int, force: str = "auto") -> Any:  # fmt: skip
    """The comm core's LayerSpec of one synchronised layer: what PoseidonSync declares to the
    coordinator and what the predictor plans with (one derivation). `rows` are the samples
    of one iteration (rows per pass × iter_size); only an FC layer may be forced to SFB or
    left to BestScheme, every other kind is PS. `force` is "auto", "ps" or "sfb"."""
    from poseidon import _C

    choices = {"auto": _C.SchemeChoice.AUTO, "ps": _C.SchemeChoice.PS, "sfb": _C.SchemeChoice.SFB}
    if force not in choices:
        raise ValueError(f"scheme {force!r}: want one of {', '.join(choices)}")
    native_kind = _native_kind(kind)
    choice = choices[force] if native_kind == _C.LayerKind.FC else _C.SchemeChoice.PS
    return _C.LayerSpec(layer_id, name, native_kind, m, n, rows, num_floats, choice)


def plan_rows(
    layers: Sequence[LayerShape],
    workers: int,
    servers: int,
    layer_schemes: dict[str, str] | None = None,
) -> list[PlanRow]:
    """BestScheme and both costs for each layer, with P1 workers and P2 shards; an FC layer
    named in `layer_schemes` takes that scheme instead (POSEIDON_LAYER_SCHEMES)."""
    from poseidon import _C

    forced = layer_schemes or {}
    unknown = sorted(set(forced) - {layer.name for layer in layers})
    if unknown:
        raise ValueError(f"layer schemes name {', '.join(unknown)}: no such learnable layer")
    rows = []
    for layer in layers:
        cost = _C.comm_cost(layer.m, layer.n, layer.k, workers, servers)
        scheme = _C.best_scheme(
            _native_kind(layer.kind), layer.m, layer.n, layer.k, workers, servers
        )
        if layer.kind == "FC" and forced.get(layer.name, "auto") != "auto":
            scheme = _C.Scheme.SFB if forced[layer.name] == "sfb" else _C.Scheme.PS
        rows.append(
            PlanRow(
                layer=layer,
                ps_bytes=cost.ps_bytes,
                sfb_bytes=cost.sfb_bytes if layer.kind == "FC" else None,
                scheme="SFB" if scheme == _C.Scheme.SFB else "PS",
            )
        )
    return rows


def _mb(x: float) -> str:
    return f"{x / 1e6:.2f}"


def format_plan(rows: Sequence[PlanRow], workers: int, servers: int) -> str:
    """A table: layer, kind, weight shape, K, PS MB/iter, SFB MB/iter, choice; then totals."""
    header = ("layer", "kind", "shape", "K", "PS MB/iter", "SFB MB/iter", "scheme")
    body = [
        (
            r.layer.name,
            r.layer.kind,
            "x".join(str(d) for d in r.layer.shape) or f"{r.layer.m}x{r.layer.n}",
            str(r.layer.k),
            _mb(r.ps_bytes),
            _mb(r.sfb_bytes) if r.sfb_bytes is not None else "-",
            r.scheme,
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    ps_total = sum(r.ps_bytes for r in rows)
    hybrid = sum(
        r.sfb_bytes if r.scheme == "SFB" and r.sfb_bytes is not None else r.ps_bytes for r in rows
    )
    out = [
        f"P1={workers} workers, P2={servers} shards; MB (1e6 bytes) sent+received per node per "
        "iteration, fp32 weights (reference §4)",
        line(header),
        line(["-" * w for w in widths]),
        *(line(b) for b in body),
        f"total: all PS {_mb(ps_total)} MB/iter; hybrid (chosen schemes) {_mb(hybrid)} MB/iter",
    ]
    return "\n".join(out)


def layers_from_net(net: Any, batch: int | None = None) -> list[LayerShape]:
    """Learnable layers of a caffe.Net, in net order; K is the bottom's batch unless given."""
    layers = []
    for index, layer in enumerate(net.layers):
        if len(layer.blobs) == 0:
            continue
        name = net._layer_names[index]
        shape = tuple(int(d) for d in layer.blobs[0].shape)
        num_floats = sum(math.prod(int(d) for d in b.shape) for b in layer.blobs)
        bottoms = net.bottom_names[name]
        k = batch if batch is not None else (int(net.blobs[bottoms[0]].shape[0]) if bottoms else 1)
        if layer.type == "InnerProduct":
            transpose = bool(layer.layer_param.inner_product_param.transpose)
            m, n = (shape[1], shape[0]) if transpose else (shape[0], math.prod(shape[1:]))
            kind = "FC"
        elif layer.type in ("Convolution", "Deconvolution"):
            m, n, kind = shape[0], math.prod(shape[1:]), "conv"
        else:
            m, n, kind = num_floats, 1, "other"
        layers.append(LayerShape(name, kind, m, n, k, num_floats, shape))
    return layers


def layers_from_prototxt(path: str, batch: int | None = None) -> list[LayerShape]:
    """Loads the net with the engine (TRAIN phase) and lists its learnable layers."""
    import logging

    import caffe  # the engine; imported here so `import poseidon` stays light

    # Building a net logs every layer at INFO; the plan is the output here.
    engine_log = logging.getLogger("caffe")
    level = engine_log.level
    engine_log.setLevel(max(level, logging.WARNING))
    try:
        net = caffe.Net(path, caffe.TRAIN)
    finally:
        engine_log.setLevel(level)
    return layers_from_net(net, batch)
