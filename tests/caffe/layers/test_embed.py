import numpy as np
import pytest
import torch

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward


def text(bias=True, input_dim=5, num_output=3):
    return (
        f'type: "Embed" embed_param {{ input_dim: {input_dim} num_output: {num_output} '
        f'bias_term: {str(bias).lower()} weight_filler {{ type: "gaussian" }} '
        'bias_filler { type: "uniform" min: -1 max: 1 } }'
    )


@pytest.mark.parametrize("shape", [(1,), (4,), (2, 3), (2, 1, 2)])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_matches_torch_and_gradient(shape, bias):
    indices = np.random.default_rng(78).integers(0, 5, shape).astype(np.float32)
    layer, bottom, top = make_layer(text(bias), [indices])
    assert layer.blobs[0].shape == [5, 3]
    (y,) = run_forward(layer, bottom, top)
    weight = torch.from_numpy(layer.blobs[0].data.copy())
    ref = weight[torch.from_numpy(indices).long()]
    if bias:
        ref = ref + torch.from_numpy(layer.blobs[1].data.copy())
    assert y.shape == (*shape, 3)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-6)
    check_gradient(layer, bottom, top, check_bottom=[])


def test_repeated_indices_accumulate_into_their_row():
    layer, bottom, top = make_layer(text(bias=False), [np.array([2, 0, 2], np.float32)])
    run_forward(layer, bottom, top)
    top[0].diff[...] = [[1, 2, 3], [4, 5, 6], [10, 20, 30]]
    layer.run_backward(top, [False], bottom)
    expected = np.zeros((5, 3))
    expected[0] = [4, 5, 6]
    expected[2] = [11, 22, 33]
    np.testing.assert_array_equal(layer.blobs[0].diff, expected)


@pytest.mark.parametrize("value", [5.0, -1.0, 1.5])
def test_bad_index_names_the_layer(value):
    layer, bottom, top = make_layer(text(), [np.array([0.0, value], np.float32)])
    with pytest.raises(LayerError, match=r"under_test.*integer in \[0, 5\)"):
        run_forward(layer, bottom, top)


def test_no_gradient_into_indices():
    layer, bottom, top = make_layer(text(), [np.array([1.0], np.float32)])
    run_forward(layer, bottom, top)
    assert not layer.allow_force_backward(0)
    with pytest.raises(LayerError, match=r"under_test.*input"):
        layer.run_backward(top, [True], bottom)
