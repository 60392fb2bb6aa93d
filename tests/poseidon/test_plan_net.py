"""poseidon.commands.plan_net: the job's train net as the solver builds it, its data layers given
batches and shapes, built shapes-only."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from caffe.proto import caffe_pb2
from poseidon.commands.plan_net import (
    BATCH_SIZE_FIELDS,
    give_batch_size,
    give_input_shapes,
    job_net_param,
    parse_input_shapes,
    plan_net,
)

NET = """
name: "staged"
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 4 dim: 10 } shape { dim: 4 } } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
        include { stage: "big" } inner_product_param { num_output: 50 } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
        exclude { stage: "big" } inner_product_param { num_output: 5 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""


def test_parse_input_shapes() -> None:
    assert parse_input_shapes(["data=32,3,224,224", " label = 32"]) == {
        "data": (32, 3, 224, 224),
        "label": (32,),
    }
    for bad in ("data", "data=", "=3", "data=3,x", "data=0,3"):
        with pytest.raises(ValueError, match="want TOP=N,C,H,W"):
            parse_input_shapes([bad])


def test_the_solvers_train_net_and_iter_size(tmp_path: Path) -> None:
    net = tmp_path / "net.prototxt"
    net.write_text(NET)
    solver = tmp_path / "solver.prototxt"
    solver.write_text(f'net: "{net}" iter_size: 3 train_state {{ stage: "big" }}\n')
    target = plan_net(solver=str(solver))
    assert target.iter_size == 3
    assert target.net.params["fc"][0].shape == [50, 10]  # the solver's train_state applies
    assert plan_net(model=str(net)).net.params["fc"][0].shape == [5, 10]
    other = tmp_path / "other.prototxt"
    other.write_text(NET.replace("num_output: 50", "num_output: 70"))
    param, iter_size = job_net_param(model=str(other), solver=str(solver))
    assert iter_size == 3 and param.state.phase == caffe_pb2.TRAIN
    assert plan_net(str(other), str(solver), iter_size=1).net.params["fc"][0].shape == [70, 10]


DATA_LAYERS = """
layer { name: "a" type: "Data" top: "a" data_param { batch_size: 1 } }
layer { name: "b" type: "ImageData" top: "b" image_data_param { batch_size: 1 } }
layer { name: "c" type: "WindowData" top: "c" window_data_param { batch_size: 1 } }
layer { name: "d" type: "HDF5Data" top: "d" hdf5_data_param { batch_size: 1 } }
layer { name: "e" type: "MemoryData" top: "e" memory_data_param { batch_size: 1 } }
layer { name: "f" type: "Input" top: "f" top: "f2"
        input_param { shape { dim: 1 dim: 3 } shape { dim: 1 } } }
layer { name: "g" type: "DummyData" top: "g" dummy_data_param { num: 1 channels: 2 } }
layer { name: "h" type: "DummyData" top: "h" dummy_data_param { shape { dim: 1 dim: 2 } } }
layer { name: "given" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "fc" type: "InnerProduct" bottom: "a" top: "fc" }
"""


def test_batch_size_of_every_data_layer() -> None:
    param = text_format.Parse(DATA_LAYERS, caffe_pb2.NetParameter())
    give_batch_size(param, 8, given={"x"})
    layers = {layer.name: layer for layer in param.layer}
    for name, field in zip("abcde", BATCH_SIZE_FIELDS.values()):
        assert getattr(layers[name], field).batch_size == 8
    assert [list(s.dim) for s in layers["f"].input_param.shape] == [[8, 3], [8]]
    assert list(layers["g"].dummy_data_param.num) == [8]
    assert list(layers["h"].dummy_data_param.shape[0].dim) == [8, 2]
    assert list(layers["given"].input_param.shape[0].dim) == [1, 3]  # its shape was given
    python = 'layer { name: "py" type: "Python" top: "data" }'
    with pytest.raises(ValueError, match=r"layer 'py' \(type Python\) has no batch size"):
        give_batch_size(text_format.Parse(python, caffe_pb2.NetParameter()), 8)


def test_input_shapes_make_input_layers() -> None:
    text = """layer { name: "data" type: "Data" top: "data" top: "label"
                      include { phase: TRAIN } data_param { batch_size: 2 } }"""
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    give_input_shapes(param, {"data": (16, 3, 32, 32)})
    (layer,) = param.layer
    assert layer.type == "Input" and list(layer.top) == ["data", "label"]
    assert [list(s.dim) for s in layer.input_param.shape] == [[16, 3, 32, 32], [16]]
    assert layer.include[0].phase == caffe_pb2.TRAIN and not layer.HasField("data_param")
    with pytest.raises(ValueError, match="names fc: not a top of a data layer"):
        give_input_shapes(param, {"fc": (1,)})
