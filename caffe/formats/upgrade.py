"""Bring legacy net and solver definitions up to the current schema, as Caffe does on every read.

Net chain (docs/caffe_format.md §1.3), applied in this order by `upgrade_net_param`:

1. V0 -> V1: nets whose `layers` entries nest an old-style `layer` (see
   `caffe/formats/upgrade_v0.py`).
2. Data transformation: V1 Data/ImageData/WindowData layers move scale, mean_file, crop_size
   and mirror from their data parameter into `transform_param`.
3. V1 -> V2: `layers { type: CONVOLUTION ... }` become `layer { type: "Convolution" ... }`;
   blobs_lr / weight_decay / param names / blob_share_mode become `ParamSpec` entries.
4. Input fields: `input` + `input_dim` / `input_shape` become an "Input" layer named "input" at
   the front of the net; inputs without any shape (old caffemodels) are simply dropped.
5. BatchNorm: a BatchNorm layer with exactly three `param` entries gets lr_mult = decay_mult = 0.

Solver chain (`upgrade_solver_param`): the deprecated `solver_type` enum becomes the `type`
string; then (for solvers read from a file) the snapshot_prefix fix-up.

Every step logs to the "caffe" logger with the wording Caffe's logs use, so that people who grep
for "Attempting to upgrade input file specified using deprecated" find it.
"""

from __future__ import annotations

import logging
import os

from caffe.errors import PrototxtError
from caffe.proto import caffe_pb2

log = logging.getLogger("caffe")

_V1 = caffe_pb2.V1LayerParameter

# V1 LayerType enum value -> V2 type string (docs/caffe_format.md §1.3 table).
V1_TYPE_TO_V2: dict[int, str] = {
    _V1.NONE: "",
    _V1.ABSVAL: "AbsVal",
    _V1.ACCURACY: "Accuracy",
    _V1.ARGMAX: "ArgMax",
    _V1.BNLL: "BNLL",
    _V1.CONCAT: "Concat",
    _V1.CONTRASTIVE_LOSS: "ContrastiveLoss",
    _V1.CONVOLUTION: "Convolution",
    _V1.DATA: "Data",
    _V1.DECONVOLUTION: "Deconvolution",
    _V1.DROPOUT: "Dropout",
    _V1.DUMMY_DATA: "DummyData",
    _V1.EUCLIDEAN_LOSS: "EuclideanLoss",
    _V1.ELTWISE: "Eltwise",
    _V1.EXP: "Exp",
    _V1.FLATTEN: "Flatten",
    _V1.HDF5_DATA: "HDF5Data",
    _V1.HDF5_OUTPUT: "HDF5Output",
    _V1.HINGE_LOSS: "HingeLoss",
    _V1.IM2COL: "Im2col",
    _V1.IMAGE_DATA: "ImageData",
    _V1.INFOGAIN_LOSS: "InfogainLoss",
    _V1.INNER_PRODUCT: "InnerProduct",
    _V1.LRN: "LRN",
    _V1.MEMORY_DATA: "MemoryData",
    _V1.MULTINOMIAL_LOGISTIC_LOSS: "MultinomialLogisticLoss",
    _V1.MVN: "MVN",
    _V1.POOLING: "Pooling",
    _V1.POWER: "Power",
    _V1.RELU: "ReLU",
    _V1.SIGMOID: "Sigmoid",
    _V1.SIGMOID_CROSS_ENTROPY_LOSS: "SigmoidCrossEntropyLoss",
    _V1.SILENCE: "Silence",
    _V1.SOFTMAX: "Softmax",
    _V1.SOFTMAX_LOSS: "SoftmaxWithLoss",
    _V1.SPLIT: "Split",
    _V1.SLICE: "Slice",
    _V1.TANH: "TanH",
    _V1.WINDOW_DATA: "WindowData",
    _V1.THRESHOLD: "Threshold",
}

# Deprecated SolverParameter.solver_type enum value -> `type` string.
SOLVER_TYPE_TO_NAME: dict[int, str] = {
    caffe_pb2.SolverParameter.SGD: "SGD",
    caffe_pb2.SolverParameter.NESTEROV: "Nesterov",
    caffe_pb2.SolverParameter.ADAGRAD: "AdaGrad",
    caffe_pb2.SolverParameter.RMSPROP: "RMSProp",
    caffe_pb2.SolverParameter.ADADELTA: "AdaDelta",
    caffe_pb2.SolverParameter.ADAM: "Adam",
}

# Every optional message field that V1 and V2 layers share under the same name
# (all *_param fields, transform_param and loss_param), read off the schema so
# that a field added to both can never be forgotten here.
_V1_SHARED_MESSAGE_FIELDS: tuple[str, ...] = tuple(
    fd.name
    for fd in _V1.DESCRIPTOR.fields
    if fd.name.endswith("_param")
    and fd.message_type is not None
    and fd.name in caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
)

# V1 data layers whose data parameter still carries transformation fields.
_DATA_LAYER_PARAM = {
    _V1.DATA: "data_param",
    _V1.IMAGE_DATA: "image_data_param",
    _V1.WINDOW_DATA: "window_data_param",
}
_TRANSFORM_FIELDS = ("scale", "mean_file", "crop_size", "mirror")


# --------------------------------------------------------------------------- nets


def upgrade_net_param(param: caffe_pb2.NetParameter, source: str) -> bool:
    """Upgrade `param` in place through the whole chain; return whether anything changed.

    `source` names the file (or "<string>") in log lines and errors. Raises PrototxtError for
    definitions Caffe refuses (both `layer` and `layers`, unknown V0 types, inconsistent
    input dimensions).
    """
    changed = False
    if net_needs_v0_upgrade(param):
        # Imported here because upgrade_v0 itself uses this module's tables.
        from caffe.formats.upgrade_v0 import upgrade_v0_net

        log.info(
            "Attempting to upgrade input file specified using deprecated V0LayerParameter: %s",
            source,
        )
        if upgrade_v0_net(param, source):
            log.info("Successfully upgraded file specified using deprecated V0LayerParameter")
        else:
            log.error(
                "Warning: had one or more problems upgrading V0NetParameter to NetParameter "
                "(see above); continuing anyway."
            )
        changed = True
    if net_needs_data_upgrade(param):
        log.info(
            "Attempting to upgrade input file specified using deprecated transformation "
            "parameters: %s",
            source,
        )
        upgrade_net_data_transformation(param)
        log.info(
            "Successfully upgraded file specified using deprecated data transformation parameters."
        )
        log.warning(
            "Note that future Caffe releases will only support transform_param messages for "
            "transformation fields."
        )
        changed = True
    if len(param.layers) > 0:
        log.info(
            "Attempting to upgrade input file specified using deprecated V1LayerParameter: %s",
            source,
        )
        if upgrade_v1_net(param, source):
            log.info("Successfully upgraded file specified using deprecated V1LayerParameter")
        else:
            log.error(
                "Warning: had one or more problems upgrading V1LayerParameter (see above); "
                "continuing anyway."
            )
        changed = True
    if len(param.input) > 0:
        log.info(
            "Attempting to upgrade input file specified using deprecated input fields: %s", source
        )
        upgrade_net_input(param, source)
        log.info("Successfully upgraded file specified using deprecated input fields.")
        log.warning(
            "Note that future Caffe releases will only support input layers and not input fields."
        )
        changed = True
    if net_needs_batch_norm_upgrade(param):
        log.info("Attempting to upgrade batch norm layers using deprecated params: %s", source)
        upgrade_net_batch_norm(param)
        log.info("Successfully upgraded batch norm layers using deprecated params.")
        changed = True
    return changed


def net_needs_v0_upgrade(param: caffe_pb2.NetParameter) -> bool:
    return any(v1.HasField("layer") for v1 in param.layers)


def net_needs_data_upgrade(param: caffe_pb2.NetParameter) -> bool:
    for v1 in param.layers:
        field = _DATA_LAYER_PARAM.get(v1.type)
        if field is not None and v1.HasField(field):
            data_param = getattr(v1, field)
            if any(data_param.HasField(name) for name in _TRANSFORM_FIELDS):
                return True
    return False


def upgrade_net_data_transformation(param: caffe_pb2.NetParameter) -> None:
    """Move scale/mean_file/crop_size/mirror of V1 data layers into transform_param."""
    for v1 in param.layers:
        field = _DATA_LAYER_PARAM.get(v1.type)
        if field is None or not v1.HasField(field):
            continue
        data_param = getattr(v1, field)
        for name in _TRANSFORM_FIELDS:
            if data_param.HasField(name):
                setattr(v1.transform_param, name, getattr(data_param, name))
                data_param.ClearField(name)


def upgrade_v1_net(param: caffe_pb2.NetParameter, source: str) -> bool:
    """Replace `layers` (V1) by `layer` (V2). Returns False if some V1 content had to be dropped."""
    if len(param.layer) > 0:
        raise PrototxtError(
            f"{source}: refusing to upgrade an inconsistent net: it has both 'layer' (current "
            "format, string types like layer { type: \"Convolution\" }) and 'layers' (V1 format, "
            "enum types like layers { type: CONVOLUTION }) fields. Convert it by hand to 'layer'."
        )
    fully_compatible = True
    v1_layers = list(param.layers)
    for v1 in v1_layers:
        fully_compatible &= upgrade_v1_layer(v1, param.layer.add(), source)
    param.ClearField("layers")
    return fully_compatible


def upgrade_v1_layer(
    v1: caffe_pb2.V1LayerParameter, layer: caffe_pb2.LayerParameter, source: str = "<string>"
) -> bool:
    """Fill the (cleared) V2 `layer` from `v1`. Returns False if a nested V0 layer was ignored."""
    layer.Clear()
    layer.bottom.extend(v1.bottom)
    layer.top.extend(v1.top)
    if v1.HasField("name"):
        layer.name = v1.name
    for rule in v1.include:
        layer.include.add().CopyFrom(rule)
    for rule in v1.exclude:
        layer.exclude.add().CopyFrom(rule)
    if v1.HasField("type"):
        if v1.type not in V1_TYPE_TO_V2:
            raise PrototxtError(f"{source}: unknown V1LayerParameter layer type {v1.type}")
        layer.type = V1_TYPE_TO_V2[v1.type]
    for blob in v1.blobs:
        layer.blobs.add().CopyFrom(blob)

    def spec(i: int) -> caffe_pb2.ParamSpec:
        # V1 keeps four parallel per-blob lists; V2 keeps one list of ParamSpec,
        # extended as far as the longest V1 list reaches.
        while len(layer.param) <= i:
            layer.param.add()
        return layer.param[i]

    for i, name in enumerate(v1.param):
        spec(i).name = name
    for i, mode in enumerate(v1.blob_share_mode):
        # V1 and ParamSpec DimCheckMode share numbering (STRICT=0, PERMISSIVE=1).
        spec(i).share_mode = mode
    for i, lr in enumerate(v1.blobs_lr):
        spec(i).lr_mult = lr
    for i, decay in enumerate(v1.weight_decay):
        spec(i).decay_mult = decay
    layer.loss_weight.extend(v1.loss_weight)
    for field in _V1_SHARED_MESSAGE_FIELDS:
        if v1.HasField(field):
            getattr(layer, field).CopyFrom(getattr(v1, field))
    if v1.HasField("layer"):
        log.error("%s: input NetParameter has V0 layer -- ignoring.", source)
        return False
    return True


def upgrade_net_input(param: caffe_pb2.NetParameter, source: str) -> None:
    """Turn `input` + `input_shape`/`input_dim` into an "Input" layer placed first."""
    inputs = list(param.input)
    has_shape = len(param.input_shape) > 0
    has_dim = len(param.input_dim) > 0
    if has_shape or has_dim:
        if has_shape and len(param.input_shape) != len(inputs):
            raise PrototxtError(
                f"{source}: {len(inputs)} input(s) but {len(param.input_shape)} input_shape "
                "entries; give exactly one input_shape per input"
            )
        if not has_shape and len(param.input_dim) != 4 * len(inputs):
            raise PrototxtError(
                f"{source}: {len(inputs)} input(s) need {4 * len(inputs)} input_dim values "
                f"(4 per input), found {len(param.input_dim)}"
            )
        layer = caffe_pb2.LayerParameter(name="input", type="Input")
        for i, name in enumerate(inputs):
            layer.top.append(name)
            shape = layer.input_param.shape.add()
            if has_shape:
                shape.CopyFrom(param.input_shape[i])
            else:
                shape.dim.extend(param.input_dim[4 * i : 4 * i + 4])
        # Rebuild the list with the Input layer in front (repeated message
        # fields have no insert).
        existing = list(param.layer)
        param.ClearField("layer")
        param.layer.add().CopyFrom(layer)
        for old in existing:
            param.layer.add().CopyFrom(old)
    param.ClearField("input")
    param.ClearField("input_shape")
    param.ClearField("input_dim")


def _batch_norm_needs_zeroing(layer: caffe_pb2.LayerParameter) -> bool:
    if layer.type != "BatchNorm" or len(layer.param) != 3:
        return False
    return any(
        not (
            p.HasField("lr_mult")
            and p.lr_mult == 0
            and p.HasField("decay_mult")
            and p.decay_mult == 0
        )
        for p in layer.param
    )


def net_needs_batch_norm_upgrade(param: caffe_pb2.NetParameter) -> bool:
    return any(_batch_norm_needs_zeroing(layer) for layer in param.layer)


def upgrade_net_batch_norm(param: caffe_pb2.NetParameter) -> None:
    """Old BatchNorm nets declared 3 params to freeze the statistics; make that explicit."""
    for layer in param.layer:
        if layer.type == "BatchNorm" and len(layer.param) == 3:
            for p in layer.param:
                p.lr_mult = 0.0
                p.decay_mult = 0.0


# --------------------------------------------------------------------------- solvers


def upgrade_solver_param(
    param: caffe_pb2.SolverParameter, source_path: str, fix_snapshot_prefix: bool = True
) -> bool:
    """Upgrade a solver read from `source_path` in place; return whether anything changed.

    Converts `solver_type` (enum) to `type` (string) and, unless `fix_snapshot_prefix` is False
    (upgrade tools that rewrite the file), applies Caffe's snapshot_prefix rule for solvers read
    from a file: unset => the solver path without its extension; an existing directory =>
    that directory / the solver file's stem.
    """
    changed = False
    if param.HasField("solver_type"):
        log.info(
            "Attempting to upgrade input file specified using deprecated 'solver_type' field "
            "(enum)': %s",
            source_path,
        )
        upgrade_solver_type(param, source_path)
        log.info(
            "Successfully upgraded file specified using deprecated 'solver_type' field (enum) "
            "to 'type' field (string)."
        )
        log.warning(
            "Note that future Caffe releases will only support 'type' field (string) for a "
            "solver's type."
        )
        changed = True
    if fix_snapshot_prefix:
        changed |= upgrade_snapshot_prefix(param, source_path)
    return changed


def upgrade_solver_type(param: caffe_pb2.SolverParameter, source: str) -> None:
    if param.HasField("type"):
        raise PrototxtError(
            f"{source}: failed to upgrade solver: the old solver_type field (enum) and the new "
            "type field (string) cannot both be specified"
        )
    param.type = SOLVER_TYPE_TO_NAME[param.solver_type]
    param.ClearField("solver_type")


def upgrade_snapshot_prefix(param: caffe_pb2.SolverParameter, solver_path: str) -> bool:
    """Caffe's snapshot_prefix fix-up; the directory test is relative to the working directory."""
    if not param.HasField("snapshot_prefix"):
        param.snapshot_prefix = os.path.splitext(solver_path)[0]
        log.info("snapshot_prefix was not specified and is set to %s", param.snapshot_prefix)
        return True
    if os.path.isdir(param.snapshot_prefix):
        stem = os.path.splitext(os.path.basename(solver_path))[0]
        param.snapshot_prefix = os.path.join(param.snapshot_prefix, stem)
        log.info("snapshot_prefix is a directory and is set to %s", param.snapshot_prefix)
        return True
    return False
