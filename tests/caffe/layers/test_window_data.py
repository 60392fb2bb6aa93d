import numpy as np
import pytest

import caffe
from caffe.errors import CaffeError, LayerError
from caffe.formats.weights_io import write_blobproto
from caffe.layers.window_data import parse_window_file
from caffe.proto import caffe_pb2
from tests.caffe.data_fixtures import net_param
from tests.caffe.layer_harness import make_layer, run_forward

Image = pytest.importorskip("PIL.Image")
TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def save_bgr(path, bgr):
    """Write a C×H×W BGR uint8 array as a PNG (Pillow takes RGB)."""
    Image.fromarray(np.ascontiguousarray(bgr[::-1].transpose(1, 2, 0))).save(path)


def solid(bgr, height, width):
    return np.broadcast_to(np.array(bgr, np.uint8)[:, None, None], (3, height, width)).copy()


def gradient_image(height, width):
    """Pixel (y, x) = 10x + y in channel 0, plus 1 and 2 in the other channels."""
    y, x = np.mgrid[:height, :width]
    return np.stack([10 * x + y + c for c in range(3)]).astype(np.uint8)


def write_window_file(tmp_path, entries):
    """entries: [(name, bgr_array, [(label, overlap, x1, y1, x2, y2), ...]), ...]."""
    lines = []
    for index, (name, image, windows) in enumerate(entries):
        save_bgr(tmp_path / name, image)
        lines += [f"# {index}", name, "3 {} {}".format(*image.shape[1:]), str(len(windows))]
        lines += [" ".join(str(v) for v in window) for window in windows]
    (tmp_path / "windows.txt").write_text("\n".join(lines) + "\n")


def window_layer(tmp_path, params="", transform="crop_size: 4", phase=TRAIN):
    text = f"""name: "win" type: "WindowData"
        window_data_param {{ source: "{tmp_path / "windows.txt"}" root_folder: "{tmp_path}/"
                             {params} }}
        transform_param {{ {transform} }}"""
    return make_layer(text, [], num_tops=2, phase=phase)


def bilinear(image, height, width):
    """OpenCV's INTER_LINEAR by its definition (half-pixel centres, edge clamp), rounded."""

    def taps(size, out):
        f = (np.arange(out) + 0.5) * (size / out) - 0.5
        low = np.floor(f).astype(int)
        weight = f - low
        weight[low < 0], low[low < 0] = 0, 0
        weight[low >= size - 1], low[low >= size - 1] = 0, size - 1
        return low, np.minimum(low + 1, size - 1), weight

    y0, y1, wy = taps(image.shape[1], height)
    x0, x1, wx = taps(image.shape[2], width)
    img = image.astype(np.float64)
    rows = img[:, y0] * (1 - wy)[:, None] + img[:, y1] * wy[:, None]
    out = rows[:, :, x0] * (1 - wx) + rows[:, :, x1] * wx
    return np.clip(np.rint(out), 0, 255)


BACKGROUND = ("bg.png", solid((10, 20, 30), 8, 8), [(5, 0.1, 0, 0, 7, 7)])


def test_parse_splits_foreground_background_and_drops_the_rest():
    text = """# 0 a.jpg 3 10 12 4
        1 0.9 0 0 5 5
        2 0.5 1 1 4 4
        7 0.1 2 2 3 3
        3 0.4 0 0 1 1
        # 1 b.jpg 3 5 5 0"""
    parsed = parse_window_file(text, "/root/", 0.5, 0.3, "w")
    assert parsed.images == [("/root/a.jpg", (3, 10, 12)), ("/root/b.jpg", (3, 5, 5))]
    assert [(w.label, w.overlap) for w in parsed.foreground] == [(1, np.float32(0.9)), (2, 0.5)]
    assert [(w.image, w.label, w.overlap, w.x1, w.y2) for w in parsed.background] == [
        (0, 0, 0.0, 2, 3)
    ]


def test_batch_is_background_then_foreground_with_mean_and_scale(tmp_path):
    fg_image = solid((200, 100, 50), 6, 9)
    windows = [(3, 0.9, 1, 1, 4, 3), (4, 0.5, 0, 0, 8, 5)]
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", fg_image, windows)])
    caffe.set_random_seed(1)
    layer, bottom, top = window_layer(
        tmp_path,
        "batch_size: 8 fg_fraction: 0.3 scale: 0.5",
        "crop_size: 4 mean_value: 1 mean_value: 2 mean_value: 3",
    )
    assert top[0].shape == [8, 3, 4, 4] and top[1].shape == [8]
    mean = np.array([1, 2, 3], np.float32)[:, None, None]
    seen = set()
    for _ in range(4):
        data, label = run_forward(layer, bottom, top)
        # int(8 * 0.3) = 2 foreground windows, after 6 background ones.
        assert label[:6].tolist() == [0] * 6 and set(label[6:]) <= {3, 4}
        seen |= set(label[6:].tolist())
        np.testing.assert_array_equal(data[:6], np.broadcast_to((BACKGROUND[1][:, :4, :4] - mean)
                                                                * 0.5, (6, 3, 4, 4)))  # fmt: skip
        np.testing.assert_array_equal(data[6:], np.broadcast_to((fg_image[:, :4, :4] - mean)
                                                                * 0.5, (2, 3, 4, 4)))  # fmt: skip
    assert seen == {3, 4}
    layer.close()


def test_warp_matches_bilinear_resize_of_the_window(tmp_path):
    image = np.random.default_rng(0).integers(0, 256, (3, 10, 12), dtype=np.uint8)
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", image, [(1, 1.0, 2, 1, 8, 5)])])
    layer, bottom, top = window_layer(tmp_path, "batch_size: 2 fg_fraction: 1", "crop_size: 6")
    data, label = run_forward(layer, bottom, top)
    assert label.tolist() == [1, 1]
    expected = bilinear(image[:, 1:6, 2:9], 6, 6)
    for item in data:
        np.testing.assert_allclose(item, expected, atol=1)
        assert np.mean(item == expected) > 0.9
    layer.close()


def test_square_mode_grows_the_window_to_a_square(tmp_path):
    image = gradient_image(20, 20)
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", image, [(1, 1.0, 10, 10, 11, 15)])])
    params = "batch_size: 1 fg_fraction: 1"
    layer, bottom, top = window_layer(tmp_path, params + ' crop_mode: "square"', "crop_size: 7")
    # A 2×6 window centred at (11, 13) becomes the 7×7 square x 8..14, y 10..16: no resize.
    np.testing.assert_array_equal(run_forward(layer, bottom, top)[0][0], image[:, 10:17, 8:15])
    layer.close()
    layer, bottom, top = window_layer(tmp_path, params + ' crop_mode: "warp"', "crop_size: 7")
    np.testing.assert_allclose(
        run_forward(layer, bottom, top)[0][0], bilinear(image[:, 10:16, 10:12], 7, 7), atol=1
    )
    layer.close()


def test_context_pad_grows_the_window_about_its_centre(tmp_path):
    image = gradient_image(24, 24)
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", image, [(1, 1.0, 8, 8, 15, 15)])])
    layer, bottom, top = window_layer(
        tmp_path, "batch_size: 1 fg_fraction: 1 context_pad: 2", "crop_size: 12"
    )
    # Scale 12 / (12 - 2·2) = 1.5 about the centre 12: x, y from 12 - 6 = 6 to 12 + 6 = 18.
    expected = bilinear(image[:, 6:19, 6:19], 12, 12)
    np.testing.assert_allclose(run_forward(layer, bottom, top)[0][0], expected, atol=1)
    layer.close()


def test_context_beyond_the_image_stays_zero_and_mirrors(tmp_path):
    value = np.array([90, 60, 30], np.float32)[:, None, None]
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", solid((90, 60, 30), 20, 20),
                                              [(1, 1.0, 0, 0, 5, 5)])])  # fmt: skip
    caffe.set_random_seed(2)
    layer, bottom, top = window_layer(tmp_path, "batch_size: 16 fg_fraction: 1 context_pad: 2",
                                      "crop_size: 10 mirror: true mean_value: 7")  # fmt: skip
    # The grown window is x, y -2..8: 2 of its 11 pixels lie before the image, so 2 of the
    # 10 output rows and columns are padding, which keeps 0 (no mean subtracted).
    data, _ = run_forward(layer, bottom, top)
    plain, flipped = np.zeros((3, 10, 10), np.float32), np.zeros((3, 10, 10), np.float32)
    plain[:, 2:, 2:] = value - 7
    flipped[:, 2:, :8] = value - 7  # mirrored: the padding moves to the right
    kinds = [0 if np.array_equal(d, plain) else 1 if np.array_equal(d, flipped) else -1
             for d in data]  # fmt: skip
    assert -1 not in kinds and set(kinds) == {0, 1}
    layer.close()


def test_mean_file_is_read_at_the_centred_offset(tmp_path):
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", solid((9, 9, 9), 4, 4),
                                              [(1, 1.0, 0, 0, 3, 3)])])  # fmt: skip
    mean = np.random.default_rng(1).uniform(0, 5, (1, 3, 6, 7)).astype(np.float32)
    write_blobproto(str(tmp_path / "mean.binaryproto"), mean)
    layer, bottom, top = window_layer(
        tmp_path,
        "batch_size: 1 fg_fraction: 1",
        f'crop_size: 4 mean_file: "{tmp_path}/mean.binaryproto"',
    )
    # offset (7 - 4) // 2 = 1, taken from the width, for rows and columns.
    np.testing.assert_allclose(run_forward(layer, bottom, top)[0][0], 9 - mean[0, :, 1:5, 1:5])
    layer.close()


def test_cache_images_and_fast_forward_give_the_same_batches(tmp_path):
    image = np.random.default_rng(3).integers(0, 256, (3, 9, 11), dtype=np.uint8)
    windows = [(1, 1.0, 0, 0, 6, 4), (2, 0.8, 3, 2, 10, 8)]
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", image, windows)])
    params, transform = "batch_size: 6 fg_fraction: 0.5 context_pad: 1", "crop_size: 5 mirror: 1"
    caffe.set_random_seed(7)
    layer, bottom, top = window_layer(tmp_path, params, transform)
    batches = [run_forward(layer, bottom, top) for _ in range(3)]
    layer.close()
    caffe.set_random_seed(7)
    layer, bottom, top = window_layer(tmp_path, params + " cache_images: true", transform)
    layer.fast_forward(2)
    for name in ("bg.png", "fg.png"):
        (tmp_path / name).unlink()  # cached: the files are not read again
    for want, got in zip(batches[2], run_forward(layer, bottom, top)):
        np.testing.assert_array_equal(got, want)
    layer.close()


def test_rcnn_style_data_layer_runs_in_a_net(tmp_path):
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", gradient_image(16, 16),
                                              [(2, 0.7, 3, 3, 12, 9)])])  # fmt: skip
    net = caffe.Net(
        net_param(f"""
        layer {{ name: "data" type: "WindowData" top: "data" top: "label"
          include {{ phase: TRAIN }}
          transform_param {{ mirror: true crop_size: 8 mean_value: 104 mean_value: 117
                             mean_value: 123 }}
          window_data_param {{ source: "{tmp_path}/windows.txt" root_folder: "{tmp_path}/"
            batch_size: 4 fg_threshold: 0.5 bg_threshold: 0.5 fg_fraction: 0.25
            context_pad: 2 crop_mode: "warp" }} }}
        layer {{ name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
          inner_product_param {{ num_output: 3 weight_filler {{ type: "xavier" }} }} }}
        layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }}""")
    )
    net.forward()
    assert net.blobs["data"].data.shape == (4, 3, 8, 8)
    assert net.blobs["label"].data.tolist() == [0, 0, 0, 2]
    net.layers[0].close()


@pytest.mark.parametrize(
    "content,match",
    [
        ("", "Window file is empty"),
        ("0 a.png 3 4 4 0", "expected '#' starting image entry 1"),
        ("# 0 a.png 3 4 4 1 0 0.9 0 0 1 1", "foreground classes must be > 0"),
        ("# 0 a.png 3 4 4 1 1 0.9 0 0 1", "ends where y2 of window 1 of image entry 1"),
        ("# 0 a.png 3 4 4 1 1 0.9 0 0 1 1", "0 background windows"),
        ("# 3 a.png 3 4 4 2 1 0.9 0 0 1 1 0 0 0 0 1 1", "refers to image index 3"),
        ("# 0 a.png 1 4 4 2 1 0.9 0 0 1 1 0 0 0 0 1 1", "gives 1 channels"),
    ],
)
def test_bad_window_files_name_the_layer_and_the_entry(tmp_path, content, match):
    (tmp_path / "windows.txt").write_text(content)
    with pytest.raises(LayerError, match=rf"'win'.*{match}"):
        window_layer(tmp_path, "batch_size: 2")


@pytest.mark.parametrize(
    "params,transform,match",
    [
        ("batch_size: 2", "", "crop_size must be positive"),
        ("batch_size: 2 context_pad: 2", "crop_size: 4", "context_pad 2 leaves nothing"),
        ("", "crop_size: 4", "batch_size must be positive"),
        ("batch_size: 2", "crop_size: 4 mean_value: 1 mean_value: 2", "1 mean_value or as many"),
    ],
)
def test_bad_parameters_name_the_layer(tmp_path, params, transform, match):
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", solid((1, 2, 3), 4, 4),
                                              [(1, 1.0, 0, 0, 3, 3)])])  # fmt: skip
    with pytest.raises(LayerError, match=rf"'win'.*{match}"):
        window_layer(tmp_path, params, transform)


def test_missing_window_file_and_image_are_named(tmp_path):
    with pytest.raises(LayerError, match=r"Failed to open window file .*windows\.txt"):
        window_layer(tmp_path, "batch_size: 2")
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", solid((1, 2, 3), 4, 4),
                                              [(1, 1.0, 0, 0, 3, 3)])])  # fmt: skip
    (tmp_path / "fg.png").unlink()
    layer, bottom, top = window_layer(tmp_path, "batch_size: 2 fg_fraction: 1")
    with pytest.raises(CaffeError, match=r"'win'.*Could not open or find file .*fg\.png"):
        layer.run_forward(bottom, top)
    layer.close()


def test_window_outside_its_image_is_an_error_in_warp_mode(tmp_path):
    write_window_file(tmp_path, [BACKGROUND, ("fg.png", solid((1, 2, 3), 4, 4),
                                              [(1, 1.0, 0, 0, 4, 3)])])  # fmt: skip
    layer, bottom, top = window_layer(tmp_path, "batch_size: 1 fg_fraction: 1")
    with pytest.raises(CaffeError, match=r"'win'.*\(0, 0, 4, 3\) of .*fg\.png \(4×4\)"):
        layer.run_forward(bottom, top)
    layer.close()
