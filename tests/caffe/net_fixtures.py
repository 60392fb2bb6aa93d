"""Small nets written as prototxt text, built with caffe.Net(NetParameter)."""

from __future__ import annotations

from google.protobuf import text_format

import caffe
from caffe.proto import caffe_pb2


def build_net(text: str, phase: int = caffe.TRAIN, level: int = 0, stages=()) -> caffe.Net:
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    param.state.phase = phase
    param.state.level = level
    param.state.stage.extend(stages)
    return caffe.Net(param)


MLP = """
name: "mlp"
layer { name: "input" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 5 } shape { dim: 4 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param { num_output: 6 weight_filler { type: "xavier" }
                              bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""
