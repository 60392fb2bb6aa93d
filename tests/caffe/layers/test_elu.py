import numpy as np
import pytest
import torch

from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.neuron_checks import forward_backward_both_ways

SHAPES = [(1, 1), (2, 3), (2, 3, 4), (1, 3, 2, 5)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0, -0.7])
def test_forward_matches_torch_and_gradient(shape, alpha):
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(f'type: "ELU" elu_param {{ alpha: {alpha} }}', [x])
    (y,) = run_forward(layer, bottom, top)
    xt = torch.from_numpy(x)
    ref = torch.where(xt > 0, xt, alpha * (torch.exp(xt.double()) - 1).float())
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-6, atol=1e-7)
    check_gradient(layer, bottom, top, kink=0.0, kink_range=0.02)


@pytest.mark.parametrize("alpha", [1.0, -0.7])
def test_in_place_matches_out_of_place(alpha):
    x = np.random.default_rng(6).standard_normal((3, 5)).astype(np.float32)
    # For alpha >= 0 Caffe's in-place ELU takes the sign from the blob, which a later
    # in-place layer may have changed (tests/caffe/layers/test_in_place_top_data.py).
    later = alpha < 0
    forward_backward_both_ways(f'type: "ELU" elu_param {{ alpha: {alpha} }}', x,
                               later_in_place=later)  # fmt: skip
