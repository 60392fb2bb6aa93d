"""Building blocks shared by the zoo's generators: layers with the zoo's conventions
(Caffe's lr_mult 1/2, decay_mult 1/0 for weight/bias) and the units several nets repeat
(conv + ReLU, BatchNorm + Scale, AlexNet's fc6-fc8), the ImageNet data of Caffe's examples,
the phase-split Data layers and classifier heads of a train_val net, the Input and "prob"
of a deploy net, and the DummyData variant for timing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from caffe.net_spec import L, NetSpec, P, Top
from caffe.proto import caffe_pb2

# Weights learn at the base rate with weight decay; biases twice as fast without decay.
WEIGHT_AND_BIAS = [dict(lr_mult=1, decay_mult=1), dict(lr_mult=2, decay_mult=0)]
WEIGHT_ONLY = [dict(lr_mult=1, decay_mult=1)]


@dataclass
class DataSpec:
    """What a model reads: LMDB sources, batch sizes, input geometry and transform."""

    train_source: str
    test_source: str
    train_batch: int
    test_batch: int
    channels: int
    crop: int
    transform: dict = field(default_factory=dict)


ILSVRC12_LMDB = "examples/imagenet/ilsvrc12"


def imagenet_data(
    train_batch: int, crop: int, transform: dict, test_batch: int = 50, lmdb: str = ILSVRC12_LMDB
) -> DataSpec:
    """Colour images from `<lmdb>_train_lmdb` / `<lmdb>_val_lmdb` (Caffe's example paths)."""
    return DataSpec(
        train_source=f"{lmdb}_train_lmdb",
        test_source=f"{lmdb}_val_lmdb",
        train_batch=train_batch,
        test_batch=test_batch,
        channels=3,
        crop=crop,
        transform=transform,
    )


def conv(
    bottom: Top,
    num_output: int,
    kernel: int | tuple[int, int],
    stride: int = 1,
    pad: int | tuple[int, int] = 0,
    group: int = 1,
    weight_filler: dict | None = None,
    bias: float | None = 0.0,
    **kwargs: object,
) -> Top:
    """A Convolution; `bias=None` means no bias term. Tuples give (h, w) kernel/pad."""
    params: dict = dict(num_output=num_output)
    if isinstance(kernel, tuple):
        params.update(kernel_h=kernel[0], kernel_w=kernel[1])
    else:
        params.update(kernel_size=kernel)
    if stride != 1:
        params.update(stride=stride)
    if isinstance(pad, tuple):
        if pad != (0, 0):
            params.update(pad_h=pad[0], pad_w=pad[1])
    elif pad:
        params.update(pad=pad)
    if group != 1:
        params.update(group=group)
    params.update(weight_filler=weight_filler or dict(type="xavier"))
    if bias is None:
        params.update(bias_term=False)
        spec = WEIGHT_ONLY
    else:
        params.update(bias_filler=dict(type="constant", value=bias))
        spec = WEIGHT_AND_BIAS
    return L.Convolution(bottom, param=spec, convolution_param=params, **kwargs)


def fc(bottom: Top, num_output: int, weight_filler: dict, bias: float = 0.0) -> Top:
    return L.InnerProduct(
        bottom,
        param=WEIGHT_AND_BIAS,
        num_output=num_output,
        weight_filler=weight_filler,
        bias_filler=dict(type="constant", value=bias),
    )


def relu(bottom: Top) -> Top:
    return L.ReLU(bottom, in_place=True)


def conv_relu(n: NetSpec, bottom: Top, name: str, relu_name: str, *conv_args, **conv_kwargs) -> Top:
    """`conv(bottom, *conv_args, **conv_kwargs)` named `name`, then ReLU in place."""
    n[name] = conv(bottom, *conv_args, **conv_kwargs)
    n[relu_name] = relu(n[name])
    return n[relu_name]


def batch_norm_scale(
    n: NetSpec, bottom: Top, bn_name: str, scale_name: str, deploy: bool, **bn_params: object
) -> Top:
    """BatchNorm then Scale (with bias), both in place.

    Deploy nets use the stored statistics (use_global_stats); train_val nets leave it to
    the phase (batch statistics in TRAIN, stored in TEST).
    """
    if deploy:
        bn_params.update(use_global_stats=True)
    n[bn_name] = L.BatchNorm(bottom, in_place=True, **bn_params)
    n[scale_name] = L.Scale(n[bn_name], in_place=True, bias_term=True)
    return n[scale_name]


def dropout(bottom: Top, ratio: float) -> Top:
    return L.Dropout(bottom, dropout_ratio=ratio, in_place=True)


def fc6_to_fc8(n: NetSpec, bottom: Top, num_classes: int, hidden_bias: float) -> Top:
    """AlexNet's classifier, kept by VGG: fc6 and fc7 of 4096 (gaussian 0.005, bias
    `hidden_bias`), each with ReLU and Dropout 0.5, then fc8 (gaussian 0.01, bias 0)."""
    x = bottom
    for i in (6, 7):
        n[f"fc{i}"] = fc(x, 4096, dict(type="gaussian", std=0.005), bias=hidden_bias)
        n[f"relu{i}"] = relu(n[f"fc{i}"])
        n[f"drop{i}"] = dropout(n[f"relu{i}"], 0.5)
        x = n[f"drop{i}"]
    n.fc8 = fc(x, num_classes, dict(type="gaussian", std=0.01), bias=0.0)
    return n.fc8


def max_pool(bottom: Top, kernel: int, stride: int, pad: int = 0) -> Top:
    return _pool(bottom, P.Pooling.MAX, kernel, stride, pad)


def ave_pool(bottom: Top, kernel: int, stride: int, pad: int = 0) -> Top:
    return _pool(bottom, P.Pooling.AVE, kernel, stride, pad)


def _pool(bottom: Top, method: int, kernel: int, stride: int, pad: int) -> Top:
    params: dict = dict(pool=method, kernel_size=kernel, stride=stride)
    if pad:
        params.update(pad=pad)
    return L.Pooling(bottom, **params)


def lrn_across(bottom: Top) -> Top:
    """AlexNet's local response normalization over 5 neighbouring channels."""
    return L.LRN(bottom, local_size=5, alpha=0.0001, beta=0.75)


def train_data(n: NetSpec, spec: DataSpec) -> tuple[Top, Top]:
    """The TRAIN Data layer ("data", "label"); `finish_train_val` adds its TEST twin."""
    n.data, n.label = L.Data(
        ntop=2,
        include=dict(phase=caffe_pb2.TRAIN),
        transform_param=dict(mirror=True, crop_size=spec.crop, **spec.transform),
        data_param=dict(source=spec.train_source, batch_size=spec.train_batch, backend=P.Data.LMDB),
    )
    return n.data, n.label


def deploy_input(n: NetSpec, batch: int, channels: int, size: int) -> Top:
    n.data = L.Input(shape=dict(dim=[batch, channels, size, size]))
    return n.data


def accuracy(n: NetSpec, name: str, scores: Top, label: Top, top_k: int = 1) -> None:
    kwargs: dict = dict(include=dict(phase=caffe_pb2.TEST))
    if top_k != 1:
        kwargs.update(accuracy_param=dict(top_k=top_k))
    n[name] = L.Accuracy(scores, label, **kwargs)


def finish_train_val(n: NetSpec, name: str, spec: DataSpec) -> caffe_pb2.NetParameter:
    """The NetSpec's net with a TEST Data layer (center crop, test LMDB) after the TRAIN one."""
    built = n.to_proto()
    train = built.layer[0]
    test = caffe_pb2.LayerParameter()
    test.CopyFrom(train)
    test.include[0].phase = caffe_pb2.TEST
    # Caffe's ImageNet examples mirror only while training.
    test.transform_param.ClearField("mirror")
    test.data_param.source = spec.test_source
    test.data_param.batch_size = spec.test_batch
    net = caffe_pb2.NetParameter(name=name)
    net.layer.extend([train, test, *built.layer[1:]])
    return net


def finish_deploy(n: NetSpec, name: str) -> caffe_pb2.NetParameter:
    net = n.to_proto()
    net.name = name
    return net


Body = Callable[[NetSpec, Top], Top]  # (net, data) -> the classifier's scores


def classification_train_val(
    name: str, spec: DataSpec, body: Body, top5: bool = True
) -> caffe_pb2.NetParameter:
    """Data layers, `body`, TEST-only top-1 (and top-5) Accuracy and a SoftmaxWithLoss."""
    n = NetSpec()
    data, label = train_data(n, spec)
    scores = body(n, data)
    accuracy(n, "accuracy", scores, label)
    if top5:
        accuracy(n, "accuracy_top5", scores, label, top_k=5)
    n.loss = L.SoftmaxWithLoss(scores, label)
    return finish_train_val(n, name, spec)


def classification_deploy(name: str, batch: int, size: int, body: Body) -> caffe_pb2.NetParameter:
    """An Input of `batch` colour size x size images, `body`, and the Softmax "prob"."""
    n = NetSpec()
    scores = body(n, deploy_input(n, batch, 3, size))
    n.prob = L.Softmax(scores)
    return finish_deploy(n, name)


def dummy_variant(
    train_val: caffe_pb2.NetParameter, input_chw: tuple[int, int, int], batch: int
) -> caffe_pb2.NetParameter:
    """train_val with its Data layers replaced by one DummyData layer for `caffe time`.

    Random gaussian images of the model's input shape and label 0 (a valid class), in
    both phases, so the same layers run without any dataset.
    """
    data_layers = [layer for layer in train_val.layer if layer.type == "Data"]
    tops = list(data_layers[0].top)
    dummy = caffe_pb2.LayerParameter(name="data", type="DummyData", top=tops)
    dummy.dummy_data_param.shape.add(dim=[batch, *input_chw])
    dummy.dummy_data_param.data_filler.add(type="gaussian", std=1.0)
    if len(tops) > 1:
        dummy.dummy_data_param.shape.add(dim=[batch])
        dummy.dummy_data_param.data_filler.add(type="constant", value=0.0)
    net = caffe_pb2.NetParameter(name=train_val.name)
    net.layer.append(dummy)
    net.layer.extend(layer for layer in train_val.layer if layer.type != "Data")
    return net
