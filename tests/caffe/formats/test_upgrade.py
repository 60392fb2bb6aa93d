"""The upgrade chain of docs/caffe_format.md §1.3 on small legacy definitions."""

from __future__ import annotations

import logging
import os

import pytest
from google.protobuf import text_format

from caffe.errors import PrototxtError
from caffe.formats.upgrade import V1_TYPE_TO_V2, upgrade_net_param, upgrade_solver_param
from caffe.proto import caffe_pb2 as pb

VGG_V1 = """
name: "VGG_ILSVRC_16_layers"
input: "data"
input_dim: 10
input_dim: 3
input_dim: 224
input_dim: 224
layers {
  bottom: "data"
  top: "conv1_1"
  name: "conv1_1"
  type: CONVOLUTION
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  convolution_param { num_output: 64 pad: 1 kernel_size: 3 }
}
layers { bottom: "conv1_1" top: "conv1_1" name: "relu1_1" type: RELU }
layers {
  bottom: "conv1_1" top: "pool1" name: "pool1" type: POOLING
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layers {
  bottom: "pool1" top: "fc8" name: "fc8" type: INNER_PRODUCT
  inner_product_param { num_output: 1000 }
}
layers { bottom: "fc8" top: "prob" name: "prob" type: SOFTMAX }
"""


def _net(text: str) -> pb.NetParameter:
    return text_format.Parse(text, pb.NetParameter())


def test_vgg_v1_with_input_dim_becomes_input_layer_and_v2_types(caplog) -> None:
    net = _net(VGG_V1)
    with caplog.at_level(logging.INFO, logger="caffe"):
        assert upgrade_net_param(net, "VGG_ILSVRC_16_layers_deploy.prototxt")
    assert len(net.layers) == 0 and len(net.input) == 0 and len(net.input_dim) == 0
    assert [(layer.name, layer.type) for layer in net.layer] == [
        ("input", "Input"),
        ("conv1_1", "Convolution"),
        ("relu1_1", "ReLU"),
        ("pool1", "Pooling"),
        ("fc8", "InnerProduct"),
        ("prob", "Softmax"),
    ]
    assert list(net.layer[0].top) == ["data"]
    assert list(net.layer[0].input_param.shape[0].dim) == [10, 3, 224, 224]
    conv = net.layer[1]
    assert list(conv.bottom) == ["data"] and list(conv.top) == ["conv1_1"]
    assert conv.convolution_param.num_output == 64 and list(conv.convolution_param.pad) == [1]
    assert [(p.lr_mult, p.decay_mult) for p in conv.param] == [(1, 1), (2, 0)]
    assert net.layer[3].pooling_param.stride == 2
    messages = [r.getMessage() for r in caplog.records]
    assert (
        "Attempting to upgrade input file specified using deprecated V1LayerParameter: "
        "VGG_ILSVRC_16_layers_deploy.prototxt" in messages
    )
    assert any("deprecated input fields" in m for m in messages)


def test_v1_param_names_share_mode_and_all_param_messages_move() -> None:
    net = _net("""
      layers { name: "a" type: INNER_PRODUCT bottom: "x" top: "y"
               param: "w" param: "b" blob_share_mode: PERMISSIVE
               blobs_lr: 3 loss_weight: 0.5
               include { phase: TRAIN } exclude { stage: "s" }
               inner_product_param { num_output: 7 } loss_param { ignore_label: 4 }
               dropout_param { dropout_ratio: 0.2 } transform_param { scale: 2 } }
    """)
    upgrade_net_param(net, "x.prototxt")
    layer = net.layer[0]
    assert [p.name for p in layer.param] == ["w", "b"]
    assert layer.param[0].share_mode == pb.ParamSpec.PERMISSIVE
    assert not layer.param[1].HasField("share_mode")
    assert layer.param[0].lr_mult == 3 and not layer.param[1].HasField("lr_mult")
    assert list(layer.loss_weight) == [0.5]
    assert layer.include[0].phase == pb.TRAIN and list(layer.exclude[0].stage) == ["s"]
    assert layer.inner_product_param.num_output == 7
    assert layer.loss_param.ignore_label == 4
    assert layer.dropout_param.dropout_ratio == pytest.approx(0.2)
    assert layer.transform_param.scale == 2


def test_v1_blobs_are_carried_over() -> None:
    net = _net('layers { name: "ip" type: INNER_PRODUCT blobs { num: 1 data: 1.5 } }')
    upgrade_net_param(net, "m.caffemodel")
    assert net.layer[0].blobs[0].num == 1 and list(net.layer[0].blobs[0].data) == [1.5]


def test_every_v1_type_has_a_v2_name() -> None:
    for value in pb.V1LayerParameter.LayerType.values():
        assert value in V1_TYPE_TO_V2
    assert V1_TYPE_TO_V2[pb.V1LayerParameter.SOFTMAX_LOSS] == "SoftmaxWithLoss"
    assert V1_TYPE_TO_V2[pb.V1LayerParameter.TANH] == "TanH"
    assert V1_TYPE_TO_V2[pb.V1LayerParameter.IM2COL] == "Im2col"


def test_both_layer_and_layers_is_an_error_naming_the_file() -> None:
    net = _net('layer { name: "a" type: "ReLU" } layers { name: "b" type: RELU }')
    with pytest.raises(PrototxtError, match=r"mixed\.prototxt.*both 'layer'.*'layers'"):
        upgrade_net_param(net, "mixed.prototxt")


def test_input_shape_form_and_existing_layers_stay_after_input() -> None:
    net = _net("""
      input: "data" input_shape { dim: 1 dim: 3 dim: 299 dim: 299 }
      input: "label" input_shape { dim: 1 }
      layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" }
    """)
    assert upgrade_net_param(net, "inception_v3.prototxt")
    assert [layer.name for layer in net.layer] == ["input", "conv"]
    assert list(net.layer[0].top) == ["data", "label"]
    assert [list(s.dim) for s in net.layer[0].input_param.shape] == [[1, 3, 299, 299], [1]]
    assert len(net.input_shape) == 0


def test_inputs_without_shapes_are_dropped() -> None:
    net = _net('input: "data" layer { name: "a" type: "ReLU" bottom: "data" top: "a" }')
    assert upgrade_net_param(net, "old.caffemodel")
    assert len(net.input) == 0 and [layer.name for layer in net.layer] == ["a"]


def test_wrong_number_of_input_dims_names_the_file() -> None:
    net = _net('input: "data" input_dim: 1 input_dim: 3 input_dim: 224')
    with pytest.raises(PrototxtError, match=r"bad\.prototxt: 1 input\(s\) need 4 input_dim"):
        upgrade_net_param(net, "bad.prototxt")


def test_batch_norm_with_three_params_is_frozen() -> None:
    net = _net("""
      layer { name: "bn" type: "BatchNorm" param { lr_mult: 1 } param { lr_mult: 1 }
              param { lr_mult: 1 decay_mult: 2 } }
      layer { name: "bn2" type: "BatchNorm" param { lr_mult: 1 } }
    """)
    assert upgrade_net_param(net, "bn.prototxt")
    assert [(p.lr_mult, p.decay_mult) for p in net.layer[0].param] == [(0, 0)] * 3
    assert net.layer[1].param[0].lr_mult == 1  # only the 3-param form is upgraded
    assert not upgrade_net_param(net, "bn.prototxt")  # a second pass changes nothing


def test_current_net_is_left_alone() -> None:
    net = _net('name: "n" layer { name: "a" type: "Input" top: "x" }')
    before = net.SerializeToString()
    assert not upgrade_net_param(net, "n.prototxt")
    assert net.SerializeToString() == before


def test_data_transformation_fields_move_to_transform_param() -> None:
    net = _net("""
      layers { name: "d" type: DATA top: "data"
               data_param { source: "db" scale: 0.5 mean_file: "m" crop_size: 3 mirror: true
                            batch_size: 8 } }
      layers { name: "i" type: IMAGE_DATA top: "img" image_data_param { source: "l" mirror: true } }
    """)
    upgrade_net_param(net, "data.prototxt")
    data, image = net.layer
    assert data.type == "Data"
    assert data.transform_param.scale == 0.5 and data.transform_param.mean_file == "m"
    assert data.transform_param.crop_size == 3 and data.transform_param.mirror
    for name in ("scale", "mean_file", "crop_size", "mirror"):
        assert not data.data_param.HasField(name)
    assert data.data_param.batch_size == 8 and data.data_param.source == "db"
    assert image.transform_param.mirror and not image.image_data_param.HasField("mirror")


def test_v0_net_folds_padding_and_maps_fields() -> None:
    net = _net("""
      name: "v0" input: "data" input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
      layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
      layers { layer { name: "conv1" type: "conv" num_output: 4 kernelsize: 3 stride: 2
                       biasterm: false weight_filler { type: "gaussian" std: 0.01 }
                       blobs_lr: 1 blobs_lr: 2 }
               bottom: "pad1" top: "conv1" }
      layers { layer { name: "pool1" type: "pool" pool: AVE kernelsize: 2 stride: 2 }
               bottom: "conv1" top: "pool1" }
      layers { layer { name: "fc" type: "innerproduct" num_output: 10 } bottom: "pool1" top: "fc" }
      layers { layer { name: "drop" type: "dropout" dropout_ratio: 0.3 } bottom: "fc" top: "fc" }
      layers { layer { name: "loss" type: "softmax_loss" } bottom: "fc" bottom: "label" }
    """)
    net.input.append("label")
    net.input_dim.extend([1, 1, 1, 1])
    assert upgrade_net_param(net, "v0.prototxt")
    assert [(layer.name, layer.type) for layer in net.layer] == [
        ("input", "Input"),
        ("conv1", "Convolution"),
        ("pool1", "Pooling"),
        ("fc", "InnerProduct"),
        ("drop", "Dropout"),
        ("loss", "SoftmaxWithLoss"),
    ]
    conv = net.layer[1]
    assert list(conv.bottom) == ["data"]  # rewired past the padding layer
    cp = conv.convolution_param
    assert (cp.num_output, list(cp.kernel_size), list(cp.stride), list(cp.pad)) == (
        4,
        [3],
        [2],
        [2],
    )
    assert not cp.bias_term and cp.weight_filler.type == "gaussian"
    assert [p.lr_mult for p in conv.param] == [1, 2]
    pool = net.layer[2].pooling_param
    assert (pool.pool, pool.kernel_size, pool.stride) == (pb.PoolingParameter.AVE, 2, 2)
    assert net.layer[3].inner_product_param.num_output == 10
    assert net.layer[4].dropout_param.dropout_ratio == pytest.approx(0.3)


def test_v0_unknown_type_is_an_error() -> None:
    net = _net('layers { layer { name: "x" type: "warp_drive" } }')
    with pytest.raises(PrototxtError, match=r"v0\.prototxt: unknown V0 layer type 'warp_drive'"):
        upgrade_net_param(net, "v0.prototxt")


def test_v0_field_the_layer_kind_lacks_is_reported(caplog) -> None:
    net = _net('layers { layer { name: "r" type: "relu" num_output: 3 } }')
    with caplog.at_level(logging.ERROR, logger="caffe"):
        upgrade_net_param(net, "v0.prototxt")
    assert net.layer[0].type == "ReLU"
    assert any("num_output" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- solvers


def _solver(text: str) -> pb.SolverParameter:
    return text_format.Parse(text, pb.SolverParameter())


@pytest.mark.parametrize(
    ("enum_name", "type_name"),
    [("SGD", "SGD"), ("NESTEROV", "Nesterov"), ("ADAGRAD", "AdaGrad"),
     ("RMSPROP", "RMSProp"), ("ADADELTA", "AdaDelta"), ("ADAM", "Adam")],
)  # fmt: skip
def test_solver_type_enum_becomes_type_string(enum_name: str, type_name: str) -> None:
    solver = _solver(f'solver_type: {enum_name} snapshot_prefix: "p"')
    assert upgrade_solver_param(solver, "solver.prototxt")
    assert solver.type == type_name and not solver.HasField("solver_type")


def test_solver_type_and_type_together_is_an_error() -> None:
    solver = _solver('solver_type: ADAM type: "Adam"')
    with pytest.raises(PrototxtError, match=r"s\.prototxt: .*cannot both be specified"):
        upgrade_solver_param(solver, "s.prototxt")


def test_unset_snapshot_prefix_is_the_solver_path_without_extension() -> None:
    solver = _solver('type: "SGD"')
    assert upgrade_solver_param(solver, "examples/mnist/lenet_solver.prototxt")
    assert solver.snapshot_prefix == "examples/mnist/lenet_solver"


def test_directory_snapshot_prefix_gets_the_solver_stem(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    os.mkdir("snapshots")
    solver = _solver('snapshot_prefix: "snapshots"')
    assert upgrade_solver_param(solver, "models/x/solver.prototxt")
    assert solver.snapshot_prefix == os.path.join("snapshots", "solver")


def test_plain_snapshot_prefix_is_kept(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    solver = _solver('snapshot_prefix: "snapshots/lenet"')
    assert not upgrade_solver_param(solver, "solver.prototxt")
    assert solver.snapshot_prefix == "snapshots/lenet"


def test_prefix_rule_can_be_skipped() -> None:
    solver = _solver('type: "SGD"')
    assert not upgrade_solver_param(solver, "solver.prototxt", fix_snapshot_prefix=False)
    assert not solver.HasField("snapshot_prefix")
