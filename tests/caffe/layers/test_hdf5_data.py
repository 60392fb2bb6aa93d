import h5py
import numpy as np
import pytest

import caffe
from caffe.errors import LayerError
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import make_layer, run_forward


def write_h5(path, rows, start, label_dtype=np.float32):
    with h5py.File(path, "w") as f:
        f["data"] = (start + np.arange(rows * 6, dtype=np.float64)).reshape(rows, 2, 3)
        f["label"] = (start + np.arange(rows)).astype(label_dtype)


def hdf5_layer(tmp_path, files, batch_size, shuffle=False, phase=caffe_pb2.TRAIN, tops=2):
    (tmp_path / "list.txt").write_text("".join(f"{name}\n\n" for name in files))
    top_names = " ".join(f'top: "{name}"' for name in ("data", "label")[:tops])
    text = f"""name: "h5" type: "HDF5Data" {top_names} hdf5_data_param {{
        source: "{tmp_path / "list.txt"}" batch_size: {batch_size}
        shuffle: {str(shuffle).lower()} }}"""
    return make_layer(text, [], num_tops=tops, phase=phase)


@pytest.fixture
def two_files(tmp_path):
    write_h5(tmp_path / "a.h5", 3, 0)
    write_h5(tmp_path / "b.h5", 2, 100, label_dtype=np.int32)
    return [str(tmp_path / "a.h5"), "b.h5"]  # b.h5 is found beside the list file


def test_rows_in_order_across_files_and_wrap(tmp_path, two_files):
    layer, bottom, top = hdf5_layer(tmp_path, two_files, 4)
    assert top[0].shape == [4, 2, 3] and top[1].shape == [4]
    labels = [0, 1, 2, 100, 101]
    for batch in range(3):
        data, label = run_forward(layer, bottom, top)
        expected = [labels[(batch * 4 + i) % 5] for i in range(4)]
        assert label.tolist() == expected
        start = [6 * v if v < 100 else 100 + 6 * (v - 100) for v in expected]
        np.testing.assert_array_equal(data.reshape(4, 6)[:, 0], start)


def test_shuffle_visits_every_row_once_per_epoch(tmp_path, two_files):
    caffe.set_random_seed(11)
    layer, bottom, top = hdf5_layer(tmp_path, two_files, 5, shuffle=True)
    epochs = [sorted(run_forward(layer, bottom, top)[1].tolist()) for _ in range(4)]
    assert all(epoch == [0, 1, 2, 100, 101] for epoch in epochs)


def test_rank_sharding(tmp_path, two_files):
    caffe.set_solver_count(2)
    caffe.set_solver_rank(1)
    try:
        layer, bottom, top = hdf5_layer(tmp_path, two_files, 4)
    finally:
        caffe.set_solver_count(1)
        caffe.set_solver_rank(0)
    # Offsets 1, 3, 5, 7 -> rows 1, 100, 0, 2 of the 5-row cycle.
    assert run_forward(layer, bottom, top)[1].tolist() == [1, 100, 0, 2]


def test_missing_dataset_names_layer_file_and_dataset(tmp_path):
    with h5py.File(tmp_path / "only_data.h5", "w") as f:
        f["data"] = np.zeros((2, 1))
    with pytest.raises(LayerError, match=r"'h5'.*only_data.h5 has no dataset 'label'"):
        hdf5_layer(tmp_path, [str(tmp_path / "only_data.h5")], 1)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(LayerError, match=r"'h5'.*Failed opening HDF5 file: .*nowhere.h5"):
        hdf5_layer(tmp_path, [str(tmp_path / "nowhere.h5")], 1)
    text = "name: 'h5' type: 'HDF5Data' top: 'x' hdf5_data_param { source: 'no.txt' batch_size: 1 }"
    with pytest.raises(LayerError, match=r"cannot read source list file 'no\.txt'"):
        make_layer(text, [], num_tops=1)


def test_mismatched_rows_between_files_are_an_error(tmp_path):
    write_h5(tmp_path / "a.h5", 1, 0)
    with h5py.File(tmp_path / "b.h5", "w") as f:
        f["data"] = np.zeros((1, 3, 2))
        f["label"] = np.zeros(1)
    layer, bottom, top = hdf5_layer(tmp_path, [str(tmp_path / "a.h5"), str(tmp_path / "b.h5")], 1)
    with pytest.raises(LayerError, match="differ from the first file"):
        for _ in range(2):
            run_forward(layer, bottom, top)


@pytest.mark.parametrize("shuffle", [False, True])
def test_whole_batches_walk_the_rows_as_one_row_batches_do(tmp_path, shuffle):
    # Batches of 3 from files of 7 and 5 rows: some lie inside a file (one copy per top),
    # some straddle a file's end or the wrap (row by row); batches of 1 are the plain walk.
    write_h5(tmp_path / "a.h5", 7, 0)
    write_h5(tmp_path / "b.h5", 5, 100)
    files = [str(tmp_path / "a.h5"), str(tmp_path / "b.h5")]
    caffe.set_random_seed(5)
    layer, bottom, top = hdf5_layer(tmp_path, files, 3, shuffle=shuffle)
    batches = [run_forward(layer, bottom, top) for _ in range(10)]
    caffe.set_random_seed(5)
    one, bottom1, top1 = hdf5_layer(tmp_path, files, 1, shuffle=shuffle)
    rows = [run_forward(one, bottom1, top1) for _ in range(30)]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]),
                                  np.concatenate([r[1] for r in rows]))  # fmt: skip
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]),
                                  np.concatenate([r[0] for r in rows]))  # fmt: skip
    assert layer.offset == one.offset == 30


def test_batch_larger_than_all_files_warns_once(tmp_path, two_files, caffe_log):
    layer, bottom, top = hdf5_layer(tmp_path, two_files, 6)
    for _ in range(3):
        run_forward(layer, bottom, top)
    warnings = [r.getMessage() for r in caffe_log.records if "wraps around" in r.getMessage()]
    assert warnings == [
        f"Layer 'h5' (type HDF5Data): batch_size 6 is larger than the 5 records of "
        f"hdf5_data_param.source '{tmp_path / 'list.txt'}': every batch wraps around and "
        "repeats records"
    ]


def test_batch_that_fits_the_files_does_not_warn(tmp_path, two_files, caffe_log):
    layer, bottom, top = hdf5_layer(tmp_path, two_files, 5)
    for _ in range(3):
        run_forward(layer, bottom, top)
    assert "Looping around to first file." in caffe_log.text
    assert "wraps around" not in caffe_log.text
