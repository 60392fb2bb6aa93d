import h5py
import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import make_layer, run_forward


def test_each_forward_appends_rows_in_legacy_4d_shape(tmp_path):
    path = tmp_path / "out.h5"
    data = np.random.default_rng(0).standard_normal((3, 2, 4)).astype(np.float32)
    label = np.arange(3, dtype=np.float32)
    text = f'type: "HDF5Output" hdf5_output_param {{ file_name: "{path}" }}'
    layer, bottom, top = make_layer(text, [data, label], num_tops=0)
    run_forward(layer, bottom, top)
    with h5py.File(path, "r") as f:
        assert f["data"].shape == (3, 2, 4, 1) and f["label"].shape == (3, 1, 1, 1)
    bottom[0].data[...] = data * 2
    run_forward(layer, bottom, top)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["data"][:, :, :, 0], np.concatenate([data, data * 2]))
        np.testing.assert_array_equal(f["label"][:].ravel(), np.concatenate([label, label]))
        assert f["data"].dtype == np.float32


def test_setup_truncates_and_errors_name_the_file(tmp_path):
    path = tmp_path / "out.h5"
    with h5py.File(path, "w") as f:
        f["stale"] = np.zeros(1)
    text = f'type: "HDF5Output" hdf5_output_param {{ file_name: "{path}" }}'
    make_layer(text, [np.zeros((1, 1), np.float32), np.zeros(1, np.float32)], num_tops=0)
    with h5py.File(path, "r") as f:
        assert list(f) == []
    bad = f'type: "HDF5Output" hdf5_output_param {{ file_name: "{tmp_path}/no/dir/x.h5" }}'
    with pytest.raises(LayerError, match=r"under_test.*no/dir/x.h5"):
        make_layer(bad, [np.zeros((1, 1), np.float32), np.zeros(1, np.float32)], num_tops=0)
    with pytest.raises(LayerError, match="same number of rows"):
        make_layer(text, [np.zeros((2, 1), np.float32), np.zeros(3, np.float32)], num_tops=0)
