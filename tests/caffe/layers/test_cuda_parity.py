"""Every layer of this group on CUDA against the same layer on CPU: forward outputs,
bottom gradients, parameter values (BatchNorm updates its statistics in forward) and
parameter gradients must agree. Skipped without a CUDA device (CI has none)."""

import numpy as np
import pytest
import torch

import caffe
from caffe.blob import Blob
from caffe.layer import create_layer
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import layer_param

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST
RNG = np.random.default_rng(99)


def normal(*shape):
    return RNG.normal(0, 1, shape).astype(np.float32)


def labels(high, *shape):
    return RNG.integers(0, high, shape).astype(np.float32)


class DoubleIt(caffe.Layer):
    """A Python layer for the parity run: numpy code on host views of CUDA blobs."""

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = 2 * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = 2 * top[0].diff


UNIFORM = 'filler { type: "uniform" min: -1 max: 1 }'
# id: (prototxt, bottoms, number of tops, phase, which bottoms get gradients)
CASES = {
    "Sigmoid": ('type: "Sigmoid"', [normal(2, 3, 4)], 1, TRAIN, [True]),
    "TanH": ('type: "TanH"', [normal(2, 3, 4)], 1, TRAIN, [True]),
    "AbsVal": ('type: "AbsVal"', [normal(2, 3, 4)], 1, TRAIN, [True]),
    "BNLL": ('type: "BNLL"', [normal(2, 3, 4)], 1, TRAIN, [True]),
    "ELU": ('type: "ELU" elu_param { alpha: 0.7 }', [normal(2, 3, 4)], 1, TRAIN, [True]),
    "Power": ('type: "Power" power_param { power: 1.7 scale: 0.5 shift: 2 }',
              [np.abs(normal(2, 3, 4))], 1, TRAIN, [True]),
    "Exp": ('type: "Exp" exp_param { base: 2 scale: 0.5 shift: 1 }', [normal(2, 3)], 1,
            TRAIN, [True]),
    "Log": ('type: "Log" log_param { base: 3 scale: 2 shift: 1 }', [np.abs(normal(2, 3))], 1,
            TRAIN, [True]),
    "Swish": ('type: "Swish" swish_param { beta: 1.3 }', [normal(2, 3, 4)], 1, TRAIN, [True]),
    "Clip": ('type: "Clip" clip_param { min: -0.5 max: 0.7 }', [normal(2, 3, 4)], 1, TRAIN,
             [True]),
    "Threshold": ('type: "Threshold" threshold_param { threshold: 0.1 }', [normal(2, 3)], 1,
                  TRAIN, [False]),
    "Dropout-TEST": ('type: "Dropout"', [normal(2, 3, 4)], 1, TEST, [True]),
    "PReLU": (f'type: "PReLU" prelu_param {{ {UNIFORM} }}', [normal(2, 3, 4)], 1, TRAIN, [True]),
    "BatchNorm-TRAIN": ('type: "BatchNorm"', [normal(3, 2, 4)], 1, TRAIN, [True]),
    "BatchNorm-TEST": ('type: "BatchNorm"', [normal(3, 2, 4)], 1, TEST, [True]),
    "Scale": (f'type: "Scale" scale_param {{ bias_term: true {UNIFORM} }}', [normal(2, 3, 4)], 1,
              TRAIN, [True]),
    "Scale-2": ('type: "Scale"', [normal(2, 3, 4), normal(3, 4)], 1, TRAIN, [True, True]),
    "Bias": (f'type: "Bias" bias_param {{ {UNIFORM} }}', [normal(2, 3, 4)], 1, TRAIN, [True]),
    "Softmax": ('type: "Softmax"', [normal(2, 5, 3)], 1, TRAIN, [True]),
    "MVN": ('type: "MVN"', [normal(2, 3, 5)], 1, TRAIN, [True]),
    "Reduction": ('type: "Reduction" reduction_param { operation: ASUM axis: 1 }',
                  [normal(2, 3, 4)], 1, TRAIN, [True]),
    "Embed": ('type: "Embed" embed_param { input_dim: 6 num_output: 4 weight_filler '
              '{ type: "gaussian" } }', [labels(6, 3, 2)], 1, TRAIN, [False]),
    "Parameter": ('type: "Parameter" parameter_param { shape { dim: 2 dim: 3 } }', [], 1, TRAIN,
                  []),
    "EuclideanLoss": ('type: "EuclideanLoss"', [normal(4, 3), normal(4, 3)], 1, TRAIN,
                      [True, True]),
    "SigmoidCrossEntropyLoss": ('type: "SigmoidCrossEntropyLoss" loss_param { ignore_label: 2 }',
                                [normal(4, 3), labels(3, 4, 3)], 1, TRAIN, [True, False]),
    "HingeLoss": ('type: "HingeLoss" hinge_loss_param { norm: L2 }', [normal(4, 5), labels(5, 4)],
                  1, TRAIN, [True, False]),
    "MultinomialLogisticLoss": ('type: "MultinomialLogisticLoss"',
                                [np.abs(normal(4, 5)) + 0.1, labels(5, 4)], 1, TRAIN,
                                [True, False]),
    "InfogainLoss": ('type: "InfogainLoss"', [normal(4, 3, 2), labels(3, 4, 2),
                                              np.abs(normal(3, 3))], 2, TRAIN,
                     [True, False, False]),
    "ContrastiveLoss": ('type: "ContrastiveLoss"', [normal(4, 3), normal(4, 3), labels(2, 4)], 1,
                        TRAIN, [True, True, False]),
    "Accuracy": ('type: "Accuracy" accuracy_param { top_k: 2 }', [normal(6, 4), labels(4, 6)], 2,
                 TEST, [False, False]),
    "ArgMax": ('type: "ArgMax" argmax_param { top_k: 2 out_max_val: true }', [normal(3, 5)], 1,
               TEST, [False]),
    "Python": ('type: "Python" python_param { module: "tests.caffe.layers.test_cuda_parity" '
               'layer: "DoubleIt" }', [normal(2, 3)], 1, TRAIN, [True]),
}  # fmt: skip


def run_on(device, case, params=None):
    """Set up, forward and backward one layer on `device`; everything as numpy arrays."""
    text, arrays, num_tops, phase, propagate = case
    param = layer_param(text)
    param.phase = phase
    layer = create_layer(param, device)
    bottom = []
    for array in arrays:
        blob = Blob(array.shape, device=device)
        blob.data[...] = array
        bottom.append(blob)
    top = [Blob(device=device) for _ in range(num_tops)]
    layer.run_setup(bottom, top)
    layer.need_backward = True
    layer.bottom_need_backward = list(propagate)
    layer.param_propagate_down = [True] * len(layer.blobs)
    for blob, value in zip(layer.blobs, params or []):
        blob.data[...] = value
    initial_params = [b.data.copy() for b in layer.blobs]
    layer.run_forward(bottom, top)
    outputs = [t.data.copy() for t in top]
    rng = np.random.default_rng(7)
    for t in top:
        t.diff[...] = rng.uniform(-1, 1, t.shape)
    for blob in layer.blobs:
        blob.diff[...] = 0
    if any(propagate) or layer.blobs:
        layer.run_backward(top, propagate, bottom)
    grads = [b.diff.copy() for b, p in zip(bottom, propagate) if p]
    return initial_params, {
        "outputs": outputs,
        "bottom diffs": grads,
        "params": [b.data.copy() for b in layer.blobs],
        "param diffs": [b.diff.copy() for b in layer.blobs],
    }


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", list(CASES))
def test_cuda_matches_cpu(name):
    case = CASES[name]
    params, on_cpu = run_on(torch.device("cpu"), case)
    _, on_cuda = run_on(torch.device("cuda"), case, params)
    for what, cpu_values in on_cpu.items():
        for i, (a, b) in enumerate(zip(on_cuda[what], cpu_values)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"{name} {what} {i}")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_dropout_backward_applies_its_own_mask():
    case = ('type: "Dropout" dropout_param { dropout_ratio: 0.3 }', [np.ones((50, 40),
            np.float32)], 1, TRAIN, [True])  # fmt: skip
    _, result = run_on(torch.device("cuda"), case)
    (y,), (dx,) = result["outputs"], result["bottom diffs"]
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.7)}
    np.testing.assert_array_equal(dx == 0, y == 0)
