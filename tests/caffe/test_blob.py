import gc
import pickle

import numpy as np
import pytest
import torch

from caffe.blob import Blob


def test_shape_and_legacy_accessors():
    blob = Blob([2, 3, 4, 5])
    assert blob.shape == [2, 3, 4, 5] and blob.count == 120 and blob.num_axes == 4
    assert (blob.num, blob.channels, blob.height, blob.width) == (2, 3, 4, 5)
    small = Blob([7, 9])
    assert small.shape_string() == "7 9 (63)"


@pytest.mark.parametrize(
    "shape, legacy",
    [([10, 4], (10, 4, 1, 1)), ([6], (6, 1, 1, 1)), ([], (1, 1, 1, 1)), ([2, 3, 5], (2, 3, 5, 1))],
)
def test_legacy_accessors_pad_missing_axes_at_the_end(shape, legacy):
    # BVLC's LegacyShape(0..3): a (10, 4) blob is num 10, channels 4, height 1, width 1.
    blob = Blob(shape)
    assert (blob.num, blob.channels, blob.height, blob.width) == legacy
    assert tuple(blob.legacy_shape(i) for i in range(4)) == legacy


def test_negative_legacy_indices_count_from_the_end():
    # LegacyShape(-4..-1) right-aligns the shape: what ShapeEquals compares legacy protos by.
    blob = Blob([10, 4])
    assert [blob.legacy_shape(i) for i in range(-4, 0)] == [1, 1, 10, 4]


def test_legacy_accessors_refuse_more_than_four_axes_and_bad_indices():
    with pytest.raises(ValueError, match="> 4 axes"):
        _ = Blob([1, 2, 3, 4, 5]).num
    with pytest.raises(ValueError, match=r"-4\.\.3"):
        Blob([2, 3]).legacy_shape(4)


def test_count_over_axis_ranges():
    blob = Blob([2, 3, 4, 5])
    assert blob.count == 120 and isinstance(blob.count, int)
    assert blob.count() == 120 and blob.count(0) == 120
    assert blob.count(1) == 60 and blob.count(1, 3) == 12 and blob.count(2, 2) == 1
    assert blob.count(4) == 1
    for bad in ((3, 2), (-1, 2), (0, 5)):
        with pytest.raises(ValueError, match="count"):
            blob.count(*bad)
    assert type(pickle.loads(pickle.dumps(blob.count))) is int


def test_shape_string_matches_caffe():
    assert Blob([64, 1, 28, 28]).shape_string() == "64 1 28 28 (50176)"
    assert Blob([]).shape_string() == "(1)"
    assert Blob([3, 0]).shape_string() == "3 0 (0)"


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


def test_set_data_writes_into_the_blobs_memory_and_checks_shape():
    blob = Blob([2, 2])
    view, memory = blob.data, blob.data_tensor
    tensor = torch.ones(2, 2)
    blob.set_data(tensor)
    blob.set_diff(tensor * 3)
    assert blob.data_tensor.data_ptr() == memory.data_ptr() != tensor.data_ptr()
    assert np.all(view == 1) and np.all(blob.diff == 3)
    tensor.fill_(7)  # the blob holds a copy
    assert np.all(view == 1)
    with pytest.raises(ValueError, match=r"\(3,\)"):
        blob.set_data(torch.ones(3))


def test_set_data_of_the_blobs_own_memory_is_a_no_op():
    blob = Blob([3])
    blob.data_tensor.copy_(torch.tensor([1.0, 2.0, 3.0]))
    blob.set_data(blob.data_tensor)
    np.testing.assert_array_equal(blob.data, [1, 2, 3])


def test_set_data_detaches_from_autograd():
    blob = Blob([2])
    x = torch.ones(2, requires_grad=True)
    blob.set_data(x * 2)
    assert not blob.data_tensor.requires_grad
    np.testing.assert_array_equal(blob.data, [2, 2])


def test_reshape_keeps_memory_while_the_count_fits():
    # Caffe's capacity rule: a smaller count keeps the memory, a larger one reallocates.
    blob = Blob([2, 3])
    blob.data[...] = np.arange(6).reshape(2, 3)
    ptr = blob.data_tensor.data_ptr()
    blob.reshape(2, 2)
    assert blob.data_tensor.data_ptr() == ptr
    np.testing.assert_array_equal(blob.data, [[0, 1], [2, 3]])
    blob.reshape(2, 3)
    assert blob.data_tensor.data_ptr() == ptr
    np.testing.assert_array_equal(blob.data, np.arange(6).reshape(2, 3))
    blob.reshape(3, 3)
    assert blob.data.shape == (3, 3) and np.all(blob.data == 0)


def test_share_data_makes_one_memory():
    owner, sharer = Blob([2, 3]), Blob([6])
    sharer.share_data(owner)
    sharer.share_diff(owner)
    assert sharer._data is owner._data and sharer._diff is owner._diff  # one host mirror too
    sharer.set_data(torch.arange(6.0))
    np.testing.assert_array_equal(owner.data, np.arange(6).reshape(2, 3))


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
