"""A tiny deploy net (Input → InnerProduct → Softmax) on disk, and its forward in numpy,
for the Classifier, Detector and classify/detect script tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import caffe

CHANNELS = 3
SIZE = 8  # the net input is SIZE×SIZE
CLASSES = 4
# 5 does not divide the 10 crops per image, so forward_all pads a last partial batch.
BATCH = 5

DEPLOY = f"""
name: "tiny_deploy"
layer {{ name: "input" type: "Input" top: "data"
        input_param {{ shape {{ dim: {BATCH} dim: {CHANNELS} dim: {SIZE} dim: {SIZE} }} }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param {{ num_output: {CLASSES} weight_filler {{ type: "gaussian" std: 0.1 }}
                              bias_filler {{ type: "uniform" min: -0.5 max: 0.5 }} }} }}
layer {{ name: "prob" type: "Softmax" bottom: "ip" top: "prob" }}
"""


def write_deploy_net(directory: Path) -> tuple[str, str]:
    """(model_file, weights_file) of the tiny net with random weights, in `directory`."""
    model = directory / "deploy.prototxt"
    model.write_text(DEPLOY)
    weights = directory / "tiny.caffemodel"
    caffe.Net(str(model), caffe.TEST).save(str(weights))
    return str(model), str(weights)


def numpy_forward(net: caffe.Net, batch: np.ndarray) -> np.ndarray:
    """softmax(W·x + b) of each N×K×H×W item, computed without the engine's layers."""
    weight, bias = (blob.data.astype(np.float64) for blob in net.params["ip"])
    scores = batch.reshape(len(batch), -1).astype(np.float64) @ weight.T + bias
    scores = np.exp(scores - scores.max(axis=1, keepdims=True))
    return scores / scores.sum(axis=1, keepdims=True)


def preprocess(
    crop: np.ndarray, mean: np.ndarray, raw_scale: float, input_scale: float, swap
) -> np.ndarray:
    """The Transformer's steps for an H×W×K crop already of the net's size, by hand."""
    chw = crop.astype(np.float64).transpose(2, 0, 1)[list(swap)]
    return (chw * raw_scale - np.asarray(mean).reshape(-1, 1, 1)) * input_scale


def write_png(path: Path, pixels: np.ndarray) -> str:
    """Save an H×W×3 uint8 array as a lossless PNG."""
    from PIL import Image

    Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8)).save(path)
    return str(path)
