"""Which layers of a Caffe net a distributed syncer moves, and how the cost model sees each:
the net as the core's list of SyncLayers (poseidon/sync/layout.py).

One derivation, used by every syncer (PoseidonSync in syncer.py, the DDP-style baseline in
allreduce.py) and by what describes a net without running it (the compute profiles of
`poseidon profile`, which the predictor reads): a layer is synchronised when it owns
learnable parameters with a nonzero lr_mult; its gradient is the contiguous range
[start, end) of Net.param_diff; it is `late` when a later layer shares its parameters (its
gradient is final only after the whole backward pass).

The cost model (docs/paper.md §4) sees each layer's weight as an M×N matrix and its batch as
K rows per iteration: `Layer.comm_shape()` says what they are; a late InnerProduct is sent
as a plain tensor (kind "other"), since its sufficient factors would miss the sharer's
contribution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poseidon.plan import broadcast_spec, may_run_lossy
from poseidon.sync.broadcast import BROADCAST_FLOATS
from poseidon.sync.layout import CommShape, SyncLayer


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
        shape = CommShape(*layer.comm_shape(list(bottoms[layer_id])))
        if late and shape.kind == "FC":
            shape = CommShape("other", shape.m, shape.n, shape.rows)
        start, end = net.layer_param_range[layer_id]
        transposed = bool(getattr(layer, "transpose", False))  # InnerProduct's weight N×M
        byte_scale = int(getattr(layer, "byte_scale", 1))  # the compute replay's stand-ins
        layout.append(SyncLayer(layer_id, names[layer_id], start, end, tuple(param_ids),
                                late, shape, transposed, byte_scale))  # fmt: skip
    return layout


def broadcast_unit_specs(net: Any, layout: Sequence[SyncLayer], sync: str, compression: str,
                         layer_schemes: Mapping[str, str]) -> list[Any]:  # fmt: skip
    """The broadcast unit a job declares after its layers when its plan may make a layer
    lossy (the start's weights of those layers cross through it: sync/broadcast.py), with
    id len(net.layers); none otherwise."""
    if not may_run_lossy(sync, compression, layer_schemes):
        return []
    floats = sum(layer.num_floats for layer in layout)
    return [broadcast_spec(len(net.layers), max(1, min(BROADCAST_FLOATS, floats)))]
