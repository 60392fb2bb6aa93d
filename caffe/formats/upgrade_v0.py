"""V0 -> V1 net upgrade: the oldest Caffe nets (2013), step 1 of the chain in
caffe/formats/upgrade.py.

A V0 net is a NetParameter whose `layers` entries (V1LayerParameter) carry only bottom/top and
a nested V0LayerParameter `layer` holding everything else in flat fields with string types
("conv", "pool", ...). Two things happen:

1. Padding layers are folded away: a "padding" layer feeding a conv or pool layer becomes that
   layer's `pad`, and the consumer is rewired to read the padding layer's input.
2. Each V0 layer is rewritten as a V1 layer: string type -> LayerType enum, and each flat field
   moved into the parameter message of the layer kind that understands it. A field the layer
   kind does not understand is reported (logged) and dropped, and the upgrade reports that it
   was not fully compatible, as Caffe does.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from google.protobuf.message import Message

from caffe.errors import PrototxtError
from caffe.proto import caffe_pb2

log = logging.getLogger("caffe")
M = TypeVar("M", bound=Message)

_V1 = caffe_pb2.V1LayerParameter

V0_TYPE_TO_V1: dict[str, int] = {
    "accuracy": _V1.ACCURACY,
    "bnll": _V1.BNLL,
    "concat": _V1.CONCAT,
    "conv": _V1.CONVOLUTION,
    "data": _V1.DATA,
    "dropout": _V1.DROPOUT,
    "euclidean_loss": _V1.EUCLIDEAN_LOSS,
    "flatten": _V1.FLATTEN,
    "hdf5_data": _V1.HDF5_DATA,
    "hdf5_output": _V1.HDF5_OUTPUT,
    "im2col": _V1.IM2COL,
    "images": _V1.IMAGE_DATA,
    "infogain_loss": _V1.INFOGAIN_LOSS,
    "innerproduct": _V1.INNER_PRODUCT,
    "lrn": _V1.LRN,
    "multinomial_logistic_loss": _V1.MULTINOMIAL_LOGISTIC_LOSS,
    "pool": _V1.POOLING,
    "relu": _V1.RELU,
    "sigmoid": _V1.SIGMOID,
    "softmax": _V1.SOFTMAX,
    "softmax_loss": _V1.SOFTMAX_LOSS,
    "split": _V1.SPLIT,
    "tanh": _V1.TANH,
    "window_data": _V1.WINDOW_DATA,
}

# V0 field -> {V0 layer type: (V1 parameter message, field in it)}. How a value is stored
# (set, append to a repeated field, copy a message) follows from the target field itself.
_FIELD_TARGETS: dict[str, dict[str, tuple[str, str]]] = {
    "num_output": {
        "conv": ("convolution_param", "num_output"),
        "innerproduct": ("inner_product_param", "num_output"),
    },
    "biasterm": {
        "conv": ("convolution_param", "bias_term"),
        "innerproduct": ("inner_product_param", "bias_term"),
    },
    "weight_filler": {
        "conv": ("convolution_param", "weight_filler"),
        "innerproduct": ("inner_product_param", "weight_filler"),
    },
    "bias_filler": {
        "conv": ("convolution_param", "bias_filler"),
        "innerproduct": ("inner_product_param", "bias_filler"),
    },
    "pad": {"conv": ("convolution_param", "pad"), "pool": ("pooling_param", "pad")},
    "kernelsize": {
        "conv": ("convolution_param", "kernel_size"),
        "pool": ("pooling_param", "kernel_size"),
    },
    "group": {"conv": ("convolution_param", "group")},
    "stride": {"conv": ("convolution_param", "stride"), "pool": ("pooling_param", "stride")},
    # V0 and V1 PoolMethod share numbering (MAX=0, AVE=1, STOCHASTIC=2).
    "pool": {"pool": ("pooling_param", "pool")},
    "dropout_ratio": {"dropout": ("dropout_param", "dropout_ratio")},
    "local_size": {"lrn": ("lrn_param", "local_size")},
    "alpha": {"lrn": ("lrn_param", "alpha")},
    "beta": {"lrn": ("lrn_param", "beta")},
    "k": {"lrn": ("lrn_param", "k")},
    # "images" entries go beyond Caffe's own table: ImageDataParameter has these
    # fields, so moving them is better than dropping them.
    "source": {
        "data": ("data_param", "source"),
        "images": ("image_data_param", "source"),
        "window_data": ("window_data_param", "source"),
        "infogain_loss": ("infogain_loss_param", "source"),
    },
    "batchsize": {
        "data": ("data_param", "batch_size"),
        "images": ("image_data_param", "batch_size"),
        "window_data": ("window_data_param", "batch_size"),
    },
    "rand_skip": {"data": ("data_param", "rand_skip"), "images": ("image_data_param", "rand_skip")},
    "shuffle_images": {"images": ("image_data_param", "shuffle")},
    "new_height": {"images": ("image_data_param", "new_height")},
    "new_width": {"images": ("image_data_param", "new_width")},
    "concat_dim": {"concat": ("concat_param", "concat_dim")},
    "det_fg_threshold": {"window_data": ("window_data_param", "fg_threshold")},
    "det_bg_threshold": {"window_data": ("window_data_param", "bg_threshold")},
    "det_fg_fraction": {"window_data": ("window_data_param", "fg_fraction")},
    "det_context_pad": {"window_data": ("window_data_param", "context_pad")},
    "det_crop_mode": {"window_data": ("window_data_param", "crop_mode")},
    "hdf5_output_param": {"hdf5_output": ("hdf5_output_param", "")},
}

# Transformation fields apply to any layer kind: they move into transform_param.
_TRANSFORM_TARGETS = {
    "scale": "scale",
    "meanfile": "mean_file",
    "cropsize": "crop_size",
    "mirror": "mirror",
}


def upgrade_v0_net(param: caffe_pb2.NetParameter, source: str) -> bool:
    """Rewrite the V0 `layers` of `param` in place as V1 layers; False if something was dropped."""
    _fold_padding_layers(param, source)
    fully_compatible = True
    connections = list(param.layers)
    upgraded = [caffe_pb2.V1LayerParameter() for _ in connections]
    for old, new in zip(connections, upgraded):
        fully_compatible &= upgrade_v0_layer(old, new, source)
    param.ClearField("layers")
    for new in upgraded:
        param.layers.add().CopyFrom(new)
    return fully_compatible


def _fold_padding_layers(param: caffe_pb2.NetParameter, source: str) -> None:
    """Remove V0 "padding" layers, moving their pad into the conv/pool layer they feed."""
    original = list(param.layers)
    kept: list[caffe_pb2.V1LayerParameter] = []
    # Which original layer produced each blob last; -1 for net inputs.
    producer: dict[str, int] = {name: -1 for name in param.input}
    for index, connection in enumerate(original):
        v0 = connection.layer
        is_padding = v0.type == "padding"
        if not is_padding:
            kept.append(_copy(connection))
        for j, bottom in enumerate(connection.bottom):
            if bottom not in producer:
                raise PrototxtError(
                    f"{source}: unknown blob input {bottom} to layer {v0.name or index}"
                )
            source_index = producer[bottom]
            if source_index < 0 or original[source_index].layer.type != "padding":
                continue
            pad_layer = original[source_index]
            if v0.type not in ("conv", "pool"):
                raise PrototxtError(
                    f"{source}: padding layer {pad_layer.layer.name} feeds layer {v0.name} of "
                    f"type {v0.type}; only conv and pool layers can absorb padding"
                )
            if len(connection.bottom) != 1 or len(pad_layer.bottom) != 1 or len(pad_layer.top) != 1:
                raise PrototxtError(
                    f"{source}: padding layer {pad_layer.layer.name} and its consumer "
                    f"{v0.name} must each have exactly one input and one output"
                )
            kept[-1].layer.pad = pad_layer.layer.pad
            kept[-1].bottom[j] = pad_layer.bottom[0]
        for top in connection.top:
            producer[top] = index
    param.ClearField("layers")
    for connection in kept:
        param.layers.add().CopyFrom(connection)


def _copy(message: M) -> M:
    clone = type(message)()
    clone.CopyFrom(message)
    return clone


def upgrade_v0_layer(
    connection: caffe_pb2.V1LayerParameter, out: caffe_pb2.V1LayerParameter, source: str
) -> bool:
    """Fill the (cleared) V1 layer `out` from a V0 connection; False if a field was dropped."""
    out.Clear()
    out.bottom.extend(connection.bottom)
    out.top.extend(connection.top)
    if not connection.HasField("layer"):
        return True
    v0 = connection.layer
    kind = v0.type
    if v0.HasField("name"):
        out.name = v0.name
    if v0.HasField("type"):
        if kind not in V0_TYPE_TO_V1:
            known = ", ".join(sorted(V0_TYPE_TO_V1))
            raise PrototxtError(f"{source}: unknown V0 layer type '{kind}' (known: {known})")
        out.type = V0_TYPE_TO_V1[kind]
    for blob in v0.blobs:
        out.blobs.add().CopyFrom(blob)
    out.blobs_lr.extend(v0.blobs_lr)
    out.weight_decay.extend(v0.weight_decay)

    fully_compatible = True
    for fd, value in v0.ListFields():
        if fd.name in _TRANSFORM_TARGETS:
            setattr(out.transform_param, _TRANSFORM_TARGETS[fd.name], value)
            continue
        targets = _FIELD_TARGETS.get(fd.name)
        if targets is None:
            continue  # name, type, blobs, blobs_lr, weight_decay: handled above
        if kind not in targets:
            log.error("%s: unknown parameter %s for layer type %s", source, fd.name, kind)
            fully_compatible = False
            continue
        message_name, field_name = targets[kind]
        _store(getattr(out, message_name), field_name, value)
    return fully_compatible


def _store(message: Message, field_name: str, value: object) -> None:
    """Put `value` into message.field_name, whatever kind of field that is."""
    if not field_name:
        message.CopyFrom(value)
        return
    fd = message.DESCRIPTOR.fields_by_name[field_name]
    if fd.message_type is not None:
        getattr(message, field_name).CopyFrom(value)
    elif fd.is_repeated:
        getattr(message, field_name).append(value)
    else:
        setattr(message, field_name, value)
