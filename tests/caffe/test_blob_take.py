"""Note [taking fresh tensors] (caffe/blob.py): a blob adopts a kernel's fresh output instead
of copying it only where nothing can tell - no numpy view of its memory alive, no other blob
sharing it, not a parameter; everywhere else it copies, and memory stays put."""

import gc

import numpy as np
import pytest
import torch

from caffe.blob import Blob

CPU = torch.device("cpu")


def fresh(value: float, shape=(2, 3)) -> torch.Tensor:
    return torch.full(shape, value)


@pytest.mark.parametrize("half", ["data", "diff"])
def test_private_memory_is_replaced_by_the_fresh_tensor(half):
    blob = Blob((2, 3), device=CPU)
    getattr(blob, f"{half}_tensor").fill_(1)
    t = fresh(2.0)
    getattr(blob, f"take_{half}")(t)
    assert getattr(blob, f"{half}_tensor").data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(getattr(blob, half), np.full((2, 3), 2.0))


@pytest.mark.parametrize("half", ["data", "diff"])
def test_a_live_numpy_view_keeps_the_memory_and_sees_the_values(half):
    blob = Blob((2, 3), device=CPU)
    view = getattr(blob, half)[1:]  # a view of the view: it keeps the first one alive
    memory = getattr(blob, f"{half}_tensor").data_ptr()
    getattr(blob, f"take_{half}")(fresh(5.0))
    assert getattr(blob, f"{half}_tensor").data_ptr() == memory
    np.testing.assert_array_equal(view, np.full((1, 3), 5.0))
    shared = torch.from_numpy(view)  # the view lives on inside a tensor
    del view
    gc.collect()
    getattr(blob, f"take_{half}")(fresh(6.0))
    assert getattr(blob, f"{half}_tensor").data_ptr() == memory
    assert (shared == 6).all()
    del shared
    gc.collect()
    t = fresh(7.0)
    getattr(blob, f"take_{half}")(t)  # nothing outside sees it any more
    assert getattr(blob, f"{half}_tensor").data_ptr() == t.data_ptr()


def test_memory_shared_with_another_blob_is_written_not_replaced():
    owner, sharer = Blob((2, 3), device=CPU), Blob((2, 3), device=CPU)
    sharer.share_data(owner)
    sharer.share_diff(owner)
    owner.take_data(fresh(3.0))
    owner.take_diff(fresh(4.0))
    assert sharer.data_tensor.data_ptr() == owner.data_tensor.data_ptr()
    assert (sharer.data_tensor == 3).all() and (sharer.diff_tensor == 4).all()


def test_a_parameter_keeps_its_place_in_the_net_buffer():
    blob = Blob((2, 3), device=CPU)
    data, diff = torch.zeros(6), torch.zeros(6)
    blob.bind_storage(data, diff)
    blob.take_data(fresh(1.0))
    blob.take_diff(fresh(2.0))
    assert (data == 1).all() and (diff == 2).all()


def test_a_tensor_of_another_shape_is_refused_as_set_data_does():
    blob = Blob((2, 3), device=CPU)
    with pytest.raises(ValueError, match="set into blob"):
        blob.take_data(fresh(1.0, (3, 2)))


def test_a_blob_without_memory_takes_the_tensor():
    blob = Blob((2, 3), device=CPU)
    t = fresh(1.0)
    blob.take_diff(t)
    assert blob.has_diff and blob.diff_tensor.data_ptr() == t.data_ptr()


def test_views_that_died_are_forgotten_while_one_lives_on():
    blob = Blob((2, 3), device=CPU)
    kept = blob.data
    for _ in range(100):
        blob.data  # noqa: B018  (a view that dies at once)
    half = blob.memory()[0]
    assert len(half._views) <= 2 and not half.private
    del kept
    gc.collect()
    assert half.private
