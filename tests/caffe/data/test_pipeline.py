"""The data layers' parallel pipeline (caffe/data/threads.py, batch_assembly.py): any number
of decode threads gives the same batches, in the same order, with the same sharding; an
error names the record; the top takes the batch without a copy and layers that share it
follow; a pipeline slower than the net says so."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch

import caffe
from caffe.data import threads as data_threads
from caffe.data.prefetch import BatchLoader, Prefetcher
from caffe.errors import CaffeError
from caffe.formats.weights_io import write_blobproto
from caffe.proto import caffe_pb2
from tests.caffe.data_fixtures import make_datum, net_param, write_db

TRAIN = caffe_pb2.TRAIN
ITEMS, SIDE, CROP, BATCH = 24, 20, 16, 5


@pytest.fixture(autouse=True)
def _restore_threads():
    yield
    data_threads._chosen = None


def pictures(count: int = ITEMS) -> list[np.ndarray]:
    """Distinct H×W×3 RGB uint8 pictures with some structure (so JPEG keeps them apart)."""
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:SIDE, 0:SIDE]
    return [np.clip(np.stack([(x * (i + 1) + 9 * c) % 256 + rng.integers(0, 30, (SIDE, SIDE))
                              for c in (y, x, x + y)], -1), 0, 255).astype(np.uint8)
            for i in range(count)]  # fmt: skip


def jpeg(rgb: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def write_sources(tmp_path, kind: str) -> str:
    if kind == "list":
        lines = []
        for i, rgb in enumerate(pictures()):
            path = tmp_path / f"{i:03d}.jpg"
            path.write_bytes(jpeg(rgb))
            lines.append(f"{path} {i}")
        (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
        return str(tmp_path / "list.txt")
    records = []
    for i, rgb in enumerate(pictures()):
        if kind == "jpeg":
            datum = caffe_pb2.Datum(channels=3, height=SIDE, width=SIDE, data=jpeg(rgb),
                                    label=i, encoded=True)  # fmt: skip
        else:
            datum = make_datum(np.ascontiguousarray(rgb.transpose(2, 0, 1)), i)
        records.append((f"{i:08d}", datum))
    write_db(tmp_path / "db", records)
    return str(tmp_path / "db")


def data_net(kind: str, source: str, transform: str) -> caffe.Net:
    if kind == "list":
        layer = (f'type: "ImageData" image_data_param {{ source: "{source}" '
                 f"batch_size: {BATCH} shuffle: true }}")  # fmt: skip
    else:
        layer = (
            f'type: "Data" data_param {{ source: "{source}" batch_size: {BATCH} backend: LMDB }}'
        )
    text = (f'layer {{ name: "data" {layer} top: "data" top: "label" '
            f"transform_param {{ {transform} }} }}")  # fmt: skip
    return caffe.Net(net_param(text, TRAIN))


def batches(kind, source, transform, threads, count=7):
    caffe.set_data_threads(threads)
    caffe.set_random_seed(11)
    net = data_net(kind, source, transform)
    out = []
    for _ in range(count):
        net.forward()
        out.append((net.blobs["data"].data.copy(), net.blobs["label"].data.copy()))
    net.layers[0].close()
    return out


TRANSFORMS = {
    "crop, mirror, mean values, scale": f"crop_size: {CROP} mirror: true mean_value: 100 "
    "mean_value: 110 mean_value: 120 scale: 0.5",
    "mean file, mirror": "mirror: true mean_file: '{mean}'",
}


@pytest.mark.parametrize("kind", ["jpeg", "raw", "list"])
@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("rank", [None, 1])
def test_every_thread_count_gives_the_same_batches(tmp_path, kind, transform, rank):
    source = write_sources(tmp_path, kind)
    mean = np.random.default_rng(0).uniform(0, 255, (1, 3, SIDE, SIDE)).astype(np.float32)
    write_blobproto(str(tmp_path / "mean.binaryproto"), mean)
    text = TRANSFORMS[transform].format(mean=tmp_path / "mean.binaryproto")
    if rank is not None:  # worker 1 of 2: its shard, in its order
        caffe.set_solver_count(2)
        caffe.set_solver_rank(rank)
    try:
        one = batches(kind, source, text, 1)
        for threads in (2, 3):
            other = batches(kind, source, text, threads)
            for (data, label), (data2, label2) in zip(one, other):
                np.testing.assert_array_equal(label, label2)
                np.testing.assert_array_equal(data, data2)
    finally:
        caffe.set_solver_count(1)
        caffe.set_solver_rank(0)
    labels = np.concatenate([label for _, label in one]).astype(int)
    if kind != "list":  # key order, every rank its k % P == r records (list: shuffled)
        step, first = (2, rank) if rank is not None else (1, 0)
        expected = [(first + step * k) % ITEMS for k in range(len(labels))]
        assert labels.tolist() == expected


def test_a_corrupt_jpeg_is_named_whatever_the_threads(tmp_path):
    good = [jpeg(rgb) for rgb in pictures(8)]
    records = []
    for i, data in enumerate(good):
        if i in (3, 6):
            data = data[:40] + b"\x00" * 30  # cut: not a JPEG any more
        datum = caffe_pb2.Datum(channels=3, height=SIDE, width=SIDE, data=data, label=i,
                                encoded=True)  # fmt: skip
        records.append((f"{i:08d}", datum))
    write_db(tmp_path / "db", records)
    for threads in (1, 3):
        caffe.set_data_threads(threads)
        text = (f'layer {{ name: "data" type: "Data" top: "data" top: "label" data_param {{ '
                f'source: "{tmp_path / "db"}" batch_size: 8 backend: LMDB }} }}')  # fmt: skip
        net = caffe.Net(net_param(text, TRAIN))
        with pytest.raises(CaffeError, match=r"Layer 'data' \(type Data\): record '00000003' of "
                           r".*db: cannot decode image data"):  # fmt: skip
            net.forward()
        net.layers[0].close()


def test_the_top_takes_the_batch_and_what_shares_it_follows(tmp_path):
    source = write_sources(tmp_path, "raw")
    text = (f'layer {{ name: "data" type: "Data" top: "data" top: "label" data_param {{ '
            f'source: "{source}" batch_size: {BATCH} backend: LMDB }} }} '
            'layer { name: "a" type: "Power" bottom: "label" top: "a" } '
            'layer { name: "b" type: "Power" bottom: "label" top: "b" }')  # fmt: skip
    net = caffe.Net(net_param(text, TRAIN))
    memory = set()
    for step in range(4):
        net.forward()
        label = net.blobs["label"].data
        assert label.tolist() == [BATCH * step + k for k in range(BATCH)]
        # The label feeds two layers through a Split: both saw this batch, not the last.
        np.testing.assert_array_equal(net.blobs["a"].data, label)
        np.testing.assert_array_equal(net.blobs["b"].data, label)
        memory.add(net.blobs["data"].data_tensor.data_ptr())
    assert len(memory) > 1  # the batches' own memory, handed over (Caffe's set_cpu_data)
    net.layers[0].close()


class SlowLoader(BatchLoader):
    def __init__(self, delay_s: float) -> None:
        super().__init__("Layer 'slow' (type Test)")
        self.delay_s = delay_s

    def load_batch(self):
        time.sleep(self.delay_s)
        return [torch.zeros(2)]


def test_a_net_waiting_for_its_data_is_told_so(caffe_log):
    prefetcher = Prefetcher(SlowLoader(0.05), depth=1, pin_memory=False, name="slow")
    try:
        prefetcher.next_batch()  # the first batch waits for the pipeline to start: not counted
        assert prefetcher.waits == 0 and "Waiting for data" not in caffe_log.text
        prefetcher.next_batch()
        prefetcher.next_batch()
    finally:
        prefetcher.close()
    assert prefetcher.waits == 2 and prefetcher.total_waited_s > 0.03
    assert caffe_log.text.count("Layer 'slow' (type Test): Waiting for data") == 1  # once a minute


def test_the_number_of_threads(monkeypatch):
    monkeypatch.delenv("CAFFE_DATA_THREADS", raising=False)
    monkeypatch.setattr(data_threads, "available_cores", lambda: 16)
    monkeypatch.setenv("POSEIDON_LOCAL_WORKERS", "4")  # four workers share the host's cores
    assert data_threads.data_threads() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # torchrun's count wins
    assert data_threads.data_threads() == 2
    monkeypatch.setenv("CAFFE_DATA_THREADS", "3")
    assert data_threads.data_threads() == 3
    caffe.set_data_threads(5)
    assert data_threads.data_threads() == 5
    monkeypatch.setenv("CAFFE_DATA_THREADS", "zero")
    data_threads._chosen = None
    with pytest.raises(CaffeError, match="CAFFE_DATA_THREADS='zero': want a whole number >= 1"):
        data_threads.data_threads()
    with pytest.raises(CaffeError, match=r"set_data_threads\(0\)"):
        caffe.set_data_threads(0)
