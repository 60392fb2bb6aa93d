"""flops.layer_cost against numbers worked out by hand for a small net (nets.SMALL)."""

from __future__ import annotations

from poseidon.experiments.flops import ELEMENTWISE, layer_cost, net_costs
from tests.poseidon.experiments.nets import build

# Shapes of nets.SMALL at batch 4: data 4x3x9x9, conv1 4x8x7x7, conv2 4x6x3x3 (stride 2),
# pool 4x6x2x2, fc 4x5, scores 4x3.
DATA, CONV1, CONV2, POOL, FC, SCORES = 4 * 243, 4 * 392, 4 * 54, 4 * 24, 20, 12


def cost(net, name):
    return layer_cost(net, net._layer_names.index(name))


def test_first_conv_has_a_weight_gradient_but_no_input_gradient(tmp_path):
    c = cost(build(tmp_path), "conv1")
    gemm = 2 * CONV1 * 3 * 3 * 3  # 2 · output elements · Cin · kernel volume
    assert c.flops_forward == gemm + CONV1  # + the bias adds
    assert c.flops_backward == gemm + CONV1  # dW and the bias sum; no dX (data needs none)
    weights = 8 * 27 + 8
    assert c.bytes_forward == 4 * (DATA + weights + CONV1)
    # Backward reads the top diff, the input and writes no bottom diff; the param diffs
    # are read and written.
    assert c.bytes_backward == 4 * (CONV1 + DATA + 2 * weights)


def test_grouped_strided_conv(tmp_path):
    c = cost(build(tmp_path), "conv2")
    gemm = 2 * CONV2 * (8 // 2) * 3 * 3  # Cin/group = 4
    assert c.flops_forward == gemm + CONV2
    assert c.flops_backward == 2 * gemm + CONV2  # dX, dW, bias


def test_inner_products_learning_and_frozen(tmp_path):
    net = build(tmp_path)
    fc = cost(net, "fc")
    m, n, k = 4, 5, 24
    assert fc.flops_forward == 2 * m * n * k + m * n
    assert fc.flops_backward == 2 * (2 * m * n * k) + m * n
    frozen = cost(net, "fc_frozen")
    assert frozen.flops_forward == 2 * 4 * 3 * 5 + 4 * 3
    assert frozen.flops_backward == 2 * 4 * 3 * 5  # only dX: lr_mult 0 means no dW, no db


def test_pooling_relu_in_place_and_loss(tmp_path):
    net = build(tmp_path)
    pool = cost(net, "pool")
    assert (pool.flops_forward, pool.flops_backward) == (4 * POOL, 4 * POOL)  # AVE, 2x2
    relu = cost(net, "relu1")
    assert (relu.flops_forward, relu.flops_backward) == (CONV1, CONV1)
    # In place: the blob is read once and written once in each direction, plus backward
    # reads its data.
    assert relu.bytes_forward == 4 * 2 * CONV1
    assert relu.bytes_backward == 4 * 3 * CONV1
    loss = cost(net, "loss")
    per_forward, per_backward, _ = ELEMENTWISE["SoftmaxWithLoss"]
    assert loss.flops_forward == per_forward * SCORES
    assert loss.flops_backward == per_backward * SCORES
    data = cost(net, "data")
    assert (data.flops_forward, data.flops_backward, data.bytes) == (0, 0, 4 * (DATA + 4))


def test_a_layer_without_backward_and_an_unknown_type(tmp_path):
    net = build(tmp_path, batch=2)
    costs = net_costs(net)
    assert len(costs) == len(net.layers)
    assert costs[0].flops_backward == 0 and costs[0].bytes_backward == 0  # data: no backward
    # An unregistered type in layer_cost's eyes: the elements-based default, no exception.
    index = net._layer_names.index("relu1")
    layer = net.layers[index]
    layer.type_name = "SomethingNew"
    try:
        c = layer_cost(net, index)
    finally:
        layer.type_name = ""
    elements = 2 * 392
    assert (c.flops_forward, c.flops_backward) == (elements, elements)


def test_deconvolution_counts_the_gemm_from_its_input(tmp_path):
    text = """
    layer { name: "data" type: "Input" top: "data"
            input_param { shape { dim: 2 dim: 4 dim: 5 dim: 5 } } }
    layer { name: "up" type: "Deconvolution" bottom: "data" top: "up"
            convolution_param { num_output: 6 kernel_size: 4 stride: 2 group: 2 bias_term: false } }
    """
    net = build(tmp_path, text)
    c = cost(net, "up")
    # Every input element feeds (Cout/group)·kernel volume outputs.
    assert c.flops_forward == 2 * (2 * 4 * 25) * (6 // 2) * 16
    assert c.flops_backward == 0  # nothing reaches a loss: the net prunes its backward


def test_flops_reads_no_layer_internals():
    """flops.py asks a layer through the Layer API (flops, backward_reads_input) and its
    generic parts (type, blobs, param_propagate_down), never a type's own fields."""
    import ast
    from pathlib import Path

    import poseidon.experiments.flops as flops

    tree = ast.parse(Path(flops.__file__).read_text())
    read = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "layer"}  # fmt: skip
    assert read == {"type", "blobs", "param_propagate_down", "flops", "backward_reads_input"}
