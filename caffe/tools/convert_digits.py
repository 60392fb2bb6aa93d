"""scikit-learn's digits as an MNIST-like pair of LMDBs, for the demo and the tests.

    python -m caffe.tools.convert_digits OUT_DIR [--test-fraction 0.2] [--seed 0]

The 1797 digits (8×8, values 0-16) ship inside scikit-learn, so nothing is downloaded. Each
is scaled to 0-255, upscaled bilinearly to 20×20 and centred in a 28×28 black image, the way
MNIST centres its digits in a 20×20 box, and stored as a Datum (1×28×28 uint8, label 0-9)
under keys %08d in OUT_DIR/digits_train_lmdb and OUT_DIR/digits_test_lmdb. The split is a
fixed permutation drawn from `seed`; the test set gets ceil(N·fraction) digits, as
scikit-learn's train_test_split (360 of 1797 by default). Records are stored in the shuffled
order, so a Data layer (which reads in key order) sees the classes mixed. Existing databases
at those paths are replaced.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys

import numpy as np
import torch

from caffe.data.db import open_db_writer
from caffe.errors import CaffeError
from caffe.proto import caffe_pb2

_log = logging.getLogger("caffe")
IMAGE_SIZE = 28  # as MNIST
DIGIT_BOX = 20  # MNIST's digits fill a 20×20 box centred in the image
TRAIN_DB, TEST_DB = "digits_train_lmdb", "digits_test_lmdb"


def digits_as_mnist() -> tuple[np.ndarray, np.ndarray]:
    """(images N×28×28 uint8, labels N int) for scikit-learn's digits."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise CaffeError("convert_digits needs scikit-learn (pip install scikit-learn)") from None
    digits = load_digits()
    small = torch.from_numpy(digits.images.astype(np.float32) * (255.0 / 16.0))[:, None]
    box = torch.nn.functional.interpolate(
        small, size=(DIGIT_BOX, DIGIT_BOX), mode="bilinear", align_corners=False
    )
    margin = (IMAGE_SIZE - DIGIT_BOX) // 2
    images = np.zeros((len(small), IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    box_pixels = box[:, 0].round().clamp(0, 255).numpy().astype(np.uint8)
    images[:, margin : margin + DIGIT_BOX, margin : margin + DIGIT_BOX] = box_pixels
    return images, digits.target.astype(np.int64)


def _write(path: str, images: np.ndarray, labels: np.ndarray) -> None:
    with open_db_writer(path, "lmdb", overwrite=True) as writer:
        for index, (image, label) in enumerate(zip(images, labels)):
            datum = caffe_pb2.Datum(
                channels=1,
                height=IMAGE_SIZE,
                width=IMAGE_SIZE,
                data=image.tobytes(),
                label=int(label),
            )
            writer.put(f"{index:08d}", datum.SerializeToString())


def convert_digits(out_dir: str, test_fraction: float = 0.2, seed: int = 0) -> tuple[int, int]:
    """Write the train and test LMDBs under out_dir; returns (train_count, test_count)."""
    if not 0.0 < test_fraction < 1.0:
        raise CaffeError(f"test fraction must be between 0 and 1, got {test_fraction}")
    images, labels = digits_as_mnist()
    order = np.random.default_rng(seed).permutation(len(images))
    test_count = math.ceil(len(images) * test_fraction)  # as scikit-learn's train_test_split
    test, train = order[:test_count], order[test_count:]
    os.makedirs(out_dir, exist_ok=True)
    for name, indices in ((TRAIN_DB, train), (TEST_DB, test)):
        _write(os.path.join(out_dir, name), images[indices], labels[indices])
        _log.info("Wrote %d digits to %s", len(indices), os.path.join(out_dir, name))
    return len(train), len(test)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caffe.tools.convert_digits",
        description="Write scikit-learn's digits as MNIST-like 1x28x28 LMDBs.",
    )
    parser.add_argument("out_dir", help="directory for digits_train_lmdb and digits_test_lmdb")
    parser.add_argument(
        "--test-fraction",
        type=float,
        default=0.2,
        help="share of the digits in the test set (default 0.2)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the split (default 0)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        train_count, test_count = convert_digits(args.out_dir, args.test_fraction, args.seed)
    except CaffeError as e:
        _log.error("%s", e)
        return 1
    print(f"{os.path.join(args.out_dir, TRAIN_DB)}: {train_count} records")
    print(f"{os.path.join(args.out_dir, TEST_DB)}: {test_count} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
