import gc

import numpy as np
import pytest
import torch

from caffe.blob import Blob


def test_shape_and_legacy_accessors():
    blob = Blob([2, 3, 4, 5])
    assert blob.shape == [2, 3, 4, 5] and blob.count == 120 and blob.num_axes == 4
    assert (blob.num, blob.channels, blob.height, blob.width) == (2, 3, 4, 5)
    small = Blob([7, 9])
    assert (small.num, small.channels, small.height, small.width) == (1, 1, 7, 9)
    assert small.shape_string() == "7 9 (63)"


def test_zero_axis_blob_is_a_scalar():
    blob = Blob([])
    assert blob.count == 1 and blob.data.shape == ()
    blob.data[...] = 3.5
    assert float(blob.data_tensor) == 3.5


def test_numpy_views_share_memory_with_tensors():
    blob = Blob([2, 3])
    view = blob.data
    view[...] = np.arange(6).reshape(2, 3)
    assert torch.equal(blob.data_tensor, torch.arange(6.0).reshape(2, 3))
    blob.diff_tensor.fill_(2)
    assert np.all(blob.diff == 2)
    assert view.dtype == np.float32


def test_reshape_keeps_memory_when_count_is_unchanged():
    blob = Blob([2, 3])
    blob.data[...] = np.arange(6).reshape(2, 3)
    blob.reshape(3, 2)
    np.testing.assert_array_equal(blob.data, np.arange(6).reshape(3, 2))
    blob.reshape([4, 4])
    assert blob.data.shape == (4, 4) and np.all(blob.data == 0)


def test_views_outlive_the_blob():
    blob = Blob([4])
    blob.data[...] = [1, 2, 3, 4]
    view = blob.data
    del blob
    gc.collect()
    np.testing.assert_array_equal(view, [1, 2, 3, 4])


def test_set_data_adopts_tensor_and_checks_shape():
    blob = Blob([2, 2])
    tensor = torch.ones(2, 2)
    blob.set_data(tensor)
    assert blob.data_tensor.data_ptr() == tensor.data_ptr()
    with pytest.raises(ValueError, match=r"\(3,\)"):
        blob.set_data(torch.ones(3))


def test_bound_storage_is_fixed():
    data, diff = torch.zeros(10), torch.zeros(10)
    blob = Blob([2, 3])
    blob.bind_storage(data[2:8], diff[2:8])
    blob.data[...] = 1
    blob.set_data(torch.full((2, 3), 5.0))  # copies into the bound memory
    assert data[2:8].eq(5).all() and data[:2].eq(0).all() and data[8:].eq(0).all()
    blob.reshape(3, 2)  # same count: allowed
    with pytest.raises(ValueError, match="parameter blob"):
        blob.reshape(4, 2)


def test_share_data_and_diff():
    owner, sharer = Blob([6]), Blob([2, 3])
    sharer.share_data(owner)
    sharer.share_diff(owner)
    owner.data[...] = np.arange(6)
    np.testing.assert_array_equal(sharer.data, np.arange(6).reshape(2, 3))
    sharer.diff_tensor.add_(1)
    assert np.all(owner.diff == 1)
    with pytest.raises(ValueError):
        Blob([5]).share_data(owner)
