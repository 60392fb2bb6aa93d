"""Automatic Split layers (docs/caffe_format.md §2 step 2), named exactly as Caffe names them.

A top consumed by more than one bottom (a non-zero loss_weight counts as one more
consumer) gets a Split layer right after its producer; consumers are rewired in order,
and a loss weight moves to split top 0.
"""

from __future__ import annotations

from caffe.proto import caffe_pb2


def split_layer_name(blob: str, layer: str, top_index: int) -> str:
    return f"{blob}_{layer}_{top_index}_split"


def split_blob_name(blob: str, layer: str, top_index: int, split_index: int) -> str:
    return f"{split_layer_name(blob, layer, top_index)}_{split_index}"


def insert_splits(param: caffe_pb2.NetParameter) -> caffe_pb2.NetParameter:
    """A copy of `param` with Split layers inserted where a blob feeds several consumers."""
    producer: dict[str, tuple[int, int]] = {}  # blob -> (layer index, top index), latest
    consumers: dict[tuple[int, int], int] = {}  # (layer, top) -> number of consumers
    bottom_source: dict[tuple[int, int], tuple[int, int]] = {}  # (layer, bottom) -> producer
    loss_weight: dict[tuple[int, int], float] = {}
    for i, layer in enumerate(param.layer):
        for j, name in enumerate(layer.bottom):
            if name not in producer:
                continue  # unknown bottoms are reported by the Net, with the layer name
            src = producer[name]
            bottom_source[(i, j)] = src
            consumers[src] = consumers.get(src, 0) + 1
        for j, name in enumerate(layer.top):
            producer[name] = (i, j)
        for j, weight in enumerate(layer.loss_weight):
            loss_weight[(i, j)] = weight
            if weight:
                consumers[(i, j)] = consumers.get((i, j), 0) + 1

    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    del out.layer[:]
    split_used: dict[tuple[int, int], int] = {}
    for i, layer in enumerate(param.layer):
        new_layer = out.layer.add()
        new_layer.CopyFrom(layer)
        for j, _ in enumerate(layer.bottom):
            src = bottom_source.get((i, j))
            if src is None or consumers.get(src, 0) <= 1:
                continue
            k = split_used.get(src, 0)
            split_used[src] = k + 1
            src_layer = param.layer[src[0]]
            new_layer.bottom[j] = split_blob_name(src_layer.top[src[1]], src_layer.name, src[1], k)
        for j, blob in enumerate(layer.top):
            count = consumers.get((i, j), 0)
            if count <= 1:
                continue
            split = out.layer.add()
            split.name = split_layer_name(blob, layer.name, j)
            split.type = "Split"
            split.bottom.append(blob)
            for k in range(count):
                split.top.append(split_blob_name(blob, layer.name, j, k))
            weight = loss_weight.get((i, j), 0.0)
            if weight:
                # The loss weight moves to split top 0; like Caffe, the producer's
                # whole loss_weight list is cleared.
                split.loss_weight.append(weight)
                split.loss_weight.extend([0.0] * (count - 1))
                del new_layer.loss_weight[:]
                split_used[(i, j)] = 1  # top 0 is taken by the loss
    return out
