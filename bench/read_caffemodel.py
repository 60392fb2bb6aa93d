"""Fast wire-level .caffemodel I/O (caffe/formats/weights_io.py) vs plain Python protobuf.

Builds a synthetic model with the real layer shapes of VGG19-22K (VGG19's 16 conv layers,
fc6 25088->4096, fc7 4096->4096, fc8 4096->21841; about 0.9 GB), then times side by side:

  write  fast writer          write_caffemodel (includes fsync)
         protobuf             fill BlobProto.data (extend from a list, the fastest way), then
                              SerializeToString and write (no fsync)
  read   fast, views          read_caffemodel(copy=False): zero-copy views of the mmap'd file
         fast                 read_caffemodel (default): every blob in its own float32 array
         protobuf             read the bytes, NetParameter.ParseFromString, np.asarray per blob

The file is read right after it was written, so it is in the page cache: this measures
parsing, not the disk. The benchmark checks its own results: both writers must produce
identical bytes and both readers identical arrays.

    .venv/bin/python bench/read_caffemodel.py [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from caffe.formats.weights_io import BlobArray, read_caffemodel, write_caffemodel
from caffe.proto import caffe_pb2

T = TypeVar("T")

# (name, output channels, input channels) of VGG19's convolutions; 3x3 kernels.
_CONVS = [
    ("conv1_1", 64, 3), ("conv1_2", 64, 64),
    ("conv2_1", 128, 64), ("conv2_2", 128, 128),
    ("conv3_1", 256, 128), ("conv3_2", 256, 256), ("conv3_3", 256, 256), ("conv3_4", 256, 256),
    ("conv4_1", 512, 256), ("conv4_2", 512, 512), ("conv4_3", 512, 512), ("conv4_4", 512, 512),
    ("conv5_1", 512, 512), ("conv5_2", 512, 512), ("conv5_3", 512, 512), ("conv5_4", 512, 512),
]  # fmt: skip
_FCS = [("fc6", 4096, 25088), ("fc7", 4096, 4096), ("fc8", 21841, 4096)]


def vgg19_22k() -> tuple[caffe_pb2.NetParameter, dict[str, list[BlobArray]]]:
    """The net (no blobs) and random float32 weights with VGG19-22K's layer shapes."""
    rng = np.random.default_rng(0)
    net = caffe_pb2.NetParameter(name="VGG_ILSVRC_19_layers_22k")
    data = net.layer.add(name="data", type="Input")
    data.top.append("data")
    data.input_param.shape.add(dim=[1, 3, 224, 224])
    blobs: dict[str, list[BlobArray]] = {}
    bottom = "data"

    def add(name: str, kind: str, **params: object) -> caffe_pb2.LayerParameter:
        nonlocal bottom
        layer = net.layer.add(name=name, type=kind, bottom=[bottom], top=[name], **params)
        bottom = name
        return layer

    def weights(*shape: int) -> BlobArray:
        return BlobArray.from_array(rng.random(shape, dtype=np.float32) - 0.5)

    for name, out, inp in _CONVS:
        add(name, "Convolution", convolution_param=dict(num_output=out, pad=[1], kernel_size=[3]))
        blobs[name] = [weights(out, inp, 3, 3), weights(out)]
        add("relu" + name[4:], "ReLU")
        if name.endswith(("1_2", "2_2", "3_4", "4_4", "5_4")):
            add("pool" + name[4], "Pooling", pooling_param=dict(pool=0, kernel_size=2, stride=2))
    for name, out, inp in _FCS:
        add(name, "InnerProduct", inner_product_param=dict(num_output=out))
        blobs[name] = [weights(out, inp), weights(out)]
        if name != "fc8":
            add("relu" + name[2:], "ReLU")
            add("drop" + name[2:], "Dropout")
    add("prob", "Softmax")
    return net, blobs


def protobuf_write(
    path: str, net: caffe_pb2.NetParameter, blobs: dict[str, list[BlobArray]]
) -> None:
    full = caffe_pb2.NetParameter()
    full.CopyFrom(net)
    for layer in full.layer:
        for blob in blobs.get(layer.name, []):
            proto = layer.blobs.add()
            proto.shape.dim.extend(blob.shape)
            proto.data.extend(blob.data.tolist())
    with open(path, "wb") as f:
        f.write(full.SerializeToString())


def protobuf_read(path: str) -> list[list[np.ndarray]]:
    with open(path, "rb") as f:
        net = caffe_pb2.NetParameter.FromString(f.read())
    return [[np.asarray(b.data, dtype=np.float32) for b in layer.blobs] for layer in net.layer]


def timed(fn: Callable[..., T], *args: object) -> tuple[float, T]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir", default=None, help="where to write the files (default: a temp dir)"
    )
    args = parser.parse_args()
    net, blobs = vgg19_22k()
    floats = sum(b.count for layer in blobs.values() for b in layer)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        fast_path = os.path.join(tmp, "fast.caffemodel")
        proto_path = os.path.join(tmp, "protobuf.caffemodel")
        t_fast_write, _ = timed(write_caffemodel, fast_path, net, blobs)
        t_proto_write, _ = timed(protobuf_write, proto_path, net, blobs)
        size = os.path.getsize(fast_path)
        with open(fast_path, "rb") as a, open(proto_path, "rb") as b:
            assert a.read() == b.read(), "fast writer and protobuf disagree"
        os.remove(proto_path)

        t_views, views = timed(read_caffemodel, fast_path, False)
        del views
        t_fast_read, weights = timed(read_caffemodel, fast_path)
        t_proto_read, proto_arrays = timed(protobuf_read, fast_path)
        for layer, theirs in zip(weights.layers, proto_arrays):
            mine = [blob.data for blob in layer.blobs]
            assert all(np.array_equal(m, t) for m, t in zip(mine, theirs)), "readers disagree"
        del weights, proto_arrays

    print(f"synthetic VGG19-22K caffemodel: {size / 1e9:.3f} GB, {floats / 1e6:.1f} M floats, "
          f"{len(net.layer)} layers")  # fmt: skip
    rows = [
        ("write: protobuf (extend+SerializeToString)", t_proto_write, t_proto_write),
        ("write: write_caffemodel (with fsync)", t_fast_write, t_proto_write),
        ("read:  protobuf (ParseFromString+np.asarray)", t_proto_read, t_proto_read),
        ("read:  read_caffemodel(copy=False), views", t_views, t_proto_read),
        ("read:  read_caffemodel, private arrays", t_fast_read, t_proto_read),
    ]
    print(f"{'path':<46} {'seconds':>9} {'GB/s':>7} {'speed-up':>9}")
    for label, seconds, baseline in rows:
        print(
            f"{label:<46} {seconds:>9.3f} {size / 1e9 / seconds:>7.2f} {baseline / seconds:>8.1f}x"
        )


if __name__ == "__main__":
    main()
