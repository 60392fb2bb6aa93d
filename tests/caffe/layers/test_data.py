import gc

import numpy as np
import pytest

import caffe
from caffe.errors import CaffeError, LayerError
from caffe.formats.weights_io import write_blobproto
from caffe.proto import caffe_pb2
from tests.caffe.data_fixtures import make_datum, net_param, write_db, write_indexed_db
from tests.caffe.layer_harness import make_layer, run_forward

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def data_text(source, batch_size, transform="", extra="backend: LMDB"):
    return f"""type: "Data" data_param {{ source: "{source}" batch_size: {batch_size} {extra} }}
        transform_param {{ {transform} }}"""


@pytest.fixture
def solvers():
    """Set solver count/rank for a test and restore the single-process defaults after it."""

    def set_to(rank, count):
        caffe.set_solver_count(count)
        caffe.set_solver_rank(rank)

    yield set_to
    set_to(0, 1)


def labels_of(layer, bottom, top, batches):
    return [run_forward(layer, bottom, top)[1].astype(int).tolist() for _ in range(batches)]


def test_key_order_wrap_around_and_tops(tmp_path, caffe_log):
    items = write_indexed_db(tmp_path / "db", 5)
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 3), [], num_tops=2, phase=TEST)
    assert top[0].shape == [3, 2, 4, 5] and top[1].shape == [3]
    expected = [[0, 1, 2], [3, 4, 0], [1, 2, 3]]
    for batch in expected:
        data, label = run_forward(layer, bottom, top)
        assert label.dtype == np.float32 and label.tolist() == batch
        np.testing.assert_array_equal(data, np.stack([items[i] for i in batch]).astype(np.float32))
    assert "Restarting data prefetching from start." in caffe_log.text
    layer.close()


def test_single_top_and_float_data(tmp_path):
    values = [
        np.random.default_rng(i).standard_normal((3, 2, 2)).astype(np.float32) for i in range(3)
    ]
    write_db(tmp_path / "db", [(f"{i:08d}", make_datum(v, i)) for i, v in enumerate(values)])
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 2), [], num_tops=1, phase=TEST)
    (data,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(data, np.stack(values[:2]))
    layer.close()


def test_test_phase_crop_is_centred(tmp_path):
    items = write_indexed_db(tmp_path / "db", 2, shape=(2, 5, 6))
    text = data_text(tmp_path / "db", 2, "crop_size: 3")
    layer, bottom, top = make_layer(text, [], num_tops=2, phase=TEST)
    assert top[0].shape == [2, 2, 3, 3]
    data, _ = run_forward(layer, bottom, top)
    # (5-3)//2 = 1 rows and (6-3)//2 = 1 columns off the top-left corner.
    np.testing.assert_array_equal(data, np.stack(items)[:, :, 1:4, 1:4].astype(np.float32))
    layer.close()


def window_offsets(item, crop):
    """All (row, col) offsets whose crop window of `item` equals `crop`."""
    size = crop.shape[-1]
    height, width = item.shape[1:]
    return [
        (r, c)
        for r in range(height - size + 1)
        for c in range(width - size + 1)
        if np.array_equal(item[:, r : r + size, c : c + size], crop)
    ]


def test_train_phase_crop_is_random_and_within_bounds(tmp_path):
    items = write_indexed_db(tmp_path / "db", 4, shape=(1, 6, 6))
    text = data_text(tmp_path / "db", 4, "crop_size: 4")
    layer, bottom, top = make_layer(text, [], num_tops=2, phase=TRAIN)
    seen = set()
    for _ in range(6):
        data, label = run_forward(layer, bottom, top)
        for crop, index in zip(data, label.astype(int)):
            offsets = window_offsets(items[index].astype(np.float32), crop)
            assert len(offsets) == 1, "every crop is a window inside its item"
            seen.add(offsets[0])
    assert len(seen) > 1, "TRAIN offsets vary (24 draws from 9 windows)"
    layer.close()


def test_mirror_flips_some_items_in_test_phase(tmp_path):
    items = write_indexed_db(tmp_path / "db", 16, shape=(2, 3, 4))
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 16, "mirror: true"), [], 2, TEST)
    data, label = run_forward(layer, bottom, top)
    flipped = 0
    for out, index in zip(data, label.astype(int)):
        item = items[index].astype(np.float32)
        if np.array_equal(out, item[:, :, ::-1]):
            flipped += 1
        else:
            np.testing.assert_array_equal(out, item)
    assert 0 < flipped < 16, "a fair coin per item, in TEST phase too"
    layer.close()


def test_mean_file_at_uncropped_position_then_scale(tmp_path):
    items = write_indexed_db(tmp_path / "db", 2, shape=(2, 5, 5))
    mean = np.random.default_rng(0).uniform(0, 50, (1, 2, 5, 5)).astype(np.float32)
    write_blobproto(str(tmp_path / "mean.binaryproto"), mean, legacy4d=True)
    text = data_text(
        tmp_path / "db", 2, f'crop_size: 3 scale: 0.5 mean_file: "{tmp_path / "mean.binaryproto"}"'
    )
    layer, bottom, top = make_layer(text, [], num_tops=2, phase=TEST)
    data, _ = run_forward(layer, bottom, top)
    expected = ((np.stack(items).astype(np.float32) - mean) * 0.5)[:, :, 1:4, 1:4]
    np.testing.assert_allclose(data, expected, rtol=1e-6)
    layer.close()


@pytest.mark.parametrize("values", [[7.0], [7.0, 100.0]])
def test_mean_value_per_channel_or_replicated(tmp_path, values):
    items = write_indexed_db(tmp_path / "db", 1, shape=(2, 2, 3))
    mean_text = " ".join(f"mean_value: {v}" for v in values)
    layer, bottom, top = make_layer(
        data_text(tmp_path / "db", 1, f"{mean_text} scale: 2"), [], 2, TEST
    )
    data, _ = run_forward(layer, bottom, top)
    mean = np.array(values if len(values) == 2 else values * 2, np.float32).reshape(1, 2, 1, 1)
    np.testing.assert_allclose(data, (items[0][None].astype(np.float32) - mean) * 2)
    layer.close()


def test_mean_file_and_mean_value_are_exclusive(tmp_path):
    write_indexed_db(tmp_path / "db", 1)
    text = data_text(tmp_path / "db", 1, 'mean_file: "m.binaryproto" mean_value: 1')
    with pytest.raises(LayerError, match=r"under_test.*mean_file and mean_value"):
        make_layer(text, [], 2, TEST)


def test_encoded_datums_decode_to_bgr(tmp_path):
    pytest.importorskip("PIL")
    from caffe.data.image_codec import encode_image

    bgr = np.random.default_rng(3).integers(0, 256, (3, 4, 5), dtype=np.uint8)
    datum = caffe_pb2.Datum(data=encode_image(bgr, "png"), encoded=True, label=4)
    write_db(tmp_path / "db", [("a", datum)])
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 1), [], 2, TEST)
    data, label = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(data[0], bgr.astype(np.float32))
    assert label.tolist() == [4]
    layer.close()


@pytest.mark.parametrize("count", [2, 3])
def test_rank_sharding_covers_every_item_once_per_epoch(tmp_path, solvers, count):
    n = 7
    write_indexed_db(tmp_path / "db", n)
    seen = []
    for rank in range(count):
        solvers(rank, count)
        layer, bottom, top = make_layer(data_text(tmp_path / "db", 1), [], 2, TRAIN)
        assert (layer.shard.rank, layer.shard.count) == (rank, count)
        mine = [label[0] for label in labels_of(layer, bottom, top, 5)]
        # Rank r keeps running offsets r, r+P, r+2P, ...; the item at offset k is k mod n.
        assert mine == [(rank + j * count) % n for j in range(5)]
        seen += mine[: len(range(rank, n, count))]  # this rank's share of the first epoch
        layer.close()
    assert sorted(seen) == list(range(n))


def test_test_phase_never_skips(tmp_path, solvers):
    write_indexed_db(tmp_path / "db", 4)
    solvers(1, 2)
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 4), [], 2, TEST)
    assert labels_of(layer, bottom, top, 1) == [[0, 1, 2, 3]]
    layer.close()


def test_same_seed_same_batches(tmp_path):
    write_indexed_db(tmp_path / "db", 6, shape=(1, 6, 6))
    text = data_text(tmp_path / "db", 3, "crop_size: 3 mirror: true")
    runs = []
    for _ in range(2):
        caffe.set_random_seed(1234)
        layer, bottom, top = make_layer(text, [], 2, TRAIN)
        runs.append([run_forward(layer, bottom, top)[0] for _ in range(3)])
        layer.close()
    for first, second in zip(*runs):
        np.testing.assert_array_equal(first, second)


def test_prefetch_thread_stops_when_the_net_is_collected(tmp_path):
    write_indexed_db(tmp_path / "db", 3)
    net = caffe.Net(
        net_param(f"""layer {{ name: "data" top: "data" top: "label"
        {data_text(tmp_path / "db", 2)} }}""")
    )
    net.forward()
    assert net.blobs["data"].data.shape == (2, 2, 4, 5)
    thread = net.layers[0].prefetcher.thread
    assert thread.is_alive()
    del net
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_close_stops_the_thread(tmp_path):
    write_indexed_db(tmp_path / "db", 3)
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 1), [], 2, TEST)
    run_forward(layer, bottom, top)  # the thread is running and has batches queued
    layer.close()
    assert not layer.prefetcher.thread.is_alive()
    with pytest.raises(LayerError, match="prefetch thread has stopped"):
        layer.run_forward(bottom, top)


def test_bad_source_names_layer_and_path(tmp_path):
    missing = tmp_path / "no_such_lmdb"
    with pytest.raises(LayerError, match=rf"under_test.*{missing}"):
        make_layer(data_text(missing, 1), [], 2, TRAIN)


def test_corrupt_record_fails_in_forward_naming_the_key(tmp_path):
    good = make_datum(np.zeros((1, 2, 2), np.uint8))
    write_db(tmp_path / "db", [("a", good), ("b", b"\xff\xff\xff garbage")])
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 2), [], 2, TEST)
    with pytest.raises(CaffeError, match=r"under_test.*'b'.*not a serialized Datum"):
        layer.run_forward(bottom, top)
    layer.close()


def test_default_leveldb_backend_reads_an_lmdb_with_a_warning(tmp_path, caffe_log):
    write_indexed_db(tmp_path / "db", 2)
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 2, extra=""), [], 2, TEST)
    assert run_forward(layer, bottom, top)[1].tolist() == [0, 1]
    assert "reading it as LMDB" in caffe_log.text
    layer.close()


def test_leveldb_source(tmp_path):
    write_indexed_db(tmp_path / "db", 3, backend="leveldb")
    layer, bottom, top = make_layer(
        data_text(tmp_path / "db", 3, extra="backend: LEVELDB"), [], 2, TEST
    )
    assert run_forward(layer, bottom, top)[1].tolist() == [0, 1, 2]
    layer.close()


def _wrap_warnings(log):
    return [r.getMessage() for r in log.records if "every batch wraps around" in r.getMessage()]


@pytest.mark.parametrize("backend", ["lmdb", "leveldb"])
def test_batch_larger_than_the_database_warns_once(tmp_path, caffe_log, backend):
    if backend == "leveldb":
        pytest.importorskip("plyvel")
    write_indexed_db(tmp_path / "db", 3, backend=backend)
    text = data_text(tmp_path / "db", 5, extra=f"backend: {backend.upper()}")
    layer, bottom, top = make_layer(text, [], 2, TEST)
    assert labels_of(layer, bottom, top, 3)[0] == [0, 1, 2, 0, 1]  # wraps, as Caffe
    assert _wrap_warnings(caffe_log) == [
        f"Layer 'under_test' (type Data): batch_size 5 is larger than the 3 records of "
        f"data_param.source '{tmp_path / 'db'}': every batch wraps around and repeats records"
    ]
    layer.fast_forward(2)  # a resumed run: a new loader, still one warning per layer
    labels_of(layer, bottom, top, 2)
    assert len(_wrap_warnings(caffe_log)) == 1
    layer.close()


def test_batch_larger_than_this_workers_shard_warns(tmp_path, caffe_log, solvers):
    write_indexed_db(tmp_path / "db", 6)
    solvers(1, 2)
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 4), [], 2, TRAIN)
    assert labels_of(layer, bottom, top, 1) == [[1, 3, 5, 1]]
    (message,) = _wrap_warnings(caffe_log)
    assert "batch_size 4 is larger than the 6 records" in message
    assert "this worker's shard, rank 1 of 2, reads 3 of them before repeating" in message
    layer.close()


def test_batch_that_fits_the_database_or_shard_does_not_warn(tmp_path, caffe_log, solvers):
    write_indexed_db(tmp_path / "db", 6)
    solvers(0, 2)
    layer, bottom, top = make_layer(data_text(tmp_path / "db", 3), [], 2, TRAIN)
    labels_of(layer, bottom, top, 4)  # several passes
    assert "Restarting data prefetching from start." in caffe_log.text
    assert _wrap_warnings(caffe_log) == []
    layer.close()
