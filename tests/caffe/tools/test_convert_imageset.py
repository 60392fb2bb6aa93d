import io

import numpy as np
import pytest

from caffe.data.db import open_db
from caffe.proto import caffe_pb2
from caffe.tools import convert_imageset

Image = pytest.importorskip("PIL.Image")


@pytest.fixture
def images(tmp_path):
    """Three RGB PNGs (one 5×4, with a space in its name) under tmp_path/root."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    pixels = {}
    for name, size in (("sub/a.png", (4, 5)), ("b c.png", (4, 5)), ("d.png", (5, 4))):
        rgb = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        Image.fromarray(rgb).save(root / name)
        pixels[name] = rgb
    (tmp_path / "list.txt").write_text("sub/a.png 1\nb c.png 2\nd.png 3\n")
    return pixels


def records(path):
    return [(key.decode(), caffe_pb2.Datum.FromString(value)) for key, value in open_db(str(path))]


def test_raw_bgr_records_keyed_by_line_and_path(tmp_path, images):
    args = [f"{tmp_path}/root/", str(tmp_path / "list.txt"), str(tmp_path / "db")]
    assert convert_imageset.main(args) == 0
    stored = records(tmp_path / "db")
    assert [key for key, _ in stored] == [
        "00000000_sub/a.png",
        "00000001_b c.png",
        "00000002_d.png",
    ]
    for (_, datum), rgb, label in zip(stored, images.values(), (1, 2, 3)):
        assert datum.label == label and not datum.encoded
        assert (datum.channels, datum.height, datum.width) == (3, *rgb.shape[:2])
        chw = np.frombuffer(datum.data, np.uint8).reshape(3, *rgb.shape[:2])
        np.testing.assert_array_equal(chw, rgb[:, :, ::-1].transpose(2, 0, 1))


def test_gray_resize_shuffle_with_gflags_spellings(tmp_path, images):
    args = [
        "-gray",
        "--shuffle=true",
        "--resize_height=6",
        "-resize_width",
        "3",
        str(tmp_path / "root"),
        str(tmp_path / "list.txt"),
        str(tmp_path / "db"),
    ]
    assert convert_imageset.main(args) == 0
    stored = records(tmp_path / "db")
    assert sorted(d.label for _, d in stored) == [1, 2, 3]
    for key, datum in stored:
        assert (datum.channels, datum.height, datum.width) == (1, 6, 3)
        name = key.split("_", 1)[1]
        grey = Image.fromarray(images[name]).convert("L").resize((3, 6), Image.Resampling.BILINEAR)
        np.testing.assert_array_equal(
            np.frombuffer(datum.data, np.uint8).reshape(6, 3), np.asarray(grey)
        )


def test_encoded_keeps_file_bytes_unless_resized(tmp_path, images):
    listed = [str(tmp_path / "root") + "/", str(tmp_path / "list.txt")]
    assert convert_imageset.main(["--encoded", *listed, str(tmp_path / "raw")]) == 0
    for key, datum in records(tmp_path / "raw"):
        assert datum.encoded
        assert datum.data == (tmp_path / "root" / key.split("_", 1)[1]).read_bytes()
    args = ["--encode_type=png", "--resize_height=2", "--resize_width=2", *listed]
    assert convert_imageset.main([*args, str(tmp_path / "small")]) == 0
    for _, datum in records(tmp_path / "small"):
        with Image.open(io.BytesIO(datum.data)) as image:
            assert image.format == "PNG" and image.size == (2, 2)


def test_unreadable_images_are_skipped_and_check_size_fails(tmp_path, images):
    (tmp_path / "list.txt").write_text("sub/a.png 1\nmissing.png 5\nd.png 3\n")
    count = convert_imageset.convert_imageset(
        str(tmp_path / "root"), str(tmp_path / "list.txt"), str(tmp_path / "db")
    )
    assert count == 2
    assert [key for key, _ in records(tmp_path / "db")] == ["00000000_sub/a.png", "00000002_d.png"]
    args = [
        "--check_size",
        str(tmp_path / "root"),
        str(tmp_path / "list.txt"),
        str(tmp_path / "db2"),
    ]
    assert convert_imageset.main(args) == 1


def test_existing_database_and_bad_list_are_errors(tmp_path, images):
    (tmp_path / "db").mkdir()
    assert (
        convert_imageset.main(
            [str(tmp_path / "root"), str(tmp_path / "list.txt"), str(tmp_path / "db")]
        )
        == 1
    )
    (tmp_path / "bad.txt").write_text("no_label_here\n")
    with pytest.raises(Exception, match=r"bad\.txt:1: expected 'path label'"):
        convert_imageset.read_list(str(tmp_path / "bad.txt"))


def test_gflags_boolean_spellings():
    args = ["-gray", "--shuffle=false", "--nocheck_size", "--encoded=1", "-backend=lmdb", "root"]
    assert convert_imageset._gflags_style(args) == [
        "--gray",
        "--no-shuffle",
        "--no-check_size",
        "--encoded",
        "--backend=lmdb",
        "root",
    ]
    assert convert_imageset.main(["--gray=maybe", "root", "list", "db"]) == 1
