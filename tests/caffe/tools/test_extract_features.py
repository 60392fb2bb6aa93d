"""extract_features: one Datum per item and per named blob, keys %010d over all batches,
float_data = the item's values in the net's blob, channels/height/width = Caffe's legacy
shape; LMDB and LevelDB."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import caffe
from caffe.data.db import open_db
from caffe.proto import caffe_pb2
from caffe.tools import extract_features
from tests.caffe.data_fixtures import write_indexed_db

ITEMS = 7  # 3 batches of 3 wrap around the database
BATCH = 3
NET = """
name: "features"
layer {{ name: "data" type: "Data" top: "data" top: "label"
  data_param {{ source: "{source}" batch_size: {batch} backend: LMDB }}
  transform_param {{ scale: 0.01 }} }}
layer {{ name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param {{ num_output: 3 kernel_size: 2 weight_filler {{ type: "gaussian" std: 0.5 }}
                      bias_filler {{ type: "gaussian" std: 0.5 }} }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
  inner_product_param {{ num_output: 5 weight_filler {{ type: "gaussian" std: 0.5 }}
                        bias_filler {{ type: "gaussian" std: 0.5 }} }} }}
"""


@pytest.fixture
def model(tmp_path):
    """(weights, net prototxt): a net over a 7-item LMDB of 2×4×5 images, random weights."""
    write_indexed_db(tmp_path / "images", ITEMS)
    net_path = tmp_path / "net.prototxt"
    net_path.write_text(NET.format(source=tmp_path / "images", batch=BATCH))
    weights = tmp_path / "w.caffemodel"
    caffe.Net(str(net_path), caffe.TEST).save(str(weights))
    return str(weights), str(net_path)


def expected_features(weights: str, net_path: str, blobs: list[str], batches: int):
    """What the net holds in each blob, item by item, over `batches` forward passes."""
    net = caffe.Net(net_path, caffe.TEST, weights=weights)
    rows: dict[str, list[np.ndarray]] = {name: [] for name in blobs}
    for _ in range(batches):
        net.forward()
        for name in blobs:
            rows[name].extend(net.blobs[name].data.reshape(BATCH, -1).copy())
    return rows


def read_records(path: str, backend: str) -> list[tuple[str, caffe_pb2.Datum]]:
    with open_db(path, backend) as reader:
        return [(key.decode(), caffe_pb2.Datum.FromString(value)) for key, value in reader]


@pytest.mark.parametrize("backend", ["lmdb", "leveldb"])
def test_records_hold_each_items_features_under_caffes_keys(tmp_path, model, backend):
    weights, net_path = model
    dbs = [str(tmp_path / "conv_db"), str(tmp_path / "ip_db")]
    status = extract_features.main(
        [weights, net_path, "conv,ip", ",".join(dbs), "3", backend, "CPU"]
    )
    assert status == 0
    expected = expected_features(weights, net_path, ["conv", "ip"], 3)
    # conv is N×3×3×4: a Datum of 3×3×4; ip is N×5: Caffe's legacy shape pads to 5×1×1.
    for db, name, chw in ((dbs[0], "conv", (3, 3, 4)), (dbs[1], "ip", (5, 1, 1))):
        records = read_records(db, backend)
        assert [key for key, _ in records] == [f"{i:010d}" for i in range(3 * BATCH)]
        for (key, datum), values in zip(records, expected[name]):
            assert (datum.channels, datum.height, datum.width) == chw, key
            assert not datum.data and not datum.HasField("label") and not datum.encoded
            np.testing.assert_allclose(datum.float_data, values, rtol=1e-6, err_msg=key)
    # The database wrapped around: item 7 is item 0 again.
    ip = read_records(dbs[1], backend)
    assert ip[ITEMS][1].float_data == ip[0][1].float_data


def test_the_command_with_gpu_arguments(tmp_path, model):
    """`python -m caffe.tools.extract_features ... leveldb GPU 0`: on a machine without a
    CUDA device the net computes on CPU (one warning)."""
    weights, net_path = model
    out = str(tmp_path / "ip_leveldb")
    env = {**os.environ, "GLOG_minloglevel": "0", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "caffe.tools.extract_features", weights, net_path, "ip", out, "2",
         "leveldb", "GPU", "0"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Using Device_id=0" in result.stderr
    assert "Extracted features of 6 query images for feature blob ip" in result.stderr
    assert "Successfully extracted the features!" in result.stderr
    expected = expected_features(weights, net_path, ["ip"], 2)["ip"]
    records = read_records(out, "leveldb")
    assert len(records) == 2 * BATCH
    for (_, datum), values in zip(records, expected):
        np.testing.assert_allclose(datum.float_data, values, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "args,message",
    [
        ("ip,conv {tmp}/db 1 lmdb", "number of blob names (2) and dataset names (1) must be equal"),
        ("nope {tmp}/db 1 lmdb", "Unknown feature blob name nope in the network"),
        ("ip {tmp}/db x lmdb", "num_mini_batches must be an integer, got 'x'"),
        ("ip {tmp}/db 1 rocksdb", "Unknown database backend 'rocksdb'"),
        ("ip {tmp}/db 1 lmdb GPU -1", "DEVICE_ID must be an integer >= 0, got '-1'"),
    ],
)
def test_bad_arguments_fail_with_one_line(tmp_path, model, caffe_log, args, message):
    weights, net_path = model
    assert extract_features.main([weights, net_path, *args.format(tmp=tmp_path).split()]) == 1
    assert message in caffe_log.text
    assert not (tmp_path / "db").exists()


def test_an_existing_database_is_not_overwritten(tmp_path, model, caffe_log):
    weights, net_path = model
    out = tmp_path / "taken"
    out.mkdir()
    assert extract_features.main([weights, net_path, "ip", str(out), "1", "lmdb"]) == 1
    assert "already exists" in caffe_log.text
    assert list(out.iterdir()) == []


def test_too_few_arguments_print_the_usage(caffe_log):
    assert extract_features.main(["w.caffemodel", "net.prototxt", "fc7"]) == 1
    assert "Usage: extract_features  pretrained_net_param" in caffe_log.text
