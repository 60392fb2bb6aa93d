"""Which layers of a net a distributed syncer moves, and how the cost model sees each.

One derivation, used by every syncer (caffe/parallel.py's PoseidonSync, the DDP-style
caffe/allreduce_sync.py) and by what describes a net without running it (the compute
profiles of `poseidon profile`, which the predictor reads): a layer is synchronised when
it owns learnable parameters with a nonzero lr_mult; its gradient is the contiguous range
[start, end) of Net.param_diff; it is `late` when a later layer shares its parameters
(its gradient is final only after the whole backward pass).

The cost model (reference §4) sees each layer's weight as an M×N matrix and its batch as
K rows per iteration: `Layer.comm_shape()` says what they are; a late InnerProduct is
sent as a plain tensor (kind "other"), since its sufficient factors would miss the
sharer's contribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("FC", "conv", "other")


@dataclass(frozen=True)
class CommShape:
    """A layer as the cost model sees it, in the cost model's names (reference §4): kind, an
    m×n weight and `rows`, its K for one pass (FC: m outputs, n inputs, rows the batch rows
    of the GEMM; InnerProduct's Note [M, N, K] maps the engine's names onto these)."""

    kind: str
    m: int
    n: int
    rows: int

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "m": self.m, "n": self.n, "rows": self.rows}


@dataclass(frozen=True)
class SyncLayer:
    """One synchronised layer of a net."""

    index: int  # layer index in the net = the comm core's layer id
    name: str
    start: int  # range in Net.param_diff / param_data
    end: int
    param_ids: tuple[int, ...]  # learnable-param ids the layer owns (solver order)
    late: bool  # parameters shared with a later layer: synced after the whole backward
    shape: CommShape  # per pass; multiply rows by iter_size for an iteration

    @property
    def num_floats(self) -> int:
        return self.end - self.start


def sync_layout(net: Any) -> list[SyncLayer]:
    """The layers a syncer moves, in net order (= the comm core's priority order)."""
    owned: dict[int, list[int]] = {}
    shared_owner_layers: set[int] = set()
    indices, owners = net.param_layer_indices, net.param_owners
    learnable_ids, bottoms, names = net.learnable_param_ids, net.bottom_vecs, net.layer_names
    for net_id, (layer_id, _) in enumerate(indices):
        owner = owners[net_id]
        if owner < 0:
            owned.setdefault(layer_id, []).append(learnable_ids[net_id])
        else:
            shared_owner_layers.add(indices[owner][0])
    layout = []
    for layer_id, param_ids in sorted(owned.items()):
        if all(net.params_lr[p] == 0 for p in param_ids):
            continue  # frozen: its update is local and zero-step; nothing to agree on
        layer = net.layers[layer_id]
        late = layer_id in shared_owner_layers
        shape = layer.comm_shape(list(bottoms[layer_id]))
        if late and shape.kind == "FC":
            shape = CommShape("other", shape.m, shape.n, shape.rows)
        start, end = net.layer_param_range[layer_id]
        layout.append(SyncLayer(layer_id, names[layer_id], start, end,
                                tuple(param_ids), late, shape))  # fmt: skip
    return layout
