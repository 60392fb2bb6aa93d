"""caffe.proto against the tables of docs/caffe_format.md §1, through the descriptors.

Each row is `name number type [default]`, transcribed from the spec. Type prefixes: `*`
repeated, `+` repeated and packed, `!` required. A missing default means the proto2 zero value
of the type (enums: their first value).
"""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.descriptor import FieldDescriptor as FD

from caffe.proto import caffe_pb2 as pb

_SCALARS = {
    "int32": FD.TYPE_INT32,
    "int64": FD.TYPE_INT64,
    "uint32": FD.TYPE_UINT32,
    "float": FD.TYPE_FLOAT,
    "double": FD.TYPE_DOUBLE,
    "bool": FD.TYPE_BOOL,
    "string": FD.TYPE_STRING,
    "bytes": FD.TYPE_BYTES,
}

SCHEMA: dict[str, str] = {
    "BlobShape": "dim 1 +int64",
    "BlobProto": """
        num 1 int32 0 | channels 2 int32 0 | height 3 int32 0 | width 4 int32 0
        data 5 +float | diff 6 +float | shape 7 BlobShape
        double_data 8 +double | double_diff 9 +double""",
    "BlobProtoVector": "blobs 1 *BlobProto",
    "Datum": """
        channels 1 int32 | height 2 int32 | width 3 int32 | data 4 bytes | label 5 int32
        float_data 6 *float | encoded 7 bool false""",
    "FillerParameter": """
        type 1 string constant | value 2 float 0 | min 3 float 0 | max 4 float 1
        mean 5 float 0 | std 6 float 1 | sparse 7 int32 -1 | variance_norm 8 VarianceNorm FAN_IN""",
    "NetParameter": """
        name 1 string | layers 2 *V1LayerParameter | input 3 *string | input_dim 4 *int32
        force_backward 5 bool false | state 6 NetState | debug_info 7 bool false
        input_shape 8 *BlobShape | layer 100 *LayerParameter""",
    "NetState": "phase 1 Phase TEST | level 2 int32 0 | stage 3 *string",
    "NetStateRule": """
        phase 1 Phase | min_level 2 int32 | max_level 3 int32 | stage 4 *string
        not_stage 5 *string""",
    "ParamSpec": """
        name 1 string | share_mode 2 DimCheckMode STRICT | lr_mult 3 float 1
        decay_mult 4 float 1""",
    "LayerParameter": """
        name 1 string | type 2 string | bottom 3 *string | top 4 *string | loss_weight 5 *float
        param 6 *ParamSpec | blobs 7 *BlobProto | include 8 *NetStateRule
        exclude 9 *NetStateRule | phase 10 Phase | propagate_down 11 *bool
        transform_param 100 TransformationParameter | loss_param 101 LossParameter""",
    "TransformationParameter": """
        scale 1 float 1 | mirror 2 bool false | crop_size 3 uint32 0 | mean_file 4 string
        mean_value 5 *float | force_color 6 bool false | force_gray 7 bool false""",
    "LossParameter": """
        ignore_label 1 int32 | normalize 2 bool | normalization 3 NormalizationMode VALID""",
    "SolverParameter": """
        train_net 1 string | test_net 2 *string | test_iter 3 *int32 | test_interval 4 int32 0
        base_lr 5 float | display 6 int32 0 | max_iter 7 int32 | lr_policy 8 string
        gamma 9 float | power 10 float | momentum 11 float | weight_decay 12 float
        stepsize 13 int32 | snapshot 14 int32 0 | snapshot_prefix 15 string
        snapshot_diff 16 bool false | solver_mode 17 SolverMode GPU | device_id 18 int32 0
        test_compute_loss 19 bool false | random_seed 20 int64 -1
        train_net_param 21 NetParameter | test_net_param 22 *NetParameter
        debug_info 23 bool false | net 24 string | net_param 25 NetParameter
        train_state 26 NetState | test_state 27 *NetState | snapshot_after_train 28 bool true
        regularization_type 29 string L2 | solver_type 30 SolverType SGD | delta 31 float 1e-8
        test_initialization 32 bool true | average_loss 33 int32 1 | stepvalue 34 *int32
        clip_gradients 35 float -1 | iter_size 36 int32 1
        snapshot_format 37 SnapshotFormat BINARYPROTO | rms_decay 38 float 0.99
        momentum2 39 float 0.999 | type 40 string SGD | layer_wise_reduce 41 bool true
        weights 42 *string""",
    "SolverState": """
        iter 1 int32 | learned_net 2 string | history 3 *BlobProto | current_step 4 int32 0""",
    "ConvolutionParameter": """
        num_output 1 uint32 | bias_term 2 bool true | pad 3 *uint32 | kernel_size 4 *uint32
        group 5 uint32 1 | stride 6 *uint32 | weight_filler 7 FillerParameter
        bias_filler 8 FillerParameter | pad_h 9 uint32 0 | pad_w 10 uint32 0
        kernel_h 11 uint32 | kernel_w 12 uint32 | stride_h 13 uint32 | stride_w 14 uint32
        engine 15 Engine DEFAULT | axis 16 int32 1 | force_nd_im2col 17 bool false
        dilation 18 *uint32""",
    "PoolingParameter": """
        pool 1 PoolMethod MAX | kernel_size 2 uint32 | stride 3 uint32 1 | pad 4 uint32 0
        kernel_h 5 uint32 | kernel_w 6 uint32 | stride_h 7 uint32 | stride_w 8 uint32
        pad_h 9 uint32 0 | pad_w 10 uint32 0 | engine 11 Engine DEFAULT
        global_pooling 12 bool false | round_mode 13 RoundMode CEIL""",
    "InnerProductParameter": """
        num_output 1 uint32 | bias_term 2 bool true | weight_filler 3 FillerParameter
        bias_filler 4 FillerParameter | axis 5 int32 1 | transpose 6 bool false""",
    "LRNParameter": """
        local_size 1 uint32 5 | alpha 2 float 1 | beta 3 float 0.75
        norm_region 4 NormRegion ACROSS_CHANNELS | k 5 float 1 | engine 6 Engine DEFAULT""",
    "DataParameter": """
        source 1 string | scale 2 float 1 | mean_file 3 string | batch_size 4 uint32
        crop_size 5 uint32 0 | mirror 6 bool false | rand_skip 7 uint32 0 | backend 8 DB LEVELDB
        force_encoded_color 9 bool false | prefetch 10 uint32 4""",
    "DropoutParameter": "dropout_ratio 1 float 0.5",
    "DummyDataParameter": """
        data_filler 1 *FillerParameter | num 2 *uint32 | channels 3 *uint32 | height 4 *uint32
        width 5 *uint32 | shape 6 *BlobShape""",
    "EltwiseParameter": """
        operation 1 EltwiseOp SUM | coeff 2 *float | stable_prod_grad 3 bool true""",
    "ConcatParameter": "concat_dim 1 uint32 1 | axis 2 int32 1",
    "SliceParameter": "slice_dim 1 uint32 1 | slice_point 2 *uint32 | axis 3 int32 1",
    "BatchNormParameter": """
        use_global_stats 1 bool | moving_average_fraction 2 float 0.999 | eps 3 float 1e-5""",
    "ScaleParameter": """
        axis 1 int32 1 | num_axes 2 int32 1 | filler 3 FillerParameter | bias_term 4 bool false
        bias_filler 5 FillerParameter""",
    "BiasParameter": "axis 1 int32 1 | num_axes 2 int32 1 | filler 3 FillerParameter",
    "SoftmaxParameter": "engine 1 Engine DEFAULT | axis 2 int32 1",
    "ReLUParameter": "negative_slope 1 float 0 | engine 2 Engine DEFAULT",
    "SigmoidParameter": "engine 1 Engine DEFAULT",
    "TanHParameter": "engine 1 Engine DEFAULT",
    "AccuracyParameter": "top_k 1 uint32 1 | axis 2 int32 1 | ignore_label 3 int32",
    "ArgMaxParameter": "out_max_val 1 bool false | top_k 2 uint32 1 | axis 3 int32",
    "InputParameter": "shape 1 *BlobShape",
    "ImageDataParameter": """
        source 1 string | scale 2 float 1 | mean_file 3 string | batch_size 4 uint32 1
        crop_size 5 uint32 0 | mirror 6 bool false | rand_skip 7 uint32 0 | shuffle 8 bool false
        new_height 9 uint32 0 | new_width 10 uint32 0 | is_color 11 bool true
        root_folder 12 string""",
    "HDF5DataParameter": "source 1 string | batch_size 2 uint32 | shuffle 3 bool false",
    "HDF5OutputParameter": "file_name 1 string",
    "MemoryDataParameter": """
        batch_size 1 uint32 | channels 2 uint32 | height 3 uint32 | width 4 uint32""",
    "WindowDataParameter": """
        source 1 string | scale 2 float 1 | mean_file 3 string | batch_size 4 uint32
        crop_size 5 uint32 0 | mirror 6 bool false | fg_threshold 7 float 0.5
        bg_threshold 8 float 0.5 | fg_fraction 9 float 0.25 | context_pad 10 uint32 0
        crop_mode 11 string warp | cache_images 12 bool false | root_folder 13 string""",
    "PythonParameter": """
        module 1 string | layer 2 string | param_str 3 string | share_in_parallel 4 bool false""",
    "FlattenParameter": "axis 1 int32 1 | end_axis 2 int32 -1",
    "ReshapeParameter": "shape 1 BlobShape | axis 2 int32 0 | num_axes 3 int32 -1",
    "PowerParameter": "power 1 float 1 | scale 2 float 1 | shift 3 float 0",
    "ExpParameter": "base 1 float -1 | scale 2 float 1 | shift 3 float 0",
    "LogParameter": "base 1 float -1 | scale 2 float 1 | shift 3 float 0",
    "ThresholdParameter": "threshold 1 float 0",
    "ELUParameter": "alpha 1 float 1",
    "SwishParameter": "beta 1 float 1",
    "ClipParameter": "min 1 !float | max 2 !float",
    "PReLUParameter": "filler 1 FillerParameter | channel_shared 2 bool false",
    "MVNParameter": """
        normalize_variance 1 bool true | across_channels 2 bool false | eps 3 float 1e-9""",
    "ReductionParameter": "operation 1 ReductionOp SUM | axis 2 int32 0 | coeff 3 float 1",
    "CropParameter": "axis 1 int32 2 | offset 2 *uint32",
    "TileParameter": "axis 1 int32 1 | tiles 2 int32",
    "EmbedParameter": """
        num_output 1 uint32 | input_dim 2 uint32 | bias_term 3 bool true
        weight_filler 4 FillerParameter | bias_filler 5 FillerParameter""",
    "ParameterParameter": "shape 1 BlobShape",
    "RecurrentParameter": """
        num_output 1 uint32 0 | weight_filler 2 FillerParameter | bias_filler 3 FillerParameter
        debug_info 4 bool false | expose_hidden 5 bool false""",
    "ContrastiveLossParameter": "margin 1 float 1 | legacy_version 2 bool false",
    "HingeLossParameter": "norm 1 Norm L1",
    "InfogainLossParameter": "source 1 string | axis 2 int32 1",
    "SPPParameter": "pyramid_height 1 uint32 | pool 2 PoolMethod MAX | engine 6 Engine DEFAULT",
}

# LayerParameter's per-layer fields 102..148 (docs/caffe_format.md §1.1), with their message types.
LAYER_PARAMS = """accuracy argmax concat contrastive_loss convolution data dropout dummy_data
    eltwise exp hdf5_data hdf5_output hinge_loss image_data infogain_loss inner_product lrn
    memory_data mvn pooling power relu sigmoid softmax slice tanh threshold window_data python
    prelu spp reshape log flatten reduction embed tile batch_norm elu bias scale input crop
    parameter recurrent swish clip""".split()  # noqa: SIM905 - reads like the spec's list
_SPECIAL_TYPE_NAMES = {
    "argmax": "ArgMaxParameter",
    "hdf5_data": "HDF5DataParameter",
    "hdf5_output": "HDF5OutputParameter",
    "lrn": "LRNParameter",
    "mvn": "MVNParameter",
    "relu": "ReLUParameter",
    "tanh": "TanHParameter",
    "prelu": "PReLUParameter",
    "spp": "SPPParameter",
    "elu": "ELUParameter",
}

V1_FIELDS = """
    layer 1 V0LayerParameter | bottom 2 *string | top 3 *string | name 4 string
    type 5 LayerType NONE | blobs 6 *BlobProto | blobs_lr 7 *float | weight_decay 8 *float
    concat_param 9 ConcatParameter | convolution_param 10 ConvolutionParameter
    data_param 11 DataParameter | dropout_param 12 DropoutParameter
    hdf5_data_param 13 HDF5DataParameter | hdf5_output_param 14 HDF5OutputParameter
    image_data_param 15 ImageDataParameter | infogain_loss_param 16 InfogainLossParameter
    inner_product_param 17 InnerProductParameter | lrn_param 18 LRNParameter
    pooling_param 19 PoolingParameter | window_data_param 20 WindowDataParameter
    power_param 21 PowerParameter | memory_data_param 22 MemoryDataParameter
    argmax_param 23 ArgMaxParameter | eltwise_param 24 EltwiseParameter
    threshold_param 25 ThresholdParameter | dummy_data_param 26 DummyDataParameter
    accuracy_param 27 AccuracyParameter | hinge_loss_param 29 HingeLossParameter
    relu_param 30 ReLUParameter | slice_param 31 SliceParameter | include 32 *NetStateRule
    exclude 33 *NetStateRule | mvn_param 34 MVNParameter | loss_weight 35 *float
    transform_param 36 TransformationParameter | tanh_param 37 TanHParameter
    sigmoid_param 38 SigmoidParameter | softmax_param 39 SoftmaxParameter
    contrastive_loss_param 40 ContrastiveLossParameter | exp_param 41 ExpParameter
    loss_param 42 LossParameter | param 1001 *string | blob_share_mode 1002 *DimCheckMode"""

V0_NUMBERS = """name=1 type=2 num_output=3 biasterm=4 weight_filler=5 bias_filler=6 pad=7
    kernelsize=8 group=9 stride=10 pool=11 dropout_ratio=12 local_size=13 alpha=14 beta=15
    source=16 scale=17 meanfile=18 batchsize=19 cropsize=20 mirror=21 k=22 blobs=50 blobs_lr=51
    weight_decay=52 rand_skip=53 det_fg_threshold=54 det_bg_threshold=55 det_fg_fraction=56
    det_context_pad=58 det_crop_mode=59 new_num=60 new_channels=61 new_height=62 new_width=63
    shuffle_images=64 concat_dim=65 hdf5_output_param=1001"""

V1_LAYER_TYPES = """NONE=0 ACCURACY=1 BNLL=2 CONCAT=3 CONVOLUTION=4 DATA=5 DROPOUT=6
    EUCLIDEAN_LOSS=7 FLATTEN=8 HDF5_DATA=9 HDF5_OUTPUT=10 IM2COL=11 IMAGE_DATA=12
    INFOGAIN_LOSS=13 INNER_PRODUCT=14 LRN=15 MULTINOMIAL_LOGISTIC_LOSS=16 POOLING=17 RELU=18
    SIGMOID=19 SOFTMAX=20 SOFTMAX_LOSS=21 SPLIT=22 TANH=23 WINDOW_DATA=24 ELTWISE=25 POWER=26
    SIGMOID_CROSS_ENTROPY_LOSS=27 HINGE_LOSS=28 MEMORY_DATA=29 ARGMAX=30 THRESHOLD=31
    DUMMY_DATA=32 SLICE=33 MVN=34 ABSVAL=35 SILENCE=36 CONTRASTIVE_LOSS=37 EXP=38
    DECONVOLUTION=39"""

ENUMS = {
    "Phase": "TRAIN=0 TEST=1",
    "FillerParameter.VarianceNorm": "FAN_IN=0 FAN_OUT=1 AVERAGE=2",
    "ParamSpec.DimCheckMode": "STRICT=0 PERMISSIVE=1",
    "V1LayerParameter.DimCheckMode": "STRICT=0 PERMISSIVE=1",
    "LossParameter.NormalizationMode": "FULL=0 VALID=1 BATCH_SIZE=2 NONE=3",
    "SolverParameter.SolverMode": "CPU=0 GPU=1",
    "SolverParameter.SnapshotFormat": "HDF5=0 BINARYPROTO=1",
    "SolverParameter.SolverType": "SGD=0 NESTEROV=1 ADAGRAD=2 RMSPROP=3 ADADELTA=4 ADAM=5",
    "ConvolutionParameter.Engine": "DEFAULT=0 CAFFE=1 CUDNN=2",
    "PoolingParameter.PoolMethod": "MAX=0 AVE=1 STOCHASTIC=2",
    "PoolingParameter.RoundMode": "CEIL=0 FLOOR=1",
    "LRNParameter.NormRegion": "ACROSS_CHANNELS=0 WITHIN_CHANNEL=1",
    "DataParameter.DB": "LEVELDB=0 LMDB=1",
    "EltwiseParameter.EltwiseOp": "PROD=0 SUM=1 MAX=2",
    "ReductionParameter.ReductionOp": "SUM=1 ASUM=2 SUMSQ=3 MEAN=4",
    "HingeLossParameter.Norm": "L1=1 L2=2",
    "V0LayerParameter.PoolMethod": "MAX=0 AVE=1 STOCHASTIC=2",
    "V1LayerParameter.LayerType": V1_LAYER_TYPES,
}


def _rows(table: str) -> list[list[str]]:
    return [row.split() for row in table.replace("\n", "|").split("|") if row.strip()]


def _cases() -> list[tuple[str, list[str]]]:
    cases = [(message, row) for message, table in SCHEMA.items() for row in _rows(table)]
    cases += [("V1LayerParameter", row) for row in _rows(V1_FIELDS)]
    for number, name in enumerate(LAYER_PARAMS, start=102):
        type_name = _SPECIAL_TYPE_NAMES.get(
            name, "".join(part.capitalize() for part in name.split("_")) + "Parameter"
        )
        cases.append(("LayerParameter", [f"{name}_param", str(number), type_name]))
    return cases


def _expected_default(fd: FD, text: str | None) -> object:
    if fd.type == FD.TYPE_ENUM:
        return fd.enum_type.values_by_name[text].number if text else fd.enum_type.values[0].number
    if fd.type == FD.TYPE_BOOL:
        return text == "true"
    if fd.type in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        return float(np.float32(text)) if text and fd.type == FD.TYPE_FLOAT else float(text or 0)
    if fd.type in (FD.TYPE_STRING, FD.TYPE_BYTES):
        return text or ("" if fd.type == FD.TYPE_STRING else b"")
    return int(text or 0)


@pytest.mark.parametrize(
    ("message", "row"), _cases(), ids=lambda x: x if isinstance(x, str) else x[0]
)
def test_field_matches_spec(message: str, row: list[str]) -> None:
    name, number, type_text, *default = row
    descriptor = getattr(pb, message).DESCRIPTOR
    assert name in descriptor.fields_by_name, f"{message} lacks field {name}"
    fd = descriptor.fields_by_name[name]
    assert fd.number == int(number)
    marker = type_text[0] if type_text[0] in "*+!" else ""
    type_name = type_text[len(marker) :]
    assert fd.is_repeated == (marker in ("*", "+"))
    assert fd.is_packed == (marker == "+")
    assert fd.is_required == (marker == "!")
    if type_name in _SCALARS:
        assert fd.type == _SCALARS[type_name]
    elif fd.type == FD.TYPE_ENUM:
        assert fd.enum_type.name == type_name
    else:
        assert fd.type == FD.TYPE_MESSAGE and fd.message_type.name == type_name
    if not fd.is_repeated and fd.type != FD.TYPE_MESSAGE:
        expected = _expected_default(fd, default[0] if default else None)
        assert fd.default_value == expected, f"{message}.{name} default"


def test_every_listed_message_has_exactly_the_listed_fields() -> None:
    """No extra fields slipped in: numbers in the schema are exactly those of the spec."""
    listed: dict[str, set[str]] = {}
    for message, row in _cases():
        listed.setdefault(message, set()).add(row[0])
    for message, names in listed.items():
        assert set(getattr(pb, message).DESCRIPTOR.fields_by_name) == names, message


def test_layer_parameter_numbers_100_to_148_are_dense() -> None:
    numbers = {fd.number for fd in pb.LayerParameter.DESCRIPTOR.fields}
    assert numbers == set(range(1, 12)) | set(range(100, 149))


def test_solver_parameter_has_all_42_fields() -> None:
    numbers = sorted(fd.number for fd in pb.SolverParameter.DESCRIPTOR.fields)
    assert numbers == list(range(1, 43))


def test_v0_layer_parameter_numbers() -> None:
    fields = pb.V0LayerParameter.DESCRIPTOR.fields_by_name
    expected = dict(item.split("=") for item in V0_NUMBERS.split())
    assert {name: fd.number for name, fd in fields.items()} == {
        k: int(v) for k, v in expected.items()
    }
    assert fields["type"].type == FD.TYPE_STRING
    assert fields["blobs"].message_type.name == "BlobProto"
    assert fields["hdf5_output_param"].message_type.name == "HDF5OutputParameter"


@pytest.mark.parametrize("enum_path", sorted(ENUMS))
def test_enum_values(enum_path: str) -> None:
    parts = enum_path.split(".")
    if len(parts) == 1:
        enum = pb.DESCRIPTOR.enum_types_by_name[parts[0]]
    else:
        enum = getattr(pb, parts[0]).DESCRIPTOR.enum_types_by_name[parts[1]]
    expected = {k: int(v) for k, v in (item.split("=") for item in ENUMS[enum_path].split())}
    assert {v.name: v.number for v in enum.values} == expected


@pytest.mark.parametrize(
    "message",
    ["ConvolutionParameter", "LRNParameter", "PoolingParameter", "ReLUParameter",
     "SigmoidParameter", "SoftmaxParameter", "TanHParameter", "SPPParameter"],
)  # fmt: skip
def test_engine_enums(message: str) -> None:
    enum = getattr(pb, message).DESCRIPTOR.enum_types_by_name["Engine"]
    assert [(v.name, v.number) for v in enum.values] == [("DEFAULT", 0), ("CAFFE", 1), ("CUDNN", 2)]


def test_package_and_syntax() -> None:
    assert pb.DESCRIPTOR.package == "caffe"
    assert pb.NetParameter.DESCRIPTOR.full_name == "caffe.NetParameter"


def test_packed_encoding_on_the_wire() -> None:
    """Packed fields are written as one length-delimited run; Datum.float_data is not."""
    blob = pb.BlobProto()
    blob.data.extend([1.0, 2.0])
    assert blob.SerializeToString() == b"\x2a\x08" + np.array([1, 2], "<f4").tobytes()
    datum = pb.Datum()
    datum.float_data.extend([1.0, 2.0])
    one, two = (np.array([v], "<f4").tobytes() for v in (1, 2))
    assert datum.SerializeToString() == b"\x35" + one + b"\x35" + two
    shape = pb.BlobShape(dim=[2, 300])
    assert shape.SerializeToString() == b"\x0a\x03\x02\xac\x02"


def test_clip_parameter_is_incomplete_without_min_and_max() -> None:
    clip = pb.ClipParameter(min=-1.0)
    assert not clip.IsInitialized()
    clip.max = 1.0
    assert clip.IsInitialized()
