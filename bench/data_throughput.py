"""Data pipeline throughput: the engine's Data and ImageData layers beside a plain
single-threaded Pillow + numpy loop doing the same work, in the same run, for each number
of decode threads.

The work, per image: read the record (LMDB) or file (ImageData), decode the 256×256 JPEG
(or take the raw uint8 Datum), BGR C×H×W as Caffe, a random 227×227 crop, a mirror coin,
subtract the per-channel mean, into a float32 batch of 64. The engine's layers are timed
as a net's forward pass in steady state (its prefetch queue drained first), the plain loop
on the same records. Prints images/s and ours ÷ plain; targets (issue 11): ≥ 1.6× the plain
loop for JPEGs (Data and ImageData) with every core in use, ≥ 5,000 images/s for raw Datums.

    .venv/bin/python bench/data_throughput.py [--threads 1,2] [--images 512] [--batches 12]
                                              [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("GLOG_minloglevel", "2")
from google.protobuf import text_format

import caffe
from caffe.data.db import open_db_writer
from caffe.proto import caffe_pb2

SIDE, CROP, BATCH = 256, 227, 64
MEAN = (104.0, 117.0, 123.0)  # BGR
JPEG_QUALITY = 90


def synthetic_image(rng: np.random.Generator) -> np.ndarray:
    """H×W×3 RGB uint8 with the structure of a photo (smooth regions, edges, some noise), so
    that JPEG sizes and decode times are those of real pictures, not of noise or flat colour."""
    y, x = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32) / SIDE
    image = np.empty((SIDE, SIDE, 3), np.float32)
    for c in range(3):
        a, b = rng.uniform(1, 6, 2).tolist()
        phase = rng.uniform(0, 6.3)
        image[:, :, c] = 127 + 90 * np.sin(a * 6.3 * x + phase) * np.cos(b * 6.3 * y)
    for _ in range(6):  # a few hard-edged blocks
        top, left = rng.integers(0, SIDE - 40, 2)
        image[top : top + rng.integers(20, 80), left : left + rng.integers(20, 80)] = rng.uniform(
            0, 255, 3
        )
    image += rng.normal(0, 6, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def write_sources(directory: Path, count: int) -> dict[str, str]:
    """An LMDB of encoded JPEG Datums, one of raw uint8 Datums, and JPEG files + a list."""
    from PIL import Image

    rng = np.random.default_rng(0)
    jpeg_db = open_db_writer(str(directory / "jpeg_lmdb"), "lmdb", overwrite=True)
    raw_db = open_db_writer(str(directory / "raw_lmdb"), "lmdb", overwrite=True)
    images = directory / "images"
    images.mkdir()
    lines = []
    for i in range(count):
        rgb = synthetic_image(rng)
        buffer = io.BytesIO()
        Image.fromarray(rgb).save(buffer, format="JPEG", quality=JPEG_QUALITY)
        encoded = buffer.getvalue()
        label = i % 10
        jpeg = caffe_pb2.Datum(channels=3, height=SIDE, width=SIDE, data=encoded, label=label,
                               encoded=True)  # fmt: skip
        jpeg_db.put(f"{i:08d}".encode(), jpeg.SerializeToString())
        bgr_chw = np.ascontiguousarray(rgb[:, :, ::-1].transpose(2, 0, 1))
        raw = caffe_pb2.Datum(channels=3, height=SIDE, width=SIDE, data=bgr_chw.tobytes(),
                              label=label)  # fmt: skip
        raw_db.put(f"{i:08d}".encode(), raw.SerializeToString())
        (images / f"{i:06d}.jpg").write_bytes(encoded)
        lines.append(f"{images / f'{i:06d}.jpg'} {label}")
    jpeg_db.close()
    raw_db.close()
    (directory / "list.txt").write_text("\n".join(lines) + "\n")
    return {"jpeg": str(directory / "jpeg_lmdb"), "raw": str(directory / "raw_lmdb"),
            "list": str(directory / "list.txt")}  # fmt: skip


# ----- the plain loop ----------------------------------------------------------------------------
def plain_images_per_s(kind: str, source: str, batches: int) -> float:
    """The same work in one thread: Pillow decode, numpy crop/mirror/mean, a float32 batch."""
    from PIL import Image

    mean = np.array(MEAN, np.float32).reshape(3, 1, 1)
    rng = np.random.default_rng(1)
    out = np.empty((BATCH, 3, CROP, CROP), np.float32)
    if kind == "list":
        paths = [line.rsplit(" ", 1)[0] for line in Path(source).read_text().splitlines()]
        records = iter(paths * (batches * BATCH // len(paths) + 2))
    else:
        import lmdb

        env = lmdb.open(source, readonly=True, lock=False)
        txn = env.begin()
        values = [value for _, value in txn.cursor()]
        env.close()
        records = iter(values * (batches * BATCH // len(values) + 2))
    started = time.perf_counter()
    for _ in range(batches):
        for i in range(BATCH):
            record = next(records)
            if kind == "list":
                with Image.open(record) as image:
                    bgr = np.asarray(image.convert("RGB"))[:, :, ::-1].transpose(2, 0, 1)
            else:
                datum = caffe_pb2.Datum.FromString(record)
                if datum.encoded:
                    with Image.open(io.BytesIO(datum.data)) as image:
                        bgr = np.asarray(image.convert("RGB"))[:, :, ::-1].transpose(2, 0, 1)
                else:
                    bgr = np.frombuffer(datum.data, np.uint8).reshape(3, SIDE, SIDE)
            top, left = rng.integers(0, SIDE - CROP + 1, 2)
            view = bgr[:, top : top + CROP, left : left + CROP]
            if rng.random() < 0.5:
                view = view[:, :, ::-1]
            np.subtract(view, mean, out=out[i])
    return batches * BATCH / (time.perf_counter() - started)


# ----- the engine ------------------------------------------------------------------------------
def layer_text(kind: str, source: str) -> str:
    transform = (f"transform_param {{ crop_size: {CROP} mirror: true "
                 + " ".join(f"mean_value: {m:g}" for m in MEAN) + " }")  # fmt: skip
    if kind == "list":
        return (f'layer {{ name: "data" type: "ImageData" top: "data" top: "label" {transform} '
                f'image_data_param {{ source: "{source}" batch_size: {BATCH} }} }}')  # fmt: skip
    return (f'layer {{ name: "data" type: "Data" top: "data" top: "label" {transform} '
            f'data_param {{ source: "{source}" batch_size: {BATCH} '
            "backend: LMDB } }")  # fmt: skip


def ours_images_per_s(kind: str, source: str, batches: int, threads: int) -> float:
    if hasattr(caffe, "set_data_threads"):
        caffe.set_data_threads(threads)
    param = text_format.Parse(layer_text(kind, source), caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    net = caffe.Net(param)
    layer = net.layers[0]
    depth = max(1, layer.layer_param.data_param.prefetch)
    for _ in range(2 * depth + 4):  # drain what was prefetched while the net was built, and
        net.forward()  # let the batch tensors go round (Note [spare batches], prefetch.py)
    started = time.perf_counter()
    for _ in range(batches):
        net.forward()
    elapsed = time.perf_counter() - started
    layer.close()
    return batches * BATCH / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parser.add_argument("--threads", default=",".join(str(t) for t in range(1, cores + 1)))
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="medians over this many rounds")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--sources", default="jpeg,list,raw", help="of jpeg, list, raw")
    args = parser.parse_args()
    if args.device == "cuda":
        caffe.set_mode_gpu()
    threads = [int(t) for t in args.threads.split(",")]
    with tempfile.TemporaryDirectory(prefix="data-throughput-") as tmp:
        sources = write_sources(Path(tmp), args.images)
        print(f"{args.images} 256x256 images (JPEG q{JPEG_QUALITY}), batch {BATCH}, crop {CROP}, "
              f"mirror, mean; {cores} cores; device {args.device}")  # fmt: skip
        print(f"{'source':<14}{'threads':>8}{'ours img/s':>12}{'plain img/s':>13}{'ratio':>8}")
        results = {}
        kinds = [k for k in ("jpeg", "list", "raw") if k in args.sources.split(",")]
        labels = {"jpeg": "Data JPEG", "list": "ImageData", "raw": "Data raw"}
        for kind in kinds:
            label = labels[kind]
            for t in threads:
                ours, plain = [], []
                for _ in range(args.rounds):  # alternating, so that noise hits both
                    plain.append(plain_images_per_s(kind, sources[kind], args.batches))
                    ours.append(ours_images_per_s(kind, sources[kind], args.batches, t))
                o, p = statistics.median(ours), statistics.median(plain)
                results[(kind, t)] = (o, p)
                print(f"{label:<14}{t:>8}{o:>12.0f}{p:>13.0f}{o / p:>7.2f}x", flush=True)
    top = max(threads)
    checks = {
        "jpeg": ("Data JPEG ≥ 1.6x plain", 1.6, lambda o, p: o / p),
        "list": ("ImageData ≥ 1.6x plain", 1.6, lambda o, p: o / p),
        "raw": ("raw Datums ≥ 5000 img/s", 5000.0, lambda o, p: o),
    }
    for kind in kinds:
        name, target, measure = checks[kind]
        value = measure(*results[(kind, top)])
        print(f"{name}: {value:.2f} at {top} threads -> {'met' if value >= target else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
