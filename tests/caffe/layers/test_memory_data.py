import numpy as np
import pytest

import caffe
from caffe.errors import CaffeError, LayerError
from tests.caffe.data_fixtures import net_param
from tests.caffe.layer_harness import make_layer, run_forward

NET = """name: "memory" layer { name: "data" type: "MemoryData" top: "data" top: "label"
    memory_data_param { batch_size: 2 channels: 3 height: 2 width: 1 } }"""


def arrays(n):
    data = np.arange(n * 6, dtype=np.float32).reshape(n, 3, 2, 1)
    return data, np.arange(n, dtype=np.float32) + 100


def test_set_input_arrays_walks_batches_in_order_and_wraps():
    net = caffe.Net(net_param(NET))
    data, labels = arrays(6)
    net.set_input_arrays(data, labels)
    for start in (0, 2, 4, 0, 2):
        out = net.forward()
        np.testing.assert_array_equal(out["data"], data[start : start + 2])
        np.testing.assert_array_equal(out["label"], labels[start : start + 2])
    assert net.blobs["label"].data.shape == (2,)


def test_reset_starts_again_from_the_first_item():
    net = caffe.Net(net_param(NET))
    data, labels = arrays(4)
    net.set_input_arrays(data, labels)
    net.forward()
    net.set_input_arrays(data[::-1].copy(), labels[::-1].copy())
    np.testing.assert_array_equal(net.forward()["label"], [103, 102])


def test_count_and_shape_errors_name_the_layer():
    net = caffe.Net(net_param(NET))
    data, labels = arrays(3)
    with pytest.raises(LayerError, match=r"'data'.*multiple of batch_size"):
        net.set_input_arrays(data, labels)
    wrong = np.zeros((2, 3, 1, 2), np.float32)
    with pytest.raises(LayerError, match=r"'data'.*expected N×3×2×1"):
        net.set_input_arrays(wrong, labels[:2])
    with pytest.raises(LayerError, match="one value per item"):
        net.set_input_arrays(arrays(2)[0], np.zeros((2, 2, 1, 1), np.float32))
    with pytest.raises(CaffeError, match="float32"):
        net.set_input_arrays(data.astype(np.float64), labels)


def test_forward_before_set_input_arrays_is_an_error():
    layer, bottom, top = make_layer(
        "type: 'MemoryData' memory_data_param { batch_size: 1 channels: 1 height: 1 width: 1 }",
        [],
        num_tops=2,
    )
    with pytest.raises(LayerError, match="set_input_arrays"):
        run_forward(layer, bottom, top)


def test_missing_dimensions_are_an_error():
    with pytest.raises(LayerError, match="must be specified and positive"):
        make_layer("type: 'MemoryData' memory_data_param { batch_size: 2 }", [], num_tops=2)
