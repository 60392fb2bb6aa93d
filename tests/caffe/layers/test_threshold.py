import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import make_layer, run_forward


@pytest.mark.parametrize("shape", [(1, 1), (2, 3, 4), (1, 3, 2, 5)])
@pytest.mark.parametrize("threshold", [0.0, 0.3, -1.0])
def test_forward_matches_numpy(shape, threshold):
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[0] = threshold  # exactly at the threshold: not above it
    text = f'type: "Threshold" threshold_param {{ threshold: {threshold} }}'
    layer, bottom, top = make_layer(text, [x])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, (x > np.float32(threshold)).astype(np.float32))
    assert y.reshape(-1)[0] == 0


def test_in_place_forward():
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    layer, bottom, _ = make_layer('type: "Threshold" threshold_param { threshold: 0.5 }', [x])
    layer.run_forward(bottom, bottom)
    np.testing.assert_array_equal(bottom[0].data, [[0, 0, 1]])


def test_backward_is_refused_with_the_layer_name():
    layer, bottom, top = make_layer('type: "Threshold"', [np.ones((2, 2), np.float32)])
    run_forward(layer, bottom, top)
    layer.run_backward(top, [False], bottom)  # nothing asked: fine
    with pytest.raises(LayerError, match=r"under_test.*no backward"):
        layer.run_backward(top, [True], bottom)
