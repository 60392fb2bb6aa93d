import sys

import numpy as np
import pytest

import caffe
from caffe.errors import CaffeError, LayerError
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import make_layer, run_forward

Image = pytest.importorskip("PIL.Image")


@pytest.fixture
def images(tmp_path):
    """Three 4×5 RGB PNGs under tmp_path/img (one with a space in its name) and their pixels."""
    (tmp_path / "img").mkdir()
    rng = np.random.default_rng(0)
    pixels = {}
    for name in ("a.png", "b c.png", "d.png"):
        rgb = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
        Image.fromarray(rgb).save(tmp_path / "img" / name)
        pixels[name] = rgb
    (tmp_path / "list.txt").write_text("a.png 3\nb c.png 7\n\nd.png 1\n")
    return pixels


def image_layer(tmp_path, params="", transform="", phase=caffe_pb2.TEST):
    text = f"""name: "img" type: "ImageData" image_data_param {{
        source: "{tmp_path / "list.txt"}" root_folder: "{tmp_path / "img"}" {params} }}
        transform_param {{ {transform} }}"""
    return make_layer(text, [], num_tops=2, phase=phase)


def bgr(rgb):
    return rgb[:, :, ::-1].transpose(2, 0, 1).astype(np.float32)


def test_reads_bgr_in_list_order_with_labels_and_wraps(tmp_path, images):
    layer, bottom, top = image_layer(tmp_path, "batch_size: 2")
    assert top[0].shape == [2, 3, 4, 5] and top[1].shape == [2]
    order = ["a.png", "b c.png", "d.png", "a.png"]
    labels = {"a.png": 3, "b c.png": 7, "d.png": 1}
    for batch in (order[:2], order[2:]):
        data, label = run_forward(layer, bottom, top)
        np.testing.assert_array_equal(data, np.stack([bgr(images[n]) for n in batch]))
        assert label.tolist() == [labels[n] for n in batch]
    layer.close()


def test_grey_resize_and_transform(tmp_path, images):
    layer, bottom, top = image_layer(
        tmp_path, "batch_size: 1 is_color: false new_height: 8 new_width: 6", "scale: 0.5"
    )
    assert top[0].shape == [1, 1, 8, 6]
    data, _ = run_forward(layer, bottom, top)
    grey = Image.fromarray(images["a.png"]).convert("L").resize((6, 8), Image.Resampling.BILINEAR)
    np.testing.assert_array_equal(data[0, 0], np.asarray(grey, np.float32) * 0.5)
    layer.close()


def test_shuffle_covers_the_list_every_epoch(tmp_path, images):
    caffe.set_random_seed(3)
    layer, bottom, top = image_layer(tmp_path, "batch_size: 3 shuffle: true", phase=0)
    for _ in range(3):
        assert sorted(run_forward(layer, bottom, top)[1].tolist()) == [1, 3, 7]
    layer.close()


def test_missing_image_names_layer_line_and_path(tmp_path, images):
    (tmp_path / "list.txt").write_text("a.png 0\nmissing.png 1\n")
    layer, bottom, top = image_layer(tmp_path, "batch_size: 2")
    with pytest.raises(LayerError, match=r"'img'.*line 2.*missing\.png"):
        layer.run_forward(bottom, top)
    layer.close()


def test_malformed_list_line_is_named(tmp_path, images):
    (tmp_path / "list.txt").write_text("a.png 0\nb.png\n")
    with pytest.raises(LayerError, match=r"list\.txt:2: expected 'path label'"):
        image_layer(tmp_path)


def test_without_pillow_the_error_says_so(tmp_path, images, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(CaffeError, match=r"'img'.*needs the Pillow package"):
        image_layer(tmp_path)


def test_batch_larger_than_the_list_warns_once(tmp_path, images, caffe_log):
    layer, bottom, top = image_layer(tmp_path, "batch_size: 4")
    assert run_forward(layer, bottom, top)[1].tolist() == [3, 7, 1, 3]
    layer.fast_forward(1)
    run_forward(layer, bottom, top)
    warnings = [r.getMessage() for r in caffe_log.records if "wraps around" in r.getMessage()]
    assert warnings == [
        f"Layer 'img' (type ImageData): batch_size 4 is larger than the 3 records of "
        f"image_data_param.source '{tmp_path / 'list.txt'}': every batch wraps around and "
        "repeats records"
    ]
    layer.close()
