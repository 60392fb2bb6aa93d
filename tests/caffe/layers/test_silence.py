import numpy as np

from tests.caffe.layer_harness import make_layer, run_forward


def test_no_tops_and_zero_gradients_for_every_bottom_asked():
    xs = [np.ones((2, 3), np.float32), np.ones((4,), np.float32)]
    layer, bottom, top = make_layer('type: "Silence"', xs, num_tops=0)
    assert run_forward(layer, bottom, top) == []
    for blob in bottom:
        blob.diff[...] = 5
    layer.run_backward(top, [True, False], bottom)
    assert not bottom[0].diff.any()
    assert (bottom[1].diff == 5).all()
