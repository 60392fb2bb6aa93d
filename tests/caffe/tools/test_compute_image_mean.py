import numpy as np

from caffe.formats.weights_io import read_blobproto
from caffe.proto import caffe_pb2
from caffe.tools import compute_image_mean
from tests.caffe.data_fixtures import make_datum, write_db


def test_mean_of_raw_records_written_as_legacy_blob(tmp_path, caffe_log):
    items = np.random.default_rng(0).integers(0, 256, (5, 3, 4, 2), dtype=np.uint8)
    write_db(tmp_path / "db", [(f"{i:08d}", make_datum(item, i)) for i, item in enumerate(items)])
    out = tmp_path / "mean.binaryproto"
    assert compute_image_mean.main(["-backend=lmdb", str(tmp_path / "db"), str(out)]) == 0
    blob = read_blobproto(str(out))
    assert blob.legacy and blob.shape == (1, 3, 4, 2)
    expected = items.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(blob.reshaped()[0], expected, rtol=1e-6)
    proto = caffe_pb2.BlobProto.FromString(out.read_bytes())
    assert (proto.num, proto.channels, proto.height, proto.width) == (1, 3, 4, 2)
    for channel in range(3):
        value = expected[channel].mean()
        assert f"mean_value channel [{channel}]: {value:g}" in caffe_log.text


def test_float_records_and_no_output_file(tmp_path):
    items = [np.full((1, 2, 2), v, np.float32) for v in (0.5, 1.5)]
    write_db(tmp_path / "db", [(str(i), make_datum(item)) for i, item in enumerate(items)])
    mean = compute_image_mean.compute_image_mean(str(tmp_path / "db"))
    np.testing.assert_allclose(mean, np.ones((1, 1, 2, 2)))


def test_size_mismatch_and_empty_database_fail(tmp_path, caffe_log):
    records = [
        ("a", make_datum(np.zeros((1, 2, 2), np.uint8))),
        ("b", make_datum(np.zeros((1, 3, 2), np.uint8))),
    ]
    write_db(tmp_path / "db", records)
    assert compute_image_mean.main([str(tmp_path / "db")]) == 1
    assert "Incorrect data field size: record 'b'" in caffe_log.text
    write_db(tmp_path / "empty", [])
    assert compute_image_mean.main([str(tmp_path / "empty")]) == 1
    assert "has no records" in caffe_log.text
