"""caffe.layer_type_list() holds every layer type BVLC Caffe registers (its 61
REGISTER_LAYER_CLASS / REGISTER_LAYER_CREATOR names), so any BVLC prototxt finds its layers."""

from __future__ import annotations

import caffe

BVLC_LAYER_TYPES = [
    "AbsVal",
    "Accuracy",
    "ArgMax",
    "BNLL",
    "BatchNorm",
    "BatchReindex",
    "Bias",
    "Clip",
    "Concat",
    "ContrastiveLoss",
    "Convolution",
    "Crop",
    "Data",
    "Deconvolution",
    "Dropout",
    "DummyData",
    "ELU",
    "Eltwise",
    "Embed",
    "EuclideanLoss",
    "Exp",
    "Filter",
    "Flatten",
    "HDF5Data",
    "HDF5Output",
    "HingeLoss",
    "Im2col",
    "ImageData",
    "InfogainLoss",
    "InnerProduct",
    "Input",
    "LRN",
    "LSTM",
    "LSTMUnit",
    "Log",
    "MVN",
    "MemoryData",
    "MultinomialLogisticLoss",
    "PReLU",
    "Parameter",
    "Pooling",
    "Power",
    "Python",
    "RNN",
    "ReLU",
    "Reduction",
    "Reshape",
    "SPP",
    "Scale",
    "Sigmoid",
    "SigmoidCrossEntropyLoss",
    "Silence",
    "Slice",
    "Softmax",
    "SoftmaxWithLoss",
    "Split",
    "Swish",
    "TanH",
    "Threshold",
    "Tile",
    "WindowData",
]


def test_every_bvlc_layer_type_is_registered():
    registered = set(caffe.layer_type_list())
    assert len(BVLC_LAYER_TYPES) == 61
    assert sorted(set(BVLC_LAYER_TYPES) - registered) == []


def test_the_list_is_sorted_without_duplicates():
    names = list(caffe.layer_type_list())
    assert names == sorted(set(names))
