"""Real-world legacy files load and run: a V1 VGG-style deploy prototxt (`layers`, `input:`
+ `input_dim:`, enum types) with a V1 .caffemodel whose blobs carry legacy 4-D dims (as the
published VGG and CaffeNet models do)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import caffe
from caffe.errors import WeightsError
from caffe.proto import caffe_pb2 as pb

V1_DEPLOY = """name: "VGG_style"
input: "data"
input_dim: 2
input_dim: 3
input_dim: 8
input_dim: 8
layers { bottom: "data" top: "conv1" name: "conv1" type: CONVOLUTION
  convolution_param { num_output: 4 pad: 1 kernel_size: 3 } }
layers { bottom: "conv1" top: "conv1" name: "relu1" type: RELU }
layers { bottom: "conv1" top: "pool1" name: "pool1" type: POOLING
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layers { bottom: "pool1" top: "fc" name: "fc" type: INNER_PRODUCT
  inner_product_param { num_output: 5 } }
layers { bottom: "fc" top: "prob" name: "prob" type: SOFTMAX }
"""


def legacy_blob(values: np.ndarray, dims: tuple[int, int, int, int]) -> pb.BlobProto:
    blob = pb.BlobProto(num=dims[0], channels=dims[1], height=dims[2], width=dims[3])
    blob.data.extend(values.reshape(-1).tolist())
    return blob


def write_v1_caffemodel(path, rng) -> dict[str, np.ndarray]:
    arrays = {
        "conv1_w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "conv1_b": rng.standard_normal(4).astype(np.float32),
        "fc_w": rng.standard_normal((5, 64)).astype(np.float32) * 0.1,
        "fc_b": rng.standard_normal(5).astype(np.float32),
    }
    net = pb.NetParameter(name="VGG_style")
    conv = net.layers.add(name="conv1", type=pb.V1LayerParameter.CONVOLUTION)
    conv.blobs.append(legacy_blob(arrays["conv1_w"], (4, 3, 3, 3)))
    conv.blobs.append(legacy_blob(arrays["conv1_b"], (1, 1, 1, 4)))
    net.layers.add(name="relu1", type=pb.V1LayerParameter.RELU)
    fc = net.layers.add(name="fc", type=pb.V1LayerParameter.INNER_PRODUCT)
    fc.blobs.append(legacy_blob(arrays["fc_w"], (1, 1, 5, 64)))  # IP weights as old files have
    fc.blobs.append(legacy_blob(arrays["fc_b"], (1, 1, 1, 5)))
    path.write_bytes(net.SerializeToString())
    return arrays


def test_v1_prototxt_and_v1_caffemodel_load_and_run(tmp_path):
    (tmp_path / "deploy.prototxt").write_text(V1_DEPLOY)
    rng = np.random.default_rng(0)
    arrays = write_v1_caffemodel(tmp_path / "model.caffemodel", rng)
    net = caffe.Net(str(tmp_path / "deploy.prototxt"), caffe.TEST,
                    weights=str(tmp_path / "model.caffemodel"))  # fmt: skip
    assert net.inputs == ["data"] and net.blobs["data"].shape == [2, 3, 8, 8]
    assert [layer.type for layer in net.layers] == [
        "Input", "Convolution", "ReLU", "Pooling", "InnerProduct", "Softmax"]  # fmt: skip
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    prob = net.forward(data=x)["prob"]
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    h = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), t["conv1_w"], t["conv1_b"],
                                              padding=1))  # fmt: skip
    h = torch.nn.functional.max_pool2d(h, 2).reshape(2, -1)
    expected = torch.softmax(h @ t["fc_w"].t() + t["fc_b"], dim=1)
    np.testing.assert_allclose(prob, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_weights_shape_mismatch_names_layer_and_both_shapes(tmp_path):
    (tmp_path / "deploy.prototxt").write_text(V1_DEPLOY.replace("num_output: 5", "num_output: 6"))
    write_v1_caffemodel(tmp_path / "model.caffemodel", np.random.default_rng(1))
    with pytest.raises(WeightsError, match=r"layer 'fc'.*1 1 5 64 \(320\).*6 64 \(384\)"):
        caffe.Net(str(tmp_path / "deploy.prototxt"), caffe.TEST,
                  weights=str(tmp_path / "model.caffemodel"))  # fmt: skip


def test_truncated_caffemodel_says_so(tmp_path):
    (tmp_path / "deploy.prototxt").write_text(V1_DEPLOY)
    write_v1_caffemodel(tmp_path / "model.caffemodel", np.random.default_rng(2))
    data = (tmp_path / "model.caffemodel").read_bytes()
    (tmp_path / "model.caffemodel").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match=r"model\.caffemodel.*truncated"):
        caffe.Net(str(tmp_path / "deploy.prototxt"), caffe.TEST,
                  weights=str(tmp_path / "model.caffemodel"))  # fmt: skip
