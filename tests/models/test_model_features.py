"""Each model uses the layers and features that docs/caffe_format.md §3.2 lists for it."""

import pytest

from caffe.proto import caffe_pb2
from tests.models.zoo import MODEL_NAMES, layers_of, read_net, type_counts

Pooling = caffe_pb2.PoolingParameter
LRN = caffe_pb2.LRNParameter


def by_name(net):
    return {layer.name: layer for layer in net.layer}


def in_place(layer) -> bool:
    return list(layer.bottom) == list(layer.top)


def test_lenet():
    net = read_net("lenet")
    counts = type_counts(net)
    assert counts == {
        "Data": 2,
        "Convolution": 2,
        "Pooling": 2,
        "InnerProduct": 2,
        "ReLU": 1,
        "SoftmaxWithLoss": 1,
        "Accuracy": 1,
    }
    for data in layers_of(net, "Data"):
        assert data.transform_param.scale == pytest.approx(0.00390625)
    for conv in layers_of(net, "Convolution") + layers_of(net, "InnerProduct"):
        assert [p.lr_mult for p in conv.param] == [1, 2]
    assert all(in_place(layer) for layer in layers_of(net, "ReLU"))
    assert all(p.pooling_param.pool == Pooling.MAX for p in layers_of(net, "Pooling"))


def test_cifar10_quick_and_full():
    quick = read_net("cifar10_quick")
    assert [p.pooling_param.pool for p in layers_of(quick, "Pooling")] == [
        Pooling.MAX,
        Pooling.AVE,
        Pooling.AVE,
    ]
    assert len(layers_of(quick, "Convolution")) == 3 and len(layers_of(quick, "ReLU")) == 3
    for data in layers_of(quick, "Data"):
        assert data.transform_param.mean_file == "examples/cifar10/mean.binaryproto"
    fillers = {
        layer.convolution_param.weight_filler.type for layer in layers_of(quick, "Convolution")
    }
    assert fillers == {"gaussian"}

    full = read_net("cifar10_full")
    lrns = layers_of(full, "LRN")
    assert len(lrns) == 2
    for lrn in lrns:
        assert lrn.lrn_param.norm_region == LRN.WITHIN_CHANNEL
        assert lrn.lrn_param.local_size == 3
        assert lrn.lrn_param.alpha == pytest.approx(5e-5)
    decays = [[p.decay_mult for p in ip.param] for ip in layers_of(full, "InnerProduct")]
    assert decays == [[250, 0]]


@pytest.mark.parametrize("name,caffenet", [("alexnet", False), ("caffenet", True)])
def test_alexnet_and_caffenet(name, caffenet):
    net = read_net(name)
    layers = by_name(net)
    groups = {c.name: c.convolution_param.group for c in layers_of(net, "Convolution")}
    assert groups == {"conv1": 1, "conv2": 2, "conv3": 1, "conv4": 2, "conv5": 2}
    assert list(layers["conv1"].convolution_param.stride) == [4]
    for lrn in layers_of(net, "LRN"):
        p = lrn.lrn_param
        assert p.norm_region == LRN.ACROSS_CHANNELS
        assert (p.local_size, p.alpha, p.beta) == (5, pytest.approx(1e-4), pytest.approx(0.75))
    order = [layer.name for layer in net.layer if layer.type in ("LRN", "Pooling")]
    expected = (
        ["pool1", "norm1", "pool2", "norm2", "pool5"]
        if caffenet
        else ["norm1", "pool1", "norm2", "pool2", "pool5"]
    )
    assert order == expected
    for pool in layers_of(net, "Pooling"):
        assert (pool.pooling_param.kernel_size, pool.pooling_param.stride) == (3, 2)
    assert [d.dropout_param.dropout_ratio for d in layers_of(net, "Dropout")] == [0.5, 0.5]
    train_data = layers_of(net, "Data")[0].transform_param
    assert (train_data.crop_size, train_data.mirror) == (227, True)
    assert train_data.mean_file.endswith("imagenet_mean.binaryproto")
    for layer in layers_of(net, "Convolution") + layers_of(net, "InnerProduct"):
        assert layer.param[1].decay_mult == 0  # no weight decay on biases
    assert layers["fc8"].inner_product_param.num_output == 1000


def test_googlenet():
    net = read_net("googlenet")
    assert len(layers_of(net, "Concat")) == 9
    losses = layers_of(net, "SoftmaxWithLoss")
    assert [list(loss.loss_weight) for loss in losses] == [[pytest.approx(0.3)]] * 2 + [[1.0]]
    accuracies = layers_of(net, "Accuracy")
    assert len(accuracies) == 6
    assert sorted(a.accuracy_param.top_k for a in accuracies) == [1, 1, 1, 5, 5, 5]
    assert all(a.include[0].phase == caffe_pb2.TEST for a in accuracies)
    ratios = sorted({d.dropout_param.dropout_ratio for d in layers_of(net, "Dropout")})
    assert ratios == [pytest.approx(0.4), pytest.approx(0.7)]
    assert Pooling.AVE in {p.pooling_param.pool for p in layers_of(net, "Pooling")}
    # Caffe's default ceil rounding takes 112 to 56 in pool1 (floor would give 55).
    assert all(not p.pooling_param.HasField("round_mode") for p in layers_of(net, "Pooling"))
    transform = layers_of(net, "Data")[0].transform_param
    assert list(transform.mean_value) == [104, 117, 123] and transform.crop_size == 224
    concat = by_name(net)["inception_3a/output"]
    assert list(concat.bottom) == [
        "inception_3a/1x1",
        "inception_3a/3x3",
        "inception_3a/5x5",
        "inception_3a/pool_proj",
    ]


@pytest.mark.parametrize(
    "name,convs,classes", [("vgg16", 13, 1000), ("vgg19", 16, 1000), ("vgg19_22k", 16, 21841)]
)
def test_vgg(name, convs, classes):
    net = read_net(name)
    conv_layers = layers_of(net, "Convolution")
    assert len(conv_layers) == convs
    for conv in conv_layers:
        assert (list(conv.convolution_param.kernel_size), list(conv.convolution_param.pad)) == (
            [3],
            [1],
        )
    pools = layers_of(net, "Pooling")
    assert len(pools) == 5
    for pool in pools:
        p = pool.pooling_param
        assert (p.pool, p.kernel_size, p.stride) == (Pooling.MAX, 2, 2)
    assert [ip.inner_product_param.num_output for ip in layers_of(net, "InnerProduct")] == [
        4096,
        4096,
        classes,
    ]
    assert len(layers_of(net, "Dropout")) == 2
    means = list(layers_of(net, "Data")[0].transform_param.mean_value)
    assert means == pytest.approx([103.939, 116.779, 123.68])


def test_resnet50():
    net = read_net("resnet50")
    counts = type_counts(net)
    assert (counts["Convolution"], counts["BatchNorm"], counts["Scale"]) == (53, 53, 53)
    assert (counts["ReLU"], counts["Eltwise"]) == (49, 16)
    assert all(not c.convolution_param.bias_term for c in layers_of(net, "Convolution"))
    for layer in layers_of(net, "BatchNorm") + layers_of(net, "Scale") + layers_of(net, "ReLU"):
        assert in_place(layer), layer.name
    assert all(s.scale_param.bias_term for s in layers_of(net, "Scale"))
    for eltwise in layers_of(net, "Eltwise"):
        assert eltwise.eltwise_param.operation == caffe_pb2.EltwiseParameter.SUM
        assert len(eltwise.bottom) == 2
    pools = [
        (p.pooling_param.pool, p.pooling_param.kernel_size, p.pooling_param.stride)
        for p in layers_of(net, "Pooling")
    ]
    assert pools == [(Pooling.MAX, 3, 2), (Pooling.AVE, 7, 1)]
    # The deploy net uses the stored statistics; train_val leaves it to the phase.
    deploy = read_net("resnet50", "deploy.prototxt")
    assert all(b.batch_norm_param.use_global_stats for b in layers_of(deploy, "BatchNorm"))
    assert not any(
        b.batch_norm_param.HasField("use_global_stats") for b in layers_of(net, "BatchNorm")
    )


def test_resnet152():
    net = read_net("resnet152")
    counts = type_counts(net)
    # 1 + 3 x 50 bottleneck convolutions, plus 4 shortcut projections.
    assert (counts["Convolution"], counts["BatchNorm"], counts["Scale"]) == (155, 155, 155)
    assert (counts["ReLU"], counts["Eltwise"]) == (151, 50)
    eltwise = [layer.name for layer in layers_of(net, "Eltwise")]
    assert eltwise[:4] == ["res2a", "res2b", "res2c", "res3a"]
    assert eltwise[-5:] == ["res4b34", "res4b35", "res5a", "res5b", "res5c"]
    # The same stem and head as ResNet-50.
    assert list(net.layer)[:6] == list(read_net("resnet50").layer)[:6]
    assert list(net.layer)[-4:] == list(read_net("resnet50").layer)[-4:]


def test_inception_v3():
    net = read_net("inception_v3")
    counts = type_counts(net)
    assert (counts["Convolution"], counts["BatchNorm"], counts["Scale"], counts["ReLU"]) == (
        94,
        94,
        94,
        94,
    )
    assert (counts["Concat"], counts["Pooling"]) == (11, 14)
    assert all(b.batch_norm_param.eps == pytest.approx(0.001) for b in layers_of(net, "BatchNorm"))
    convs = [c.convolution_param for c in layers_of(net, "Convolution")]
    assert all(not c.bias_term for c in convs)
    shapes = {(c.kernel_h, c.kernel_w, c.pad_h, c.pad_w) for c in convs if c.kernel_h}
    assert shapes == {(1, 7, 0, 3), (7, 1, 3, 0), (1, 3, 0, 1), (3, 1, 1, 0)}
    pools = [p.pooling_param for p in layers_of(net, "Pooling")]
    assert sum(p.global_pooling for p in pools) == 1
    assert any(
        p.pool == Pooling.AVE and (p.kernel_size, p.stride, p.pad) == (3, 1, 1) for p in pools
    )
    assert len(layers_of(net, "Dropout")) == 1
    assert layers_of(net, "Data")[0].transform_param.crop_size == 299


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_dummy_variant_has_the_same_layers_on_random_data(name):
    train_val, dummy = read_net(name), read_net(name, "train_val_dummy.prototxt")
    assert [layer for layer in train_val.layer if layer.type != "Data"] == list(dummy.layer[1:])
    data = dummy.layer[0]
    assert data.type == "DummyData" and list(data.top) == ["data", "label"]
    image, label = (list(shape.dim) for shape in data.dummy_data_param.shape)
    assert image[0] == label[0] <= 64 and len(label) == 1
    train_data = layers_of(train_val, "Data")[0]
    crop = train_data.transform_param.crop_size
    if crop:
        assert image[2:] == [crop, crop]
