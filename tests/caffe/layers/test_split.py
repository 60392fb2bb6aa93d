import numpy as np

from tests.caffe.layer_harness import make_layer


def test_tops_are_the_bottom_and_backward_sums_their_diffs():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    layer, bottom, top = make_layer('type: "Split"', [x], num_tops=3)
    layer.run_forward(bottom, top)
    for blob in top:
        assert np.shares_memory(blob.data, bottom[0].data)
    for k, blob in enumerate(top):
        blob.diff[...] = k + 1
    layer.run_backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.full((2, 3), 6.0))


def test_a_top_no_consumer_sends_a_gradient_adds_zeros_and_gets_no_memory():
    x = np.ones((2, 3), dtype=np.float32)
    layer, bottom, top = make_layer('type: "Split"', [x], num_tops=3)
    layer.run_forward(bottom, top)
    top[0].diff[...] = 2
    top[2].diff[...] = 5
    layer.run_backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.full((2, 3), 7.0))
    assert not top[1].has_diff
    assert not top[1].diff.any()  # allocated now, as zeros


def test_no_gradient_at_all_leaves_zeros():
    layer, bottom, top = make_layer('type: "Split"', [np.ones(4, dtype=np.float32)], num_tops=2)
    layer.run_forward(bottom, top)
    bottom[0].diff[...] = 3
    layer.run_backward(top, [True], bottom)
    assert not bottom[0].diff.any()
