import numpy as np
import pytest

from caffe.data.db import open_db
from caffe.proto import caffe_pb2
from caffe.tools import convert_digits

pytest.importorskip("sklearn")


def read_all(path):
    records = [(key, caffe_pb2.Datum.FromString(value)) for key, value in open_db(str(path))]
    images = np.stack([np.frombuffer(d.data, np.uint8).reshape(28, 28) for _, d in records])
    return [key for key, _ in records], images, np.array([d.label for _, d in records])


def test_writes_every_digit_once_as_mnist_like_records(tmp_path, capsys):
    assert convert_digits.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    test_count = 360  # ceil(1797 · 0.2), as scikit-learn's train_test_split
    assert f"digits_train_lmdb: {1797 - test_count} records" in out
    assert f"digits_test_lmdb: {test_count} records" in out
    train_keys, train, train_labels = read_all(tmp_path / "digits_train_lmdb")
    test_keys, test, test_labels = read_all(tmp_path / "digits_test_lmdb")
    assert train_keys == [f"{i:08d}".encode() for i in range(1797 - test_count)]
    assert len(test_keys) == test_count
    datum = caffe_pb2.Datum.FromString(next(iter(open_db(str(tmp_path / "digits_test_lmdb"))))[1])
    assert (datum.channels, datum.height, datum.width) == (1, 28, 28)
    for labels in (train_labels, test_labels):
        assert set(labels.tolist()) == set(range(10))
    images = np.concatenate([train, test])
    # A 4-pixel black margin around the 20×20 digit box, and full-intensity strokes inside it.
    assert images[:, :4].max() == 0 and images[:, -4:].max() == 0
    assert images[:, :, :4].max() == 0 and images[:, :, -4:].max() == 0
    assert images.max() == 255
    # The records are scikit-learn's digits in the seeded order: test first, then train.
    order = np.random.default_rng(0).permutation(1797)
    expected_images, expected_labels = reference_mnist_like()
    np.testing.assert_array_equal(test_labels, expected_labels[order[:test_count]])
    np.testing.assert_array_equal(train_labels, expected_labels[order[test_count:]])
    reference = expected_images[np.concatenate([order[test_count:], order[:test_count]])]
    assert np.abs(images.astype(int) - reference).max() <= 1  # float rounding at .5 only


def reference_mnist_like():
    """Digits scaled to 0-255, bilinearly upscaled to 20×20 (pixel centres, clamped edges) and
    padded to 28×28, computed with plain numpy."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    source = (np.arange(20) + 0.5) * (8 / 20) - 0.5
    source = np.clip(source, 0, 7)
    low = np.floor(source).astype(int)
    high = np.minimum(low + 1, 7)
    frac = source - low
    values = digits.images * (255 / 16)
    rows = values[:, low, :] * (1 - frac)[:, None] + values[:, high, :] * frac[:, None]
    box = rows[:, :, low] * (1 - frac) + rows[:, :, high] * frac
    images = np.zeros((len(values), 28, 28))
    images[:, 4:24, 4:24] = np.clip(np.round(box), 0, 255)
    return images.astype(int), digits.target


def test_split_is_fixed_by_the_seed(tmp_path):
    assert convert_digits.convert_digits(str(tmp_path / "a"), 0.5, seed=3) == (898, 899)
    convert_digits.convert_digits(str(tmp_path / "b"), 0.5, seed=3)
    convert_digits.convert_digits(str(tmp_path / "c"), 0.5, seed=4)
    a = read_all(tmp_path / "a" / "digits_test_lmdb")[1]
    np.testing.assert_array_equal(a, read_all(tmp_path / "b" / "digits_test_lmdb")[1])
    assert not np.array_equal(a, read_all(tmp_path / "c" / "digits_test_lmdb")[1])


def test_rerun_replaces_the_databases(tmp_path):
    convert_digits.convert_digits(str(tmp_path), 0.5)
    assert convert_digits.convert_digits(str(tmp_path), 0.1) == (1617, 180)
    assert len(open_db(str(tmp_path / "digits_test_lmdb"))) == 180


def test_bad_fraction_is_an_error(tmp_path):
    assert convert_digits.main([str(tmp_path), "--test-fraction", "1.5"]) == 1
