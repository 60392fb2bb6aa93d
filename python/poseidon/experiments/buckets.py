"""The all-reduce baseline's buckets for a profiled net, laid out by the syncer's own
function (caffe/allreduce_buckets.py `bucket_layout`), so that the predictor schedules the
buckets the emulated and real runs reduce."""

from __future__ import annotations

from caffe.allreduce_buckets import (
    DEFAULT_BUCKET_CAP_BYTES,
    DEFAULT_FIRST_BUCKET_BYTES,
    bucket_layout,
)
from caffe.sync_layout import CommShape, SyncLayer
from poseidon.experiments.profile import Profile


def profile_sync_layers(profile: Profile) -> list[SyncLayer]:
    """The profile's synchronised layers as caffe.sync_layout.SyncLayer, with their ranges
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


def ddp_buckets(
    profile: Profile,
    first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES,
    bucket_cap_bytes: int = DEFAULT_BUCKET_CAP_BYTES,
) -> list[tuple[list[int], float]]:
    """(layer indices, bytes) of every bucket, in the order the syncer launches them."""
    buckets = bucket_layout(profile_sync_layers(profile), first_bucket_bytes, bucket_cap_bytes)
    return [([x.index for x in b.layers], float(b.num_bytes)) for b in buckets]
